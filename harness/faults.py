"""Inject scripted HTTP faults into an MCP server's POSTs, at the ASGI level.

`FaultInjector` wraps the MCP app. It reads each POST body once, reports it (`PostRecord`) to the
server's counters whatever happens next, and for a JSON-RPC request asks the `FaultPlan` for the
next fault of that tool (`tools/call`) or method (anything else). A fault either answers in place of
the app (429, 503, 409, a JSON-RPC error, an SSE stream without the answer), delays it, or cuts the
TCP connection before or after the app ran. Cutting needs the connection's transport, which uvicorn
does not expose to ASGI apps: `abortable_h11_protocol` hands it to a `ConnectionRegistry`.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import random
import socket
import struct
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast
from urllib.parse import parse_qs

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

# A request body larger than this is not an MCP message we script; it passes through unread (past
# any body the suites send: a tools/call of any size is one the plugin governs).
_MAX_BODY = 64 * 1024 * 1024
# How long the injector waits for the wrapped app (a tool) to finish before it applies a fault
# that needs the app's answer first; bounded so a stuck tool cannot hold a test forever.
_APP_DEADLINE_S = 60.0
# How long to wait for uvicorn to notice a connection we cut (it then skips its 500 answer).
_DISCONNECT_WAIT_S = 2.0


# ----------------------------------------------------------------------------------------------
# The faults.


@dataclass(frozen=True)
class Fault:
    """One scripted misbehaviour for one POST."""

    @property
    def name(self) -> str:
        return type(self).__name__


@dataclass(frozen=True)
class Throttle(Fault):
    """HTTP 429, with `Retry-After` given verbatim (delta-seconds or an HTTP-date); tool not run."""

    retry_after: str | None = None


@dataclass(frozen=True)
class Status(Fault):
    """Any HTTP status with an optional body (a mapping is sent as JSON) and headers; tool not run."""

    code: int = 503
    body: bytes | str | Mapping[str, Any] | None = None
    headers: Mapping[str, str] | None = None


@dataclass(frozen=True)
class JsonRpcError(Fault):
    """A JSON-RPC error answer for the request's id (HTTP 200 unless `status` says); tool not run."""

    code: int = -32603
    message: str = "Internal error"
    status: int = 200
    data: Any = None


@dataclass(frozen=True)
class StallThenPass(Fault):
    """Wait `seconds`, then hand the request to the app as usual (the tool runs, the answer comes)."""

    seconds: float


@dataclass(frozen=True)
class HeldUntilPost(Fault):
    """Hold the request until a tools/call POST of `tool` is being served (one came before it and
    is not over, a held one included, or one comes within `seconds`: a hang guard), then apply
    `then` to it (None: hand it to the app as usual). `came` is set when one was: the client had
    both requests in flight at once (a client that sends one at a time cannot). Two calls held each
    until the other's comes meet whichever reaches the server first."""

    tool: str
    seconds: float
    then: Fault | None = None
    came: threading.Event = field(default_factory=threading.Event, compare=False)


@dataclass(frozen=True)
class StallThenDrop(Fault):
    """Wait `seconds` (bounded hang), then close the connection with no response; tool not run."""

    seconds: float
    reset: bool = False


@dataclass(frozen=True)
class DropBeforeExecution(Fault):
    """Close the connection without any response; the tool does not run.

    `reset=True` sends a TCP RST (the client sees a read error) instead of a FIN (the client sees
    the server disconnect without a response).
    """

    reset: bool = False


@dataclass(frozen=True)
class DropAfterExecution(Fault):
    """Let the tool run to completion, swallow its answer, close the connection with no response.

    On the legacy SSE transport the answer goes out on the GET stream, not in the POST's response:
    `answer_lost=True` drops it there too (the server ran the tool, and its answer never reached the
    client), else it arrives there after the cut.
    """

    reset: bool = False
    answer_lost: bool = False


@dataclass(frozen=True)
class DropAtAnswer(Fault):
    """Stream the app's response as it comes (what the tool asks the client mid-call, an
    elicitation, gets through and is answered), and close the connection in place of the event that
    answers the request: the tool ran, its answer never came. A JSON answer (no stream) is
    swallowed whole and the connection closed, as DropAfterExecution does."""


@dataclass(frozen=True)
class DropMidBody(Fault):
    """Let the tool run, send the status line, headers and the first `keep_bytes` of the body
    (default: half of it), then close the connection."""

    keep_bytes: int | None = None


@dataclass(frozen=True)
class SseWithoutAnswer(Fault):
    """Answer HTTP 200 `text/event-stream` and end the stream cleanly without the JSON-RPC answer.

    With `run_tool=True` the tool runs first (its answer is swallowed); otherwise it does not run.
    """

    run_tool: bool = True


@dataclass(frozen=True)
class ClaimedResult(Fault):
    """Let the tool run, then answer HTTP 200 JSON with a result of an extension's own shape
    (`resultType`, SEP-2322 style claims on mcp 2.x) in place of its CallToolResult."""

    result_type: str = "com.example/ticket"
    fields: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class UnstructuredResult(Fault):
    """Let the tool run, then answer HTTP 200 JSON with a CallToolResult without the structured
    content its output schema requires: the client's validation fails the call after its result
    came back (the tool ran)."""

    text: str = "ran"


def retryable_conflict(*, in_body: bool = False) -> Status:
    """Amazon Bedrock AgentCore Runtime's retryable refusal: HTTP 409 `RetryableConflictException`,
    named in the `x-amzn-ErrorType` header, or (`in_body=True`) in the JSON body's `__type`."""
    if in_body:
        return Status(409, body={"__type": "RetryableConflictException", "message": "session busy"})
    return Status(409, body=b"session busy", headers={"x-amzn-ErrorType": "RetryableConflictException"})


def http_date(seconds_from_now: float) -> str:
    """A `Retry-After` HTTP-date (IMF-fixdate) `seconds_from_now` ahead of the wall clock."""
    return email.utils.formatdate(time.time() + seconds_from_now, usegmt=True)


_FAULTS_BY_KIND: Mapping[str, type[Fault]] = {
    "throttle": Throttle,
    "status": Status,
    "jsonrpc-error": JsonRpcError,
    "stall-then-pass": StallThenPass,
    "stall-then-drop": StallThenDrop,
    "drop-before": DropBeforeExecution,
    "drop-after": DropAfterExecution,
    "drop-at-answer": DropAtAnswer,
    "drop-mid-body": DropMidBody,
    "sse-without-answer": SseWithoutAnswer,
    "claimed-result": ClaimedResult,
    "unstructured-result": UnstructuredResult,
}


def fault_from_dict(spec: Mapping[str, Any]) -> Fault:
    """Build a fault from `{"fault": kind, **fields}` (kinds: the keys of `_FAULTS_BY_KIND`).

    Lets a fault script travel as JSON (a subprocess demo server, an environment variable).
    """
    fields = dict(spec)
    kind = fields.pop("fault", None)
    cls = _FAULTS_BY_KIND.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ValueError(f"unknown fault kind; known: {sorted(_FAULTS_BY_KIND)}")
    return cls(**fields)


# ----------------------------------------------------------------------------------------------
# The plan: which fault the next POST of a tool or method gets.


@dataclass(frozen=True)
class FaultContext:
    """What a fault rule knows about the POST it decides for."""

    method: str
    tool: str | None  # the tool of a tools/call, else None
    arguments: Mapping[str, Any]
    request_id: str
    session_id: str | None
    index: int  # 0 for the first POST of this tool (tools/call) or method seen by the plan


FaultRule = Callable[[FaultContext], "Fault | None"]


class RandomFaults:
    """A seeded, reproducible fault rule: each POST draws one of `choices` by weight.

    `choices` pairs a fault (or None: no fault) with a weight. `tools` limits the rule to those
    tools' calls (None: every tools/call); other methods never get a fault from this rule.
    """

    def __init__(
        self,
        seed: int,
        choices: Sequence[tuple[Fault | None, float]],
        tools: Sequence[str] | None = None,
    ) -> None:
        if not choices or any(w < 0 for _, w in choices) or sum(w for _, w in choices) <= 0:
            raise ValueError("choices needs at least one positive weight")
        self._rng = random.Random(seed)
        self._faults = [f for f, _ in choices]
        self._weights = [w for _, w in choices]
        self._tools = None if tools is None else frozenset(tools)

    def __call__(self, ctx: FaultContext) -> Fault | None:
        if ctx.tool is None or (self._tools is not None and ctx.tool not in self._tools):
            return None
        return self._rng.choices(self._faults, self._weights)[0]


class FaultPlan:
    """Thread-safe script of faults: queued ones first (per tool or method), then an optional rule.

    Tests write to it from their thread while the server's thread reads it, hence the lock.
    """

    def __init__(self, rule: FaultRule | None = None) -> None:
        self._lock = threading.Lock()
        self._queues: dict[tuple[str, str | None], deque[Fault]] = {}
        self._seen: dict[tuple[str, str | None], int] = {}
        self._rule = rule
        self._applied: list[tuple[str, str | None, str, str]] = []

    def add(self, tool: str, *faults: Fault) -> FaultPlan:
        """Queue `faults` for the next tools/call POSTs of `tool`, one each; then calls pass."""
        return self._queue(("tools/call", tool), faults)

    def add_method(self, method: str, *faults: Fault) -> FaultPlan:
        """Queue `faults` for the next POSTs of a JSON-RPC method other than tools/call
        (e.g. `initialize`, `tools/list`)."""
        if method == "tools/call":
            raise ValueError("queue tools/call faults per tool with add()")
        return self._queue((method, None), faults)

    def set_rule(self, rule: FaultRule | None) -> None:
        """Decide faults for POSTs with nothing queued (e.g. `RandomFaults`); None removes it."""
        with self._lock:
            self._rule = rule

    def pending(self, tool: str | None = None) -> int:
        """Queued faults not yet applied: for `tool`'s calls, or in all."""
        with self._lock:
            if tool is not None:
                return len(self._queues.get(("tools/call", tool), ()))
            return sum(len(q) for q in self._queues.values())

    def applied(self) -> list[tuple[str, str | None, str, str]]:
        """(method, tool, request id, fault name) for every fault applied so far, in order."""
        with self._lock:
            return list(self._applied)

    def clear(self) -> None:
        """Forget queued faults, the rule, and what was applied."""
        with self._lock:
            self._queues.clear()
            self._seen.clear()
            self._rule = None
            self._applied.clear()

    def next_fault(self, ctx_without_index: FaultContext) -> Fault | None:
        """The fault for this POST (queued first, then the rule), recorded as applied."""
        key = (ctx_without_index.method, ctx_without_index.tool)
        with self._lock:
            index = self._seen.get(key, 0)
            self._seen[key] = index + 1
            queue = self._queues.get(key)
            fault: Fault | None
            if queue:
                fault = queue.popleft()
            elif self._rule is not None:
                fault = self._rule(replace(ctx_without_index, index=index))
            else:
                fault = None
            if fault is not None:
                self._applied.append((key[0], key[1], ctx_without_index.request_id, fault.name))
            return fault

    @classmethod
    def from_json(cls, text: str) -> FaultPlan:
        """`{"tool": [{"fault": "throttle", "retry_after": "1"}, ...], "method:initialize": [...]}`."""
        plan = cls()
        spec = json.loads(text)
        if not isinstance(spec, dict):
            raise ValueError("a fault plan is a JSON object")
        for target, items in spec.items():
            if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
                raise ValueError("each target of a fault plan holds a list of fault objects")
            faults = [fault_from_dict(i) for i in items]
            if target.startswith("method:"):
                plan.add_method(target.removeprefix("method:"), *faults)
            else:
                plan.add(target, *faults)
        return plan

    def _queue(self, key: tuple[str, str | None], faults: Sequence[Fault]) -> FaultPlan:
        if not all(isinstance(f, Fault) for f in faults):
            raise TypeError("faults must be Fault instances")
        with self._lock:
            self._queues.setdefault(key, deque()).extend(faults)
        return self


# ----------------------------------------------------------------------------------------------
# What the injector reports for every POST.


@dataclass(frozen=True)
class PostRecord:
    """One POST as the server received it, before any fault."""

    path: str
    method: str | None  # JSON-RPC method (None: not a JSON-RPC message, or a response)
    tool: str | None
    request_id: str | None  # str() of the JSON-RPC id; None for notifications and responses
    session_id: str | None  # `mcp-session-id` header, or the SSE transport's `session_id` query
    protocol_version: str | None
    headers: tuple[tuple[str, str], ...]
    body: bytes
    fault: str | None
    at: float = field(default_factory=time.monotonic)
    at_epoch: float = field(default_factory=time.time)  # the wall clock's, which an HTTP-date is on


PostRecorder = Callable[[PostRecord], None]


# ----------------------------------------------------------------------------------------------
# Cutting connections: uvicorn's transports, by client address.


class ConnectionRegistry:
    """Open server-side transports by client address (`scope["client"]`), so a fault can cut one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._transports: dict[tuple[str, int], asyncio.Transport] = {}

    def add(self, client: tuple[str, int] | None, transport: asyncio.Transport) -> None:
        if client is not None:
            with self._lock:
                self._transports[(str(client[0]), int(client[1]))] = transport

    def discard(self, client: tuple[str, int] | None) -> None:
        if client is not None:
            with self._lock:
                self._transports.pop((str(client[0]), int(client[1])), None)

    def get(self, client: Any) -> asyncio.Transport | None:
        if not isinstance(client, list | tuple) or len(client) != 2:
            return None
        with self._lock:
            return self._transports.get((str(client[0]), int(client[1])))

    def __len__(self) -> int:
        with self._lock:
            return len(self._transports)


def abortable_h11_protocol(registry: ConnectionRegistry) -> type[H11Protocol]:
    """uvicorn's h11 protocol, registering each connection's transport in `registry`.

    Pass it as `uvicorn.Config(http=...)`. Raising from an ASGI app cannot drop a connection
    silently (uvicorn answers 500 when no response started), so the injector closes the transport.
    `H11Protocol` is uvicorn's, not a documented API (none hands out a connection's transport):
    tests/harness/test_harness.py pins it
    (test_uvicorn_still_hands_each_connection_to_the_registry_that_cuts_it).
    """

    class _RegisteringH11Protocol(H11Protocol):
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            registry.add(self.client, transport)

        def connection_lost(self, exc: Exception | None) -> None:
            registry.discard(self.client)
            super().connection_lost(exc)

    return _RegisteringH11Protocol


# ----------------------------------------------------------------------------------------------
# The middleware.


@dataclass
class _Post:
    record: PostRecord
    message: dict[str, Any] | None  # the single JSON-RPC message, when the body holds one


class FaultInjector:
    """ASGI middleware: record every POST, apply the plan's next fault to JSON-RPC requests."""

    def __init__(
        self,
        app: ASGIApp,
        plan: FaultPlan,
        record: PostRecorder | None = None,
        connections: ConnectionRegistry | None = None,
    ) -> None:
        self.app = app
        self.plan = plan
        self.record = record
        self.connections = connections
        self._lost_answers: set[str] = set()  # request ids whose answer an event stream must drop
        # Per tool, its calls' POSTs being served, and the POSTs held until one of its calls comes
        # (HeldUntilPost): the server's loop only.
        self._in_flight: Counter[str] = Counter()
        self._held: dict[str, list[anyio.Event]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET":
            await self.app(scope, receive, self._dropping_lost_answers(send))
            return
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        body, complete = await _read_body(receive)
        replay = _replaying(receive, body, complete)
        if not complete:
            # Too large or the client went away: nothing to script, let the app deal with it.
            await self.app(scope, replay, send)
            return
        post = _parse(scope, body)
        tool = post.record.tool
        if tool is not None:  # a call of it came: the POSTs held for one go on
            for came in self._held.pop(tool, ()):
                came.set()
            self._in_flight[tool] += 1
        try:
            fault = self._fault_for(post)
            if self.record is not None:
                self.record(_with_fault(post.record, fault))
            if fault is None:
                await self.app(scope, replay, send)
            else:
                await self._apply(fault, post, scope, replay, receive, send)
        finally:
            if tool is not None:
                self._in_flight[tool] -= 1

    async def _came(self, tool: str, seconds: float) -> bool:
        """Whether a call of `tool` is being served, or one comes within `seconds`."""
        if self._in_flight[tool]:
            return True
        came = anyio.Event()
        self._held.setdefault(tool, []).append(came)
        with anyio.move_on_after(seconds):
            await came.wait()
        if not came.is_set():  # none came: no longer held (the list is popped only as one comes)
            held = self._held[tool]
            held.remove(came)
            if not held:
                del self._held[tool]
        return came.is_set()

    def _dropping_lost_answers(self, send: Send) -> Send:
        """`send` for an event stream, less the events that answer a request whose answer is lost."""

        async def filtered(message: Message) -> None:
            if message["type"] == "http.response.body" and self._lost_answers:
                answered = _answered_ids(cast(bytes, message.get("body", b"")))
                lost = answered & self._lost_answers
                if lost:
                    self._lost_answers -= lost
                    return
            await send(message)

        return filtered

    def _fault_for(self, post: _Post) -> Fault | None:
        msg, rec = post.message, post.record
        if msg is None or rec.method is None:
            return None  # responses are recorded, never scripted
        params = msg.get("params")
        arguments = params.get("arguments") if isinstance(params, dict) else None
        return self.plan.next_fault(
            FaultContext(
                method=rec.method,
                tool=rec.tool,
                arguments=arguments if isinstance(arguments, dict) else {},
                request_id=rec.request_id or "",  # "" for a notification
                session_id=rec.session_id,
                index=0,
            )
        )

    async def _apply(
        self, fault: Fault, post: _Post, scope: Scope, replay: Receive, receive: Receive, send: Send
    ) -> None:
        if isinstance(fault, Throttle):
            headers = {} if fault.retry_after is None else {"retry-after": fault.retry_after}
            await _respond(send, 429, b"Too Many Requests", "text/plain; charset=utf-8", headers)
        elif isinstance(fault, Status):
            await _respond_status(send, fault)
        elif isinstance(fault, JsonRpcError):
            await _respond_jsonrpc_error(send, fault, post.message)
        elif isinstance(fault, StallThenPass):
            await anyio.sleep(fault.seconds)
            await self.app(scope, replay, send)
        elif isinstance(fault, HeldUntilPost):
            if await self._came(fault.tool, fault.seconds):
                fault.came.set()
            if fault.then is None:
                await self.app(scope, replay, send)
            else:
                await self._apply(fault.then, post, scope, replay, receive, send)
        elif isinstance(fault, StallThenDrop):
            await anyio.sleep(fault.seconds)
            await self._cut(scope, receive, reset=fault.reset)
        elif isinstance(fault, DropBeforeExecution):
            await self._cut(scope, receive, reset=fault.reset)
        elif isinstance(fault, DropAfterExecution):
            if fault.answer_lost and post.record.request_id:
                self._lost_answers.add(post.record.request_id)
            await _run_swallowed(self.app, scope, replay)
            await self._cut(scope, receive, reset=fault.reset)
        elif isinstance(fault, DropAtAnswer):
            await self._cut_at_answer(scope, replay, receive, send, post.record.request_id or "")
        elif isinstance(fault, DropMidBody):
            start, body = await _run_swallowed(self.app, scope, replay)
            if start is None:
                start = {"type": "http.response.start", "status": 200, "headers": []}
            keep = fault.keep_bytes if fault.keep_bytes is not None else max(1, len(body) // 2)
            await send(start)
            await send({"type": "http.response.body", "body": body[:keep], "more_body": True})
            # close(), not abort(): the part already written must reach the client first.
            await self._cut(scope, receive, reset=False)
        elif isinstance(fault, SseWithoutAnswer):
            if fault.run_tool:
                await _run_swallowed(self.app, scope, replay)
            # A comment line only: no event id, so the client has nothing to resume from.
            await _respond(
                send, 200, b": no answer follows\n\n", "text/event-stream", {"cache-control": "no-cache"}
            )
        elif isinstance(fault, (ClaimedResult, UnstructuredResult)):
            await _run_swallowed(self.app, scope, replay)
            if isinstance(fault, ClaimedResult):
                result = {"resultType": fault.result_type, **dict(fault.fields or {})}
            else:
                # `resultType` as the 2026-07-28 era requires; the legacy era's clients ignore it.
                content = [{"type": "text", "text": fault.text}]
                result = {"resultType": "complete", "content": content, "isError": False}
            request_id = post.message.get("id") if post.message is not None else None
            body = json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}).encode()
            await _respond(send, 200, body, "application/json", {})
        else:  # pragma: no cover - every Fault subclass is handled above
            raise TypeError(f"unhandled fault {fault.name}")

    async def _cut_at_answer(
        self, scope: Scope, replay: Receive, receive: Receive, send: Send, request_id: str
    ) -> None:
        cut = False
        start: Message | None = None  # held until the response shows it is an event stream

        async def until_the_answer(message: Message) -> None:
            nonlocal cut, start
            if cut:
                return
            if message["type"] == "http.response.start":
                start = message
                return
            streaming = start is not None and any(
                name.lower() == b"content-type" and value.startswith(b"text/event-stream")
                for name, value in start.get("headers", [])
            )
            if message["type"] != "http.response.body" or not streaming:
                return  # a JSON answer: swallowed whole, the connection cut below
            if request_id in _answered_ids(cast(bytes, message.get("body", b""))):
                cut = True
                transport = self.connections.get(scope.get("client")) if self.connections else None
                if transport is not None:
                    transport.close()
                return
            if start is not None:
                await send(start)
                start = None
            await send(message)

        with anyio.move_on_after(_APP_DEADLINE_S):
            await self.app(scope, replay, until_the_answer)
        if not cut:  # a JSON answer, or none: the connection is cut all the same
            await self._cut(scope, receive, reset=False)

    async def _cut(self, scope: Scope, receive: Receive, *, reset: bool) -> None:
        transport = self.connections.get(scope.get("client")) if self.connections is not None else None
        if transport is None:
            raise RuntimeError(
                "cannot cut the connection: run the app under uvicorn with "
                "http=abortable_h11_protocol(registry) and pass that registry to FaultInjector"
            )
        if reset:
            sock = transport.get_extra_info("socket")
            if sock is not None:
                # Linger 0: close() then sends RST instead of FIN.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            transport.abort()
        else:
            transport.close()
        # Return only once uvicorn saw the disconnect, else it would try to answer 500 on it.
        with anyio.move_on_after(_DISCONNECT_WAIT_S):
            for _ in range(1000):
                if (await receive())["type"] == "http.disconnect":
                    break


async def _read_body(receive: Receive) -> tuple[bytes, bool]:
    """The whole request body, and whether it was read to its end within the size limit."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks), False
        chunk = cast(bytes, message.get("body", b""))
        chunks.append(chunk)
        size += len(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks), True
        if size > _MAX_BODY:
            return b"".join(chunks), False


def _replaying(receive: Receive, body: bytes, complete: bool) -> Receive:
    """A `receive` that hands the app the body already read, then the real channel."""
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": not complete}
        return await receive()

    return replay


def replayed_request(body: bytes) -> Receive:
    """A `receive` that hands the app `body`, whole, then waits (as the server's own would): for a
    middleware that read the request itself and runs the app on it, once or more."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    return receive


def _parse(scope: Scope, body: bytes) -> _Post:
    headers = tuple(
        (k.decode("latin-1").lower(), v.decode("latin-1"))
        for k, v in cast(list[tuple[bytes, bytes]], scope["headers"])
    )
    hmap = dict(headers)
    session_id = hmap.get("mcp-session-id")
    if session_id is None:
        query = parse_qs(cast(bytes, scope.get("query_string", b"")).decode("latin-1"))
        session_id = query.get("session_id", [None])[0]
    try:
        decoded = json.loads(body)
    except (ValueError, RecursionError):
        decoded = None
    message = decoded if isinstance(decoded, dict) else None
    method = message.get("method") if message is not None else None
    raw_id = message.get("id") if message is not None else None
    tool = None
    if method == "tools/call" and message is not None:
        params = message.get("params")
        name = params.get("name") if isinstance(params, dict) else None
        tool = name if isinstance(name, str) else None
    record = PostRecord(
        path=cast(str, scope.get("path", "")),
        method=method if isinstance(method, str) else None,
        tool=tool,
        request_id=None if raw_id is None or not isinstance(method, str) else str(raw_id),
        session_id=session_id,
        protocol_version=hmap.get("mcp-protocol-version"),
        headers=headers,
        body=body,
        fault=None,
    )
    return _Post(record=record, message=message)


def _with_fault(record: PostRecord, fault: Fault | None) -> PostRecord:
    if fault is None:
        return record
    return replace(record, fault=fault.name)


def _answered_ids(chunk: bytes) -> set[str]:
    """The ids of the JSON-RPC answers in the `data:` lines of an event-stream chunk."""
    ids: set[str] = set()
    for line in chunk.splitlines():
        if not line.startswith(b"data:"):
            continue
        try:
            message = json.loads(line[5:])
        except (ValueError, RecursionError):
            continue
        if isinstance(message, dict) and ("result" in message or "error" in message) and "id" in message:
            ids.add(str(message["id"]))
    return ids


async def _run_swallowed(app: ASGIApp, scope: Scope, receive: Receive) -> tuple[Message | None, bytes]:
    """Run the app to completion (bounded) with its response captured, not sent."""
    start: Message | None = None
    chunks: list[bytes] = []

    async def capture(message: Message) -> None:
        nonlocal start
        if message["type"] == "http.response.start":
            start = message
        elif message["type"] == "http.response.body":
            chunks.append(cast(bytes, message.get("body", b"")))

    with anyio.move_on_after(_APP_DEADLINE_S):
        await app(scope, receive, capture)
    return start, b"".join(chunks)


async def _respond(
    send: Send, status: int, body: bytes, content_type: str, headers: Mapping[str, str]
) -> None:
    raw = [(b"content-type", content_type.encode("latin-1")), (b"content-length", str(len(body)).encode())]
    raw += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def _respond_status(send: Send, fault: Status) -> None:
    headers = dict(fault.headers or {})
    content_type = next((v for k, v in headers.items() if k.lower() == "content-type"), None)
    headers = {k: v for k, v in headers.items() if k.lower() != "content-type"}
    if isinstance(fault.body, Mapping):
        body = json.dumps(dict(fault.body)).encode()
        content_type = content_type or "application/json"
    elif isinstance(fault.body, str):
        body = fault.body.encode()
    else:
        body = fault.body or b""
    await _respond(send, fault.code, body, content_type or "text/plain; charset=utf-8", headers)


async def _respond_jsonrpc_error(send: Send, fault: JsonRpcError, message: Mapping[str, Any] | None) -> None:
    error: dict[str, Any] = {"code": fault.code, "message": fault.message}
    if fault.data is not None:
        error["data"] = fault.data
    request_id = message.get("id") if message is not None else None
    body = json.dumps({"jsonrpc": "2.0", "id": request_id, "error": error}).encode()
    await _respond(send, fault.status, body, "application/json", {})
