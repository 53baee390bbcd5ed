"""10. The path of one call: which plugin modules run, in order, during one `call_tool` (issue 20).

Exact from run to run, like the opcodes: `sys.setprofile` sees every Python function call and
return of the calling thread during one call on mcp 2.x (streamable HTTP, app-authorized, the
server's 429 with `Retry-After: 0`, then its 200). The figures: the sequence of otel_mcp_replay
modules whose functions run (consecutive repeats collapsed), how many modules, how many hops
between them, and how many calls went back into a plugin module already on the stack (a callback:
e.g. a loop calling back a closure of the seam that handed it down). Issue 20's goal: at most 8
modules, at most 25 hops, no call back.

And the count issue 32 names, `call_hops`: the Python calls from a frame of one plugin module into a
function of another (its caller is the nearest plugin frame below it, by `f_back`, which links a
resumed coroutine to the one awaiting it); a coroutine resumed after an await is no call, but its
first start is. `calls` lists them, caller first.

Run: `python -m benchmarks.path` (prints the path, then the figures as JSON).
"""

from __future__ import annotations

import inspect
import json
import sys
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import anyio
from mcp import Client
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from benchmarks._common import NoopExporter

PACKAGE = "otel_mcp_replay"
GOAL_MODULES = 8
GOAL_HOPS = 25


@dataclass
class Path:
    """The plugin modules one call ran through, and the calls back into one already on the stack."""

    modules: list[str] = field(default_factory=list)
    callbacks: int = 0
    calls: list[str] = field(default_factory=list)  # each call from one plugin module into another

    @property
    def hops(self) -> int:
        return max(0, len(self.modules) - 1)

    def figures(self) -> dict[str, Any]:
        distinct = sorted(set(self.modules))
        return {
            "modules": len(distinct),
            "hops": self.hops,
            "callbacks": self.callbacks,
            "call_hops": len(self.calls),
            "goal_met": len(distinct) <= GOAL_MODULES and self.hops <= GOAL_HOPS and self.callbacks == 0,
            "path": self.modules,
            "calls": self.calls,
        }


def _module_of(frame: FrameType) -> str | None:
    name = frame.f_globals.get("__name__", "")
    if not isinstance(name, str) or not (name == PACKAGE or name.startswith(PACKAGE + ".")):
        return None
    return name[len(PACKAGE) + 1 :] or PACKAGE


async def profiled_call(client: Client) -> Path:
    """One `call_tool("search")` under sys.setprofile: the plugin modules its functions ran in."""
    path = Path()
    stack: list[str | None] = []  # the plugin module (or None) of each Python frame entered
    # The coroutine and generator frames started, held until the end (so no id is reused): one seen
    # again is resumed, not called.
    started: dict[int, FrameType] = {}

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if event == "call":
            module = _module_of(frame)
            if module is not None:
                # A call back: from a frame of another plugin module into one that is already on the
                # stack below it (e.g. a loop calling a closure the seam handed down).
                caller = next((m for m in reversed(stack) if m is not None), None)
                if caller is not None and caller != module and module in stack:
                    path.callbacks += 1
                if not path.modules or path.modules[-1] != module:
                    path.modules.append(module)
                _count_call(path, frame, module, started)
            stack.append(module)
        elif event == "return" and stack:
            stack.pop()

    sys.setprofile(profile)
    try:
        await client.call_tool("search", {"query": "profiled"})
    finally:
        sys.setprofile(None)
    return path


_RESUMABLE = inspect.CO_COROUTINE | inspect.CO_GENERATOR | inspect.CO_ASYNC_GENERATOR


def _count_call(path: Path, frame: FrameType, module: str, started: dict[int, FrameType]) -> None:
    if frame.f_code.co_flags & _RESUMABLE:
        if id(frame) in started:
            return  # resumed after an await: no call
        started[id(frame)] = frame
    below = frame.f_back
    while below is not None and _module_of(below) is None:
        below = below.f_back
    caller = _module_of(below) if below is not None else None
    if below is not None and caller is not None and caller != module:
        path.calls.append(f"{caller}.{below.f_code.co_name} -> {module}.{frame.f_code.co_name}")


async def _measure() -> Path:
    from harness.faults import Throttle
    from harness.server import running_server
    from otel_mcp_replay import McpReplayInstrumentor

    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(NoopExporter()))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    instrumentor = McpReplayInstrumentor()
    with running_server("streamable") as server:
        servers = {server.url: {"policy": "app-authorized", "tools": {"search": {"on": ["throttle"]}}}}
        instrumentor.instrument(
            tracer_provider=tracer_provider, meter_provider=meter_provider, servers=servers
        )
        try:
            async with Client(server.url) as client:
                await client.call_tool("search", {"query": "warm"})  # imports and caches filled
                server.faults.add("search", Throttle("0"))
                path = await profiled_call(client)
                if server.counters.executions("search") != 2:
                    raise RuntimeError("the profiled call did not run the tool once after its 429")
        finally:
            instrumentor.uninstrument()
    return path


def main() -> int:
    path = anyio.run(_measure)
    print(" -> ".join(path.modules))
    print(json.dumps(path.figures(), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
