"""Run a real MCP server with known tools, server-side counters and injected faults on loopback.

`build_server` makes the SDK's own server with the demo tools (`MCPServer` on mcp 2.x, `FastMCP`
on 1.x: harness/sdk.py picks the installed line); `running_server` serves it under uvicorn on
127.0.0.1 (an ephemeral port) in a background thread, wrapped by the fault injector, and stops it
on exit. `Counters` is the ground truth tests assert on: a tool execution is counted when
its body runs, a POST when the server receives it, whatever fault follows.
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import anyio
import uvicorn
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import BaseModel, Field
from starlette.types import ASGIApp

from harness.faults import (
    ConnectionRegistry,
    FaultInjector,
    FaultPlan,
    PostRecord,
    abortable_h11_protocol,
)
from harness.sdk import (
    LINE,
    Context,
    MCPServer,
    ToolError,
    build_sse_app,
    build_streamable_app,
    tool_annotations,
)


class Confirmation(BaseModel):
    """The answer the multi-round tool asks the client for."""

    ok: bool


if LINE == 2:  # at module level: the server evaluates a tool's annotations in this module's globals
    from mcp.server.mcpserver import Elicit, Resolve

    def ask_confirmation(amount: int) -> Elicit[Confirmation]:
        """The multi-round tool's question (a resolver: the server asks it as its era does)."""
        return Elicit(f"charge {amount}?", Confirmation)


AppKind = Literal["streamable", "streamable-json", "sse"]
APP_KINDS: tuple[AppKind, ...] = ("streamable", "streamable-json", "sse")

_HOST = "127.0.0.1"
# Enough for the tests' longest stall; uvicorn cancels what is still running after it.
_GRACEFUL_SHUTDOWN_S = 1
_LOG_LIMIT = 10_000


class Counters:
    """Thread-safe server-side counts: tool executions and POSTs (per request id and in total).

    Request ids are kept as `str(id)` (the contract's `jsonrpc.request.id` is a string). Session
    ids are the `mcp-session-id` header (legacy streamable HTTP), the SSE transport's `session_id`
    query, or None (protocol 2026-07-28 and stateless servers). The POST log keeps the last
    `log_limit` POSTs so a long run does not grow without bound.
    """

    def __init__(self, log_limit: int = _LOG_LIMIT) -> None:
        self._cond = threading.Condition()
        self._log_limit = log_limit
        self._reset_locked()

    def _reset_locked(self) -> None:
        self._executions: Counter[str] = Counter()
        self._executions_by_request: Counter[tuple[str | None, str, str]] = Counter()
        self._deduplicated: Counter[str] = Counter()
        self._posts: Counter[tuple[str | None, str]] = Counter()
        self._tool_posts: Counter[str] = Counter()
        self._total_posts = 0
        self._log: deque[PostRecord] = deque(maxlen=self._log_limit)
        self._idempotent_results: dict[str, str] = {}

    def reset(self) -> None:
        """Zero every count, empty the POST log and forget the idempotency keys seen."""
        with self._cond:
            self._reset_locked()
            self._cond.notify_all()

    # --- writers (the server's thread) ---

    def record_execution(
        self, tool: str, request_id: str | None = None, session_id: str | None = None
    ) -> None:
        with self._cond:
            self._executions[tool] += 1
            if request_id is not None:
                self._executions_by_request[(session_id, request_id, tool)] += 1
            self._cond.notify_all()

    def record_post(self, record: PostRecord) -> None:
        with self._cond:
            self._total_posts += 1
            if record.request_id is not None:
                self._posts[(record.session_id, record.request_id)] += 1
            if record.tool is not None:
                self._tool_posts[record.tool] += 1
            self._log.append(record)
            self._cond.notify_all()

    def run_once(self, key: str, run: Callable[[], str]) -> tuple[str, bool]:
        """The result stored for idempotency `key`, else `run()`'s (stored). True if it ran."""
        with self._cond:
            if key in self._idempotent_results:
                return self._idempotent_results[key], False
            result = run()
            self._idempotent_results[key] = result
            return result, True

    def record_deduplicated(self, tool: str) -> None:
        with self._cond:
            self._deduplicated[tool] += 1
            self._cond.notify_all()

    # --- readers (the tests' thread) ---

    def executions(self, tool: str | None = None) -> int:
        """How many times `tool`'s body ran (all tools when None)."""
        with self._cond:
            return self._executions[tool] if tool is not None else sum(self._executions.values())

    def executions_for(self, request_id: str | int, tool: str | None = None) -> int:
        """Executions under this JSON-RPC request id (across sessions), of `tool` or of any tool."""
        rid = str(request_id)
        with self._cond:
            return sum(
                n for (_, r, t), n in self._executions_by_request.items() if r == rid and tool in (None, t)
            )

    def deduplicated(self, tool: str) -> int:
        """Calls of `tool` answered from the idempotency memory without running."""
        with self._cond:
            return self._deduplicated[tool]

    def posts(self, request_id: str | int, session_id: str | Literal["any"] | None = "any") -> int:
        """POSTs carrying this JSON-RPC request id: in one session, or summed over all ("any")."""
        rid = str(request_id)
        with self._cond:
            if session_id != "any":
                return self._posts[(session_id, rid)]
            return sum(n for (_, r), n in self._posts.items() if r == rid)

    @property
    def total_posts(self) -> int:
        with self._cond:
            return self._total_posts

    def tool_posts(self, tool: str) -> int:
        """tools/call POSTs naming `tool`."""
        with self._cond:
            return self._tool_posts[tool]

    def post_log(self) -> list[PostRecord]:
        with self._cond:
            return list(self._log)

    def wait_until(self, predicate: Callable[[Counters], bool], timeout: float = 5.0) -> bool:
        """Block until `predicate(self)` holds or `timeout` passes; return whether it held."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                # The predicate takes the lock again; Condition's lock is re-entrant (RLock).
                if predicate(self):
                    return True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)


def build_server(
    counters: Counters | None = None,
    name: str = "otel-mcp-replay-demo",
    *,
    era_tools: bool = False,
    commerce_tools: bool = False,
) -> MCPServer:
    """The demo MCP server: search (read-only), charge (changes, deduplicates by key),
    send_email (changes), slow (sleeps) and fail (answers a tool error); with `era_tools`, also
    lookup (read-only) and transfer (changes, deduplicates by key), whose arguments are mirrored into
    headers, and ask_then_charge (changes, asks the client first: multi-round on 2026-07-28); with
    `commerce_tools`, acp_checkout and ucp_checkout (add_commerce_tools). Executions go to `counters`.

    Annotations are set as a real server would; the plugin must never take permission from them.
    """
    c = counters if counters is not None else Counters()
    server = MCPServer(name, log_level="WARNING")

    def executed(tool: str, ctx: Context) -> None:
        c.record_execution(tool, ctx.request_id, _session_id(ctx))

    @server.tool(annotations=tool_annotations(readOnlyHint=True, idempotentHint=True))
    async def search(query: str, ctx: Context) -> str:
        """Search the catalogue (read-only)."""
        executed("search", ctx)
        return f"3 results for {query!r}"

    @server.tool(
        annotations=tool_annotations(readOnlyHint=False, destructiveHint=False, idempotentHint=False)
    )
    async def charge(amount: int, ctx: Context, idempotency_key: str | None = None) -> str:
        """Charge the customer. The same non-empty idempotency_key never charges twice."""

        def run() -> str:
            executed("charge", ctx)
            return f"charged {amount} (charge #{c.executions('charge')})"

        if not idempotency_key:
            return run()
        result, ran = c.run_once(idempotency_key, run)
        if not ran:
            c.record_deduplicated("charge")
        return result

    @server.tool(annotations=tool_annotations(readOnlyHint=False, idempotentHint=False))
    async def send_email(to: str, body: str, ctx: Context) -> str:
        """Send an email (changes; no deduplication)."""
        executed("send_email", ctx)
        return f"sent {len(body)} characters to {to}"

    @server.tool(annotations=tool_annotations(readOnlyHint=True))
    async def slow(seconds: float, ctx: Context) -> str:
        """Sleep `seconds`, then answer."""
        executed("slow", ctx)
        await anyio.sleep(max(0.0, seconds))
        return f"slept {seconds}s"

    @server.tool(annotations=tool_annotations(readOnlyHint=True))
    async def fail(ctx: Context) -> str:
        """Always answer a tool error (isError: true), never a JSON-RPC error."""
        executed("fail", ctx)
        raise ToolError("the tool failed on purpose")

    @server.tool(annotations=tool_annotations(readOnlyHint=True))
    async def bulk(size: int, ctx: Context) -> str:
        """Answer `size` characters (a large answer to a small request)."""
        executed("bulk", ctx)
        return "x" * max(0, min(size, 64 * 1024 * 1024))

    if era_tools:
        add_era_tools(server, c, executed)
    if commerce_tools:
        add_commerce_tools(server, c, executed)
    return server


# Where each commerce protocol nests its idempotency key in a tool call's arguments.
COMMERCE_KEYS: dict[str, str] = {
    "acp_checkout": "idempotency_key",  # the Agentic Commerce Protocol: meta.idempotency_key
    "ucp_checkout": "idempotency-key",  # the Universal Commerce Protocol: meta["idempotency-key"]
}


def add_commerce_tools(server: MCPServer, c: Counters, executed: Callable[[str, Context], None]) -> None:
    """Checkouts (changes) that deduplicate by the key each commerce protocol nests in `meta`
    (COMMERCE_KEYS): the same non-empty key there never checks out twice; any other key is not one."""
    for tool, key_name in COMMERCE_KEYS.items():
        _add_checkout(server, c, executed, tool, key_name)


def _add_checkout(
    server: MCPServer, c: Counters, executed: Callable[[str, Context], None], tool: str, key_name: str
) -> None:
    @server.tool(name=tool, annotations=tool_annotations(readOnlyHint=False, idempotentHint=False))
    async def checkout(amount: int, ctx: Context, meta: dict[str, Any] | None = None) -> str:
        """Check the cart out (changes; deduplicates by the key in `meta`)."""

        def run() -> str:
            executed(tool, ctx)
            return f"checked out {amount}"

        key = (meta or {}).get(key_name)
        if not isinstance(key, str) or not key:
            return run()
        result, ran = c.run_once(f"{tool}:{key}", run)
        if not ran:
            c.record_deduplicated(tool)
        return result


def add_era_tools(server: MCPServer, c: Counters, executed: Callable[[str, Context], None]) -> None:
    """The tools whose behaviour depends on the protocol era (see build_server)."""

    @server.tool(annotations=tool_annotations(readOnlyHint=True))
    async def lookup(
        account: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Account"})], ctx: Context
    ) -> str:
        """Look an account up (read-only). `account` is mirrored into the `Mcp-Param-Account` header
        (2026-07-28): a client that has not listed the tools is rejected with HEADER_MISMATCH."""
        executed("lookup", ctx)
        return f"account {account}: open"

    @server.tool(annotations=tool_annotations(readOnlyHint=False, idempotentHint=False))
    async def transfer(
        account: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Account"})],
        amount: int,
        ctx: Context,
        idempotency_key: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Key"})] = "",
    ) -> str:
        """Move money (changes; deduplicates by key). `account` and `idempotency_key` are mirrored
        into `Mcp-Param-Account` and `Mcp-Param-Key` headers (2026-07-28)."""

        def run() -> str:
            executed("transfer", ctx)
            return f"moved {amount} from {account}"

        if not idempotency_key:
            return run()
        result, _ = c.run_once(f"transfer:{idempotency_key}", run)
        return result

    add_multi_round_tool(server, executed)


def add_multi_round_tool(server: MCPServer, executed: Callable[[str, Context], None]) -> None:
    """`ask_then_charge(amount)`: asks the client to confirm (an elicitation), then charges, counted
    once when the charge runs. One tool, written once, as the era serves it: on 2026-07-28 the
    question is a round of its own (SEP-2322: round 1 answers `InputRequiredResult`, round 2 carries
    the answer and runs the body); on the legacy era (and mcp 1.x) it is asked mid-call, one request."""
    if LINE == 2:

        @server.tool(annotations=tool_annotations(readOnlyHint=False, idempotentHint=False))
        async def ask_then_charge(
            amount: int, confirmation: Annotated[Confirmation, Resolve(ask_confirmation)], ctx: Context
        ) -> str:
            """Ask the client to confirm, then charge `amount` (changes)."""
            if not confirmation.ok:
                return "not charged"
            executed("ask_then_charge", ctx)
            return f"charged {amount}"

        return

    @server.tool(
        name="ask_then_charge", annotations=tool_annotations(readOnlyHint=False, idempotentHint=False)
    )
    async def ask_mid_call_then_charge(amount: int, ctx: Context) -> str:
        """Ask the client to confirm, then charge `amount` (changes)."""
        answer = await ctx.elicit(f"charge {amount}?", Confirmation)
        if answer.action != "accept" or not answer.data.ok:
            return "not charged"
        executed("ask_then_charge", ctx)
        return f"charged {amount}"


def _session_id(ctx: Context) -> str | None:
    """The session id the fault injector also keys POSTs by (header, or the SSE query)."""
    request = ctx.request_context.request
    headers = getattr(request, "headers", None)
    sid = headers.get("mcp-session-id") if headers is not None else None
    if sid is None:
        query = getattr(request, "query_params", None)
        sid = query.get("session_id") if query is not None else None
    return sid if isinstance(sid, str) else None


def _loopback_security() -> TransportSecuritySettings:
    # The SDK's own default for 127.0.0.1, spelled out: any port, so a proxy in front still passes.
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=["127.0.0.1:*", "localhost:*"],
        allowed_origins=["http://127.0.0.1:*", "http://localhost:*"],
    )


def build_app(server: MCPServer, app_kind: AppKind, *, stateless: bool = False) -> tuple[ASGIApp, str]:
    """The ASGI app for `app_kind` and the endpoint path a client connects to."""
    if app_kind == "sse":
        return build_sse_app(server, security=_loopback_security()), "/sse"
    json_response = app_kind == "streamable-json"
    security = _loopback_security()
    return build_streamable_app(
        server, json_response=json_response, stateless=stateless, security=security
    ), "/mcp"


@dataclass
class ServerHandle:
    """A running demo server: its endpoint, counters and fault plan."""

    url: str  # the MCP endpoint: http://127.0.0.1:PORT/mcp, or .../sse for the SSE app
    port: int
    app_kind: AppKind
    counters: Counters
    faults: FaultPlan
    connections: ConnectionRegistry
    _uvicorn: uvicorn.Server
    _thread: threading.Thread

    @property
    def origin(self) -> str:
        return f"http://{_HOST}:{self.port}"

    def reset(self) -> None:
        """Zero the counters and clear the fault plan (between phases of one test)."""
        self.counters.reset()
        self.faults.clear()

    def __enter__(self) -> ServerHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self, timeout: float = 5.0) -> None:
        """Ask uvicorn to exit, then force it if it has not within `timeout`. Idempotent."""
        self._uvicorn.should_exit = True
        self._thread.join(timeout)
        if self._thread.is_alive():
            self._uvicorn.force_exit = True
            self._thread.join(timeout)
        if self._thread.is_alive():
            raise RuntimeError("the demo server thread did not stop")


def running_server(
    app_kind: AppKind = "streamable",
    *,
    fault_plan: FaultPlan | None = None,
    counters: Counters | None = None,
    server: MCPServer | None = None,
    stateless: bool = False,
    port: int = 0,
    startup_timeout: float = 5.0,
    middleware: Callable[[ASGIApp], ASGIApp] | None = None,
    asgi: tuple[ASGIApp, str] | None = None,
) -> ServerHandle:
    """Serve the demo server (or `server`) on 127.0.0.1:`port` (0: ephemeral), started on return.

    Use it as `with running_server(...) as handle:` (stopped when the block ends), or call
    `handle.stop()` yourself. `app_kind`: "streamable" (SSE-framed answers), "streamable-json" (JSON
    answers) or "sse" (the legacy SSE transport). `stateless=True` serves streamable HTTP without
    session ids. On mcp 2.x the streamable apps serve both legacy (session) and 2026-07-28 clients;
    on 1.x, protocol versions up to 2025-11-25, always with session ids unless stateless.
    `asgi`: another server's app and its endpoint path (fastmcp's, tests/tasks), served the same way.
    """
    if app_kind not in APP_KINDS:
        raise ValueError(f"app_kind must be one of {APP_KINDS}")
    counters = counters if counters is not None else Counters()
    plan = fault_plan if fault_plan is not None else FaultPlan()
    if asgi is None:
        mcp_server = server if server is not None else build_server(counters)
        inner, path = build_app(mcp_server, app_kind, stateless=stateless)
    else:
        inner, path = asgi
    registry = ConnectionRegistry()
    app: ASGIApp = FaultInjector(inner, plan, counters.record_post, registry)
    if middleware is not None:
        app = middleware(app)

    # IPPROTO_TCP, not 0: asyncio turns TCP_NODELAY on only for sockets it knows are TCP, and without
    # it every kept-alive request waits ~40 ms for a delayed ACK.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((_HOST, port))
    bound_port = sock.getsockname()[1]
    config = uvicorn.Config(
        app,
        http=abortable_h11_protocol(registry),
        lifespan="on",
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=_GRACEFUL_SHUTDOWN_S,
    )
    userver = uvicorn.Server(config)
    thread = threading.Thread(
        target=userver.run, kwargs={"sockets": [sock]}, name=f"mcp-demo-{bound_port}", daemon=True
    )
    thread.start()
    handle = ServerHandle(
        url=f"http://{_HOST}:{bound_port}{path}",
        port=bound_port,
        app_kind=app_kind,
        counters=counters,
        faults=plan,
        connections=registry,
        _uvicorn=userver,
        _thread=thread,
    )
    try:
        _wait_started(userver, thread, bound_port, startup_timeout)
    except BaseException:
        handle.stop()
        sock.close()  # uvicorn closes it on a normal shutdown, not when it failed to start
        raise
    return handle


def _wait_started(userver: uvicorn.Server, thread: threading.Thread, port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not userver.started:
        if not thread.is_alive():
            raise RuntimeError("the demo server failed to start")
        if time.monotonic() > deadline:
            raise TimeoutError("the demo server did not start in time")
        time.sleep(0.005)
    # started means listening; one connect proves it accepts.
    with socket.create_connection((_HOST, port), timeout=max(0.1, deadline - time.monotonic())):
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m harness.server`: serve until stdin closes or Ctrl-C.

    Prints `MCP_URL=<endpoint>` as its first stdout line, for a parent process to read.
    """
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--app", choices=APP_KINDS, default="streamable")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--stateless", action="store_true")
    parser.add_argument("--faults", default=None, help="a fault plan as JSON (see FaultPlan.from_json)")
    args = parser.parse_args(argv)
    plan = FaultPlan.from_json(args.faults) if args.faults else FaultPlan()
    with running_server(args.app, fault_plan=plan, stateless=args.stateless, port=args.port) as handle:
        print(f"MCP_URL={handle.url}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            # Bounded by the parent: it closes our stdin (or interrupts us) to stop the server.
            sys.stdin.read()
        print(_summary(handle.counters), file=sys.stderr, flush=True)
    return 0


def _summary(counters: Counters) -> str:
    tools = ("search", "charge", "send_email", "slow", "fail")
    parts: list[Any] = [f"{t}={counters.executions(t)}" for t in tools]
    return "executions: " + " ".join(parts) + f"; posts: {counters.total_posts}"


if __name__ == "__main__":
    raise SystemExit(main())
