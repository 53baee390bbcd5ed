"""10. The path of one call: which plugin modules it calls into, in order, during one `call_tool`
(issues 20, 32, 44 and 55).

Exact from run to run, like the opcodes: `sys.setprofile` sees every Python function call and
return of the calling thread during one call on mcp 2.x (app-authorized, the server's 429 with
`Retry-After: 0`, then its answer), in each era below.

A real call is a function's frame started: a coroutine's (or generator's) first start is a call, its
resumption after an await is not. A call's caller is the nearest plugin frame below it (by `f_back`,
which links a coroutine to the one awaiting it), or none (the SDK, the loop).

Issue 44's figures, and issue 55's goals for them in every era (`goal_met`):
- `call_path`: the plugin modules entered by real calls, in order, consecutive repeats collapsed;
  `hops` = its length less one. Goal: at most GOAL_HOPS. A real call's module is entered whoever
  called it (a return enters nothing): a module calling a function of its own after another
  module's has returned to it enters it again.
- `segments`: one per attempt. A segment begins at each call of the attempt module's opener
  (ATTEMPT_OPENER) and runs until the next one, or until the first call made from the call seam
  (CALL_SEAM) after it; for each, its collapsed call sequence and the modules entered in it, each
  with the modules that called into it.
- `entered_twice`: "segment k: module <- {callers}" for each module that, within one segment, two
  or more different plugin modules call into (its owner may call it as often as it needs; a second
  module calling into it is the back-and-forth issue 44 wants gone). Goal: none.
  `entered_twice_strict` is the strict reading, for transparency: the modules that appear twice or
  more in a segment's collapsed call sequence, whoever called them.
- `callbacks`: real calls from a frame of one plugin module into another module already on the
  stack below it (e.g. a loop calling back a closure of the seam that handed it down). Goal: 0.

Beside them: `modules` (how many distinct modules), `calls` and `call_hops` (issue 32's count: the
real calls from one plugin module into another, caller first, repeats kept), and the figures
before issue 44, which count a resumed coroutine as a call (each await of an exchange resumed
through the loop into the wire): `path_with_resumptions`, `hops_with_resumptions` and
`callbacks_with_resumptions` (issue 20's goal for those was at most 8 modules, 25 hops).

Four eras of the same call (`ERAS`), each on mcp 2.x's `Client`, each call refused once with a 429
(`Retry-After: 0`) and then answered, the tool run once after it (counted on the server):
- `json`, the 2026-07-28 era over streamable HTTP, whose answer is one JSON body (the default);
- `stream`, the legacy era over streamable HTTP, whose answer is an event stream the SDK's reader reads;
- `sse`, the legacy SSE transport (the harness's "sse" app; the client opened on `sse_client`): the
  POST gets a 202 and the answer comes on the session's event stream, which the server sends
  SSE_ANSWER_AFTER_S late, after the client read the 202, as a tool that works a while answers;
- `task`, a task-backed call (the MCP tasks extension, SEP-2663) as mcp 2.3's users run one: a
  fastmcp server (with fastmcp-tasks) runs `search` as a task, and `Client.call_tool`, with
  fastmcp-tasks' `TasksClientExtension`, has its claim resolver poll `tasks/get` to the end and
  return the tool's result. The 429 refuses the creating `tools/call`, as in the other eras; the
  server holds a poll until its task is done (_AnsweredWhenDone), so the call polls once, and the
  poll (an exchange of its own, with its attempt) is in the path. Needs fastmcp-tasks (the tasks
  environment, scripts/test-lines).

Run: `python -m benchmarks.path [json|stream|sse|task]` (prints the call path, then the figures as
JSON). A merge weighed before it is made: `--as-one MODULE=INTO` (repeatable) adds `as_one`, the call
path and its hops were MODULE's functions INTO's (`as_one`: the same calls, in the same order).
"""

from __future__ import annotations

import argparse
import gc
import inspect
import json
import re
import sys
from dataclasses import dataclass, field
from types import FrameType
from typing import TYPE_CHECKING, Any

import anyio
from mcp import Client
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from benchmarks._common import NoopExporter

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

    from harness.server import ServerHandle

PACKAGE = "otel_mcp_replay"
# Issue 55's goals (issue 44's were 45 hops, for the JSON answer).
GOAL_HOPS = 32
GOAL_CALLBACKS = 0
# The function of the attempt module that opens an attempt (module, names): a call of it begins an
# attempt's segment (`next_attempt` before issue 44, kept to measure older commits alike).
ATTEMPT_OPENER: tuple[str, tuple[str, ...]] = ("attempt", ("open_attempt", "next_attempt"))
# The seam where a tool call begins and ends: its first call after an attempt ends that attempt's
# segment (the call is being settled, no longer attempted).
CALL_SEAM = "patches.session"
OUTSIDE = "(outside the plugin)"  # the caller of a call no plugin frame is below
# The eras measured, each with the client's connect mode: a JSON answer (2026-07-28), an event
# stream (legacy), the SSE transport (legacy), a task-backed call (2026-07-28).
ERAS = {"json": "2026-07-28", "stream": "legacy", "sse": "legacy", "task": "2026-07-28"}
# How late the SSE era's server sends an answer on its event stream (after the POST's 202).
SSE_ANSWER_AFTER_S = 0.1
# How long the task era's server holds a poll of a task still working (a task that returns at once).
TASK_WAIT_S = 10.0


def _append_collapsed(sequence: list[str], module: str) -> None:
    if not sequence or sequence[-1] != module:
        sequence.append(module)


def as_one(call_path: list[str], merged: dict[str, str]) -> list[str]:
    """`call_path` were each module named in `merged` part of the one it maps to: the same calls in
    the same order, consecutive repeats collapsed again (a merge takes a hop only where the two
    modules are entered one after the other)."""
    sequence: list[str] = []
    for module in call_path:
        _append_collapsed(sequence, merged.get(module, module))
    return sequence


@dataclass
class Segment:
    """One attempt's stretch of the call: the modules its real calls entered, and from where."""

    path: list[str] = field(default_factory=list)  # consecutive repeats collapsed
    # Each module entered from another module: the modules that called into it (OUTSIDE for none).
    callers: dict[str, set[str]] = field(default_factory=dict)

    def enter(self, module: str, caller: str | None) -> None:
        _append_collapsed(self.path, module)
        if caller != module:
            self.callers.setdefault(module, set()).add(OUTSIDE if caller is None else caller)

    def entered_twice(self) -> dict[str, list[str]]:
        """The modules two or more different plugin modules called into."""
        found: dict[str, list[str]] = {}
        for module, callers in sorted(self.callers.items()):
            plugin = sorted(callers - {OUTSIDE})
            if len(plugin) > 1:
                found[module] = plugin
        return found

    def repeated(self) -> list[str]:
        """The strict reading: the modules twice or more in the collapsed call sequence."""
        return sorted({module for module in self.path if self.path.count(module) > 1})

    def figures(self) -> dict[str, Any]:
        entered = {module: sorted(callers) for module, callers in sorted(self.callers.items())}
        return {"call_path": self.path, "entered": entered, "repeated": self.repeated()}


@dataclass
class Path:
    """The plugin modules one call ran through, and the calls back into one already on the stack."""

    call_path: list[str] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)  # each real call from one plugin module into another
    callbacks: int = 0
    segments: list[Segment] = field(default_factory=list)
    # Before issue 44: every frame entered, a resumed coroutine's too.
    path_with_resumptions: list[str] = field(default_factory=list)
    callbacks_with_resumptions: int = 0
    executions: int = 0  # the tool's executions on the server, the warm-up call's included

    @property
    def hops(self) -> int:
        return max(0, len(self.call_path) - 1)

    @property
    def entered_twice(self) -> list[str]:
        return [
            f"segment {k}: {module} <- {{{', '.join(callers)}}}"
            for k, segment in enumerate(self.segments, 1)
            for module, callers in segment.entered_twice().items()
        ]

    @property
    def entered_twice_strict(self) -> list[str]:
        return [
            f"segment {k}: {module}"
            for k, segment in enumerate(self.segments, 1)
            for module in segment.repeated()
        ]

    @property
    def goal_met(self) -> bool:
        return self.hops <= GOAL_HOPS and not self.entered_twice and self.callbacks <= GOAL_CALLBACKS

    def figures(self) -> dict[str, Any]:
        return {
            "hops": self.hops,
            "entered_twice": self.entered_twice,
            "callbacks": self.callbacks,
            "goal_met": self.goal_met,
            "goals": {"hops": GOAL_HOPS, "entered_twice": [], "callbacks": GOAL_CALLBACKS},
            "executions": self.executions,
            "modules": len(set(self.call_path)),
            "segments": len(self.segments),
            "call_hops": len(self.calls),
            "entered_twice_strict": self.entered_twice_strict,
            "hops_with_resumptions": max(0, len(self.path_with_resumptions) - 1),
            "callbacks_with_resumptions": self.callbacks_with_resumptions,
            "call_path": self.call_path,
            "attempt_segments": [segment.figures() for segment in self.segments],
            "calls": self.calls,
            "path_with_resumptions": self.path_with_resumptions,
        }


def _module_of(frame: FrameType) -> str | None:
    name = frame.f_globals.get("__name__", "")
    if not isinstance(name, str) or not (name == PACKAGE or name.startswith(PACKAGE + ".")):
        return None
    return name[len(PACKAGE) + 1 :] or PACKAGE


_RESUMABLE = inspect.CO_COROUTINE | inspect.CO_GENERATOR | inspect.CO_ASYNC_GENERATOR


class _Profiler:
    """The `sys.setprofile` hook: each plugin frame entered goes into `path`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.stack: list[str | None] = []  # the plugin module (or None) of each Python frame entered
        # The coroutine and generator frames started, held until the end (so no id is reused): one
        # seen again is resumed, not called.
        self.started: dict[int, FrameType] = {}
        self.segment: Segment | None = None  # the open attempt's

    def __call__(self, frame: FrameType, event: str, arg: object) -> None:
        if event == "call":
            module = _module_of(frame)
            if module is not None:
                self._entered(frame, module)
            self.stack.append(module)
        elif event == "return" and self.stack:
            self.stack.pop()

    def _entered(self, frame: FrameType, module: str) -> None:
        # The figures before issue 44: a resumption counts as a call, the stack is the profile's.
        caller = next((m for m in reversed(self.stack) if m is not None), None)
        if caller is not None and caller != module and module in self.stack:
            self.path.callbacks_with_resumptions += 1
        _append_collapsed(self.path.path_with_resumptions, module)
        if frame.f_code.co_flags & _RESUMABLE:
            if id(frame) in self.started:
                return  # resumed after an await: no call
            self.started[id(frame)] = frame
        self._called(frame, module)

    def _called(self, frame: FrameType, module: str) -> None:
        below = _plugin_frames_below(frame)
        caller = _module_of(below[0]) if below else None
        name = frame.f_code.co_name
        _append_collapsed(self.path.call_path, module)
        if caller is not None and caller != module:
            self.path.calls.append(f"{caller}.{below[0].f_code.co_name} -> {module}.{name}")
            if module in {_module_of(f) for f in below[1:]}:
                self.path.callbacks += 1
        if module == ATTEMPT_OPENER[0] and name in ATTEMPT_OPENER[1]:
            self.segment = Segment()
            self.path.segments.append(self.segment)
        elif caller == CALL_SEAM:
            self.segment = None
        if self.segment is not None:
            self.segment.enter(module, caller)


def _plugin_frames_below(frame: FrameType) -> list[FrameType]:
    """The plugin frames on the stack below `frame`, nearest first."""
    found: list[FrameType] = []
    below = frame.f_back
    while below is not None:
        if _module_of(below) is not None:
            found.append(below)
        below = below.f_back
    return found


async def profiled_call(client: Client) -> Path:
    """One `call_tool("search")` under sys.setprofile: the plugin modules its functions ran in."""
    path = Path()
    # No collection during the call: a collection's finalizers (a span gone, its weak references'
    # callbacks) would run Python code at a moment no call decides, and what is garbage depends on
    # whatever ran in the process before.
    gc.collect()
    gc.disable()
    sys.setprofile(_Profiler(path))
    try:
        await client.call_tool("search", {"query": "profiled"})
    finally:
        sys.setprofile(None)
        gc.enable()
    return path


async def measure(era: str = "json") -> Path:
    """The path of one call after a warm one, on a server of its own that throttles it once, in
    `era` (ERAS)."""
    from harness.faults import Throttle
    from otel_mcp_replay import McpReplayInstrumentor

    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(NoopExporter()))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    instrumentor = McpReplayInstrumentor()
    with _served(era) as server:
        servers = {server.url: {"policy": "app-authorized", "tools": {"search": {"on": ["throttle"]}}}}
        instrumentor.instrument(
            tracer_provider=tracer_provider, meter_provider=meter_provider, servers=servers
        )
        try:
            async with _client(era, server.url) as client:
                await client.call_tool("search", {"query": "warm"})  # imports and caches filled
                server.faults.add("search", Throttle("0"))
                path = await profiled_call(client)
                path.executions = server.counters.executions("search")
                if path.executions != 2:
                    raise RuntimeError("the profiled call did not run the tool once after its 429")
        finally:
            instrumentor.uninstrument()
    return path


def _served(era: str) -> ServerHandle:
    """The era's server, started: the harness's demo server (streamable HTTP, or the legacy SSE
    transport), or for `task` a fastmcp server whose `search` runs as a task."""
    from harness.server import running_server

    if era == "task":
        return _running_task_server()
    if era == "sse":
        return running_server("sse", middleware=_answering_after_the_post)
    return running_server("streamable")


def _answering_after_the_post(app: ASGIApp) -> ASGIApp:
    """ASGI middleware for the SSE transport: each answer its event stream carries leaves
    SSE_ANSWER_AFTER_S late, as a tool that works a while answers, after the client read its POST's
    202 (with the demo's instant tool, the two reached the client in either order, and the path
    with them)."""

    async def answering(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "GET":
            await app(scope, receive, send)
            return

        async def late(message: Message) -> None:
            if message["type"] == "http.response.body" and b'"result"' in message.get("body", b""):
                await anyio.sleep(SSE_ANSWER_AFTER_S)
            await send(message)

        await app(scope, receive, late)

    return answering


def _client(era: str, url: str) -> Client:
    """mcp 2.x's Client as the era's users open it."""
    if era == "sse":
        from mcp.client.sse import sse_client

        return Client(sse_client(url), mode="legacy")
    if era == "task":
        from fastmcp_tasks.client import TasksClientExtension

        return Client(url, mode="2026-07-28", extensions=[TasksClientExtension()])
    return Client(url, mode=ERAS[era])


def _running_task_server() -> ServerHandle:
    """A fastmcp server (with fastmcp-tasks) whose `search` runs as a task and returns at once, each
    execution counted, served by the harness (its fault injector first): its polls held until the
    task is done (_AnsweredWhenDone), so the call polls once, whatever the moment its task ends."""
    from fastmcp import FastMCP
    from fastmcp_tasks import TasksExtension

    from harness.server import Counters, running_server

    counters = Counters()
    server = FastMCP("otel-mcp-replay-path")
    server.add_extension(TasksExtension(url="memory://"))

    @server.tool(task=True)
    async def search(query: str) -> str:
        counters.record_execution("search")
        return f"3 results for {query!r}"

    app = _AnsweredWhenDone(server.http_app(path="/mcp"))
    return running_server(counters=counters, asgi=(app, "/mcp"))


class _AnsweredWhenDone:
    """An ASGI middleware: a `tasks/get` is answered once its task is no longer working (the app is
    asked again until then, within TASK_WAIT_S), as a server holding its poll would. The number of
    polls, and so the path, does not depend on when the task's worker ran it."""

    _WORKING = re.compile(rb'"status"\s*:\s*"working"')

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        from harness.faults import replayed_request

        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        body = b""
        while True:  # bounded by the request: its body ends
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        polled = b'"tasks/get"' in body
        with anyio.move_on_after(TASK_WAIT_S if polled else None):
            while True:
                answer: list[Message] = []
                await self.app(scope, replayed_request(body), _kept(answer))
                answered = b"".join(m.get("body", b"") for m in answer)
                if not polled or not self._WORKING.search(answered):
                    break
                await anyio.sleep(0.005)
        for message in answer:
            await send(message)


def _kept(messages: list[Message]) -> Send:
    async def send(message: Message) -> None:
        messages.append(message)

    return send


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.path")
    parser.add_argument("era", nargs="?", default="json", choices=list(ERAS))
    parser.add_argument(
        "--as-one",
        action="append",
        default=[],
        metavar="MODULE=INTO",
        help="also count the path were MODULE part of INTO (e.g. evidence=patches.wire)",
    )
    args = parser.parse_args(argv)
    merged = dict(pair.partition("=")[::2] for pair in args.as_one)
    if any(not module or not into for module, into in merged.items()):
        parser.error("--as-one takes MODULE=INTO")
    path = anyio.run(measure, args.era)
    print(" -> ".join(path.call_path))
    figures = path.figures()
    if merged:
        joined = as_one(path.call_path, merged)
        figures["as_one"] = {"merged": merged, "hops": max(0, len(joined) - 1), "call_path": joined}
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
