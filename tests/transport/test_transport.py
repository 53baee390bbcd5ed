"""The series on the real mcp client: waits, budgets, cancellation, concurrency, every transport.

Ground truth is the server's: tool executions and POSTs per request id. Timing assertions leave
generous slack; they check order and bounds, never a tight figure.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import gc
import importlib
import json
import random
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from importlib.metadata import version
from typing import Any

import anyio
import mcp.client.sse
import pytest
from mcp import ClientSession
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters
from opentelemetry.instrumentation.utils import suppress_instrumentation
from packaging.version import Version
from tests.support.calls import declared, leaves, refused, refused_call
from tests.support.telemetry import Telemetry, attempt_spans, decided_attempts, records, the_record

from harness.client import ERAS, Client, McpError, http, is_error, types
from harness.faults import (
    DropAfterExecution,
    DropBeforeExecution,
    DropMidBody,
    SseWithoutAnswer,
    StallThenPass,
    Status,
    Throttle,
    http_date,
)
from harness.faults import Status as HttpStatus
from harness.proxy import TcpProxy
from harness.sdk import LINE
from harness.server import ServerHandle, running_server
from otel_mcp_replay import ReplayUnavailableError, UnknownEffectError
from otel_mcp_replay import telemetry as t
from otel_mcp_replay.patches.sse import SseConnections, SseStream

if sys.version_info < (3, 11):  # pragma: no cover - Python 3.10
    from exceptiongroup import BaseExceptionGroup

pytestmark = pytest.mark.anyio

ORIGINAL_SEND = http.AsyncClient.send
ORIGINAL_CALL_TOOL = ClientSession.call_tool
ORIGINAL_SSE_CLIENT = mcp.client.sse.sse_client
# Every seam the plugin wraps on the installed line: (module, attribute).
SEAMS = [
    (http.__name__, "AsyncClient.send"),
    # the one door to the transport: what reached the connection (never sent is `none`)
    (http.__name__, "AsyncClient._send_single_request"),
    # the json= dict the SDK builds each POST from: the law reads it, never the bytes again
    (http.__name__, "AsyncClient.build_request"),
    ("mcp.client.session", "ClientSession.call_tool"),
    ("mcp.client.stdio", "stdio_client"),
    # the SDK's event-stream reader: the answers are read from the events it yields, as it yields them
    (
        http.__name__ if LINE == 2 else "httpx_sse",
        "EventSource.__aiter__" if LINE == 2 else "EventSource.aiter_sse",
    ),
]
if LINE == 2:
    SEAMS += [
        # `Client(StdioServerParameters(...))` calls the stdio_client its own module imported
        ("mcp.client.client", "stdio_client"),
        # a tools/call sent past call_tool is a call too (1.x: BaseSession.send_request, below)
        ("mcp.client.session", "ClientSession.send_request"),
        # a caller's cancel, told to the server, ends the call
        ("mcp.shared.jsonrpc_dispatcher", "JSONRPCDispatcher.notify"),
        # the SDK's round driver (SEP-2322): its rounds are one call
        ("mcp.client.client", "Client.call_tool"),
        # the SDK's own client span of a tools/call the plugin owns: the call span stands in for it
        ("mcp.shared.jsonrpc_dispatcher", "otel_span"),
        # a session closing ends its task-backed calls still open (tasks.py)
        ("mcp.client.session", "ClientSession.__aexit__"),
    ]
else:  # the carrier (patches/carrier.py) takes each call to the task that POSTs it
    SEAMS += [
        ("mcp.client.session", "ClientSession.__init__"),
        ("mcp.shared.session", "BaseSession.send_request"),
        ("mcp.client.streamable_http", "StreamableHTTPTransport._handle_post_request"),
        ("mcp.client.streamable_http", "StreamableHTTPTransport.post_writer"),
    ]


def seam(module: str, name: str) -> Any:
    found: Any = importlib.import_module(module)
    for part in name.split("."):
        found = getattr(found, part)
    return found


@contextlib.asynccontextmanager
async def sessions(url: str, count: int, mode: str | None = None) -> AsyncIterator[Callable[[], Any]]:
    """The session each of `count` concurrent calls uses (`async with session_for() as client`): one
    shared on 2.x. On 1.x a refusal handed to the SDK ends its whole session (docs/mcp-lines.md),
    so there each call opens a session of its own, as LangChain's adapters do on 1.x, and waits
    until all are open: the calls still meet at once, with no opening's request among them."""
    if LINE == 2:
        async with Client(url, mode=mode) as client:
            yield lambda: contextlib.nullcontext(client)
        return
    opened, all_open = 0, anyio.Event()

    @contextlib.asynccontextmanager
    async def own() -> AsyncIterator[Any]:
        nonlocal opened
        async with Client(url, mode=mode) as client:
            opened += 1
            if opened == count:
                all_open.set()
            await all_open.wait()
            yield client

    yield own


@contextlib.contextmanager
def ended_by_a_refusal() -> Iterator[None]:
    """Let pass a session's end the 1.x SDK makes of a refusal it is handed (its transport's task
    group raises `HTTPStatusError`, docs/mcp-lines.md); any other error still fails the test."""
    try:
        yield
    except BaseExceptionGroup as group:
        if LINE == 2 or not all(isinstance(e, http.HTTPStatusError) for e in leaves(group)):
            raise


# -- a clean call's objects --


async def test_a_clean_call_leaves_none_of_its_state_in_a_reference_cycle(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    """Each call's state (its ToolCall, the app's AppCall, its attempts and rows) is freed as the
    call returns: none is left in a cycle for the garbage collector, which would cost every call a
    share of the collections (an AppCall and its last round referred to each other: 9 objects a call).
    The answer watch is the SDK's response's, and lives as long as it: on mcp 1.x the SDK's own
    cancelled stream tasks leave each response in a cycle, with the plugin or without."""
    from otel_mcp_replay.attempt import Attempt
    from otel_mcp_replay.call import AppCall, ToolCall
    from otel_mcp_replay.record import AttemptRow

    state = (AppCall, Attempt, AttemptRow, ToolCall)
    instrument(servers=declared(server, {"search": {"on": ["throttle"]}}))
    async with Client(server.url) as client:
        for _ in range(3):  # the first calls fill caches
            await client.call_tool("search", {"query": "q"})
        gc.collect()
        gc.disable()
        gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection would free is kept in gc.garbage instead
        try:
            for _ in range(5):
                assert not is_error(await client.call_tool("search", {"query": "q"}))
            gc.collect()
            left = [type(o).__qualname__ for o in gc.garbage if type(o) in state]
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()
    assert server.counters.executions("search") == 8
    assert len(records(telemetry)) == 8  # every call was the plugin's
    assert left == []


# -- Retry-After, the wait cap, attempts --


@pytest.mark.parametrize("form", ["delta-seconds", "http-date"])
async def test_retry_after_is_honoured(
    server: ServerHandle, telemetry: Telemetry, instrument: Any, form: str
) -> None:
    instrument(servers=declared(server, {"search": {"on": ["throttle"]}}))
    value = "1" if form == "delta-seconds" else http_date(2)
    server.faults.add("search", Throttle(value))
    with anyio.fail_after(30):  # a guard against a hang only
        async with Client(server.url) as client:
            await client.call_tool("search", {"query": "q"})
    posts = [p for p in server.counters.post_log() if p.tool == "search"]
    assert len(posts) == 2
    wait = the_record(telemetry)[t.ATTEMPTS_WAIT_MS][0]
    # Never sooner than the server asked: lower bounds, which a busy machine can only make later.
    if form == "delta-seconds":  # a second after the 429 came, which left after the first POST came
        assert posts[1].at - posts[0].at >= 1.0
        assert wait == 1000  # what it planned to wait, the record's: the server's word exactly
    else:  # not before the date (made as the fault was queued, so how much of it is left when the
        # 429 is read depends on the machine: the record's wait is at most the whole of it)
        assert posts[1].at_epoch >= email.utils.parsedate_to_datetime(value).timestamp()
        assert 0 <= wait <= 2000


async def test_a_retry_after_past_the_cap_declines_without_waiting(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    instrument(servers=declared(server, {"search": {"on": ["throttle"]}}), max_wait_ms=500)
    server.faults.add("search", Throttle("30"))
    with anyio.fail_after(20):  # a guard against waiting the 30 s out; the verdict is the record's
        await refused_call(server.url, "search", {"query": "q"}, 429)
    assert (attempt_spans(telemetry)[0].attributes or {})[t.DECLINED] == "budget"
    # Declined at once, not shortened to the cap: no wait planned, nothing sent again.
    record = the_record(telemetry)
    assert record[t.SENT] == 1 == server.counters.tool_posts("search")
    assert record[t.ATTEMPTS_WAIT_MS] == (0,)


async def test_max_attempts_bounds_the_series(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    instrument(servers=declared(server, {"search": {"on": ["throttle"]}}), max_attempts=4)
    server.faults.add("search", *[Throttle("0")] * 10)
    await refused_call(server.url, "search", {"query": "q"}, 429)
    record = the_record(telemetry)
    assert record[t.SENT] == 4 == server.counters.posts(record[t.JSONRPC_REQUEST_ID])
    spans = attempt_spans(telemetry)
    assert [(s.attributes or {})[t.ATTEMPT] for s in spans] == [1, 2, 3, 4]
    assert (spans[-1].attributes or {})[t.DECLINED] == "budget"
    assert server.counters.executions("search") == 0


async def test_the_retry_budget_stops_a_429_storm_from_multiplying_load(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    """40 concurrent calls all refused: with a budget of 10 tokens, repeats stop at half."""
    instrument(
        servers=declared(server, {"search": {"on": ["throttle"]}}), retry_budget=(10, 0.1), max_attempts=5
    )
    server.faults.set_rule(lambda ctx: Throttle("0") if ctx.tool == "search" else None)
    async with sessions(server.url, 40) as session_for:

        async def one(i: int) -> None:
            with ended_by_a_refusal():
                async with session_for() as client:
                    with contextlib.suppress(McpError):
                        await client.call_tool("search", {"query": str(i)})

        async with anyio.create_task_group() as tg:
            for i in range(40):
                tg.start_soon(one, i)
    posts = server.counters.tool_posts("search")
    assert 40 <= posts <= 40 + 6  # without the budget: up to 200
    declined = [(s.attributes or {}).get(t.DECLINED) for s in attempt_spans(telemetry)]
    assert declined.count("budget") >= 34


# -- cancellation --


async def test_a_cancelled_call_sends_nothing_more_and_stops_waiting(
    server: ServerHandle, telemetry: Telemetry, instrument: Any, mode: str
) -> None:
    instrument(servers=declared(server, {"search": {"on": ["throttle"]}}))
    server.faults.add("search", Throttle("3"))
    async with Client(server.url, mode=mode) as client:
        with anyio.move_on_after(0.5) as scope:
            await client.call_tool("search", {"query": "q"})
        # It stopped waiting: a wait the cancel could not end would have returned after the
        # Retry-After's repeat, its second POST already sent.
        assert scope.cancelled_caught
        assert server.counters.tool_posts("search") == 1
        # Its one attempt decided without a repeat (declined at the cancel): the series is over.
        (first,) = await decided_attempts(telemetry)
        assert t.WAIT_MS not in (first.attributes or {}) and t.DECLINED in (first.attributes or {})
        assert server.counters.tool_posts("search") == 1
        assert is_error(await client.call_tool("search", {"query": "next"})) is False
    first = records(telemetry)[0]
    assert first[t.VERDICT] == "failed"
    assert first[t.SENT] == 1


async def test_a_read_timeout_gives_the_call_up_and_nothing_more_is_sent(
    server: ServerHandle, telemetry: Telemetry, instrument: Any, mode: str
) -> None:
    instrument(servers=declared(server, {"search": {"on": ["throttle"]}}))
    server.faults.add("search", Throttle("3"))
    async with Client(server.url, mode=mode) as client:
        with pytest.raises(McpError):
            await client.call_tool("search", {"query": "q"}, read_timeout_seconds=0.4)
        # Its one attempt decided without a repeat (declined when the call was given up).
        (first,) = await decided_attempts(telemetry)
        assert t.WAIT_MS not in (first.attributes or {}) and t.DECLINED in (first.attributes or {})
        assert server.counters.tool_posts("search") == 1


# -- concurrency: the record agrees with the server --


async def test_sixty_concurrent_calls_with_mixed_faults_each_record_matches_the_server(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    tools = {"search": {"on": ["throttle", "network"]}, "charge": {"changes": True, "on": ["network"]}}
    instrument(servers=declared(server, tools, deduplicates={"argument": "idempotency_key"}))
    rng = random.Random(20261129)
    menu = [None, None, Throttle("0"), Status(503), DropBeforeExecution(), DropAfterExecution()]

    # What each POST of each call (its tool and arguments) drew: what the server did with it is known.
    drawn: dict[tuple[str, str], list[Any]] = {}

    def rule(ctx: Any) -> Any:
        if ctx.method != "tools/call":
            return None
        fault = rng.choice(menu)
        drawn.setdefault((ctx.tool, json.dumps(dict(ctx.arguments), sort_keys=True)), []).append(fault)
        return fault

    server.faults.set_rule(rule)
    # Each call runs under a span of the test's, so its record (on its call span, a child) is known
    # as that call's; the server knows each call's POSTs by their arguments (request ids repeat
    # across the sessions of 1.x, each call's own).
    tracer = telemetry.tracer_provider.get_tracer("the test")
    calls: dict[int, tuple[str, dict[str, Any]]] = {}  # the test's span id -> the call's tool, arguments
    async with sessions(server.url, 60, mode="legacy") as session_for:

        async def one(i: int) -> None:
            arguments: dict[str, Any] = {"query": str(i)}
            name = "search"
            if i % 3 == 0:
                name, arguments = "charge", {"amount": i, "idempotency_key": f"key-{i}"}
            with tracer.start_as_current_span(f"call {i}") as parent:
                calls[parent.get_span_context().span_id] = (name, arguments)
                with ended_by_a_refusal():
                    async with session_for() as client:
                        with contextlib.suppress(McpError):
                            await client.call_tool(name, arguments)

        async with anyio.create_task_group() as tg:
            for i in range(60):
                tg.start_soon(one, i)
    found = [
        (span, dict(event.attributes or {}))
        for span in telemetry.spans()
        for event in span.events
        if event.name == t.RECORD_EVENT
    ]
    assert len(found) == 60
    log = server.counters.post_log()
    for span, record in found:
        assert span.parent is not None
        name, arguments = calls[span.parent.span_id]
        posts = [p for p in log if p.tool == name and json.loads(p.body)["params"]["arguments"] == arguments]
        assert record[t.SENT] == len(posts), record
        assert {p.request_id for p in posts} <= {record[t.JSONRPC_REQUEST_ID]}, record

    # Every POST that reached the tool ran it (no fault, or the cut after it ran); a changes tool with
    # its key only the first time per call (the server's idempotency memory answers the rest): the
    # exact counts, so one execution too many, a double execution of a charge included, fails here.
    def reached(faults: list[Any]) -> int:
        return sum(1 for fault in faults if fault is None or isinstance(fault, DropAfterExecution))

    searches = [reached(faults) for (tool, _), faults in drawn.items() if tool == "search"]
    charges = [reached(faults) for (tool, _), faults in drawn.items() if tool == "charge"]
    assert len(searches) + len(charges) == 60 and len(charges) == 20
    assert server.counters.executions("search") == sum(searches)
    assert server.counters.executions("charge") == sum(1 for n in charges if n)
    assert server.counters.deduplicated("charge") == sum(n - 1 for n in charges if n)


# -- the SSE transport --


@pytest.fixture
def sse_server() -> Iterator[ServerHandle]:
    with running_server("sse") as handle:
        yield handle


@contextlib.asynccontextmanager
async def sse_session(server: ServerHandle) -> AsyncIterator[ClientSession]:
    """An initialized session on the SSE transport, through the sse_client the plugin patched."""
    async with (
        mcp.client.sse.sse_client(server.url) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


async def test_sse_transport_repeats_a_429_and_records_the_answer(
    sse_server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    instrument(
        servers={sse_server.origin: {"policy": "app-authorized", "tools": {"search": {"on": ["throttle"]}}}}
    )
    sse_server.faults.add("search", Throttle("0"))
    async with sse_session(sse_server) as session:
        result = await session.call_tool("search", {"query": "q"})
    assert not is_error(result)
    record = the_record(telemetry)
    assert record[t.ATTEMPTS_STATUS] == (429, 202)
    assert record[t.ATTEMPTS_EFFECT] == ("unknown", "applied")
    assert record[t.SENT] == 2 == sse_server.counters.posts(record[t.JSONRPC_REQUEST_ID])
    assert sse_server.counters.executions("search") == 1


async def test_the_http_seam_remembers_a_legacy_sse_connection_only_while_it_is_open(
    sse_server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    """What the legacy SSE transport needs lives with its seam (`SseConnections`, made by
    instrument() and bound into the HTTP seam), not in the Runtime: a connection is known while its
    stream is open, its calls await their answers on its own `SseStream`, and once it ends nothing of
    it is left for the streamable-HTTP path to look at (its check: one empty dict)."""
    instrument(servers={sse_server.origin: {"policy": "app-authorized", "tools": {}}})
    async with sse_session(sse_server) as session:
        gc.collect()  # what earlier tests' seams held, if unreachable, is gone
        holding = [o for o in gc.get_objects() if type(o) is SseConnections and o.by_client]
        assert len(holding) == 1
        (connections,) = holding
        (posts,) = connections.by_client.values()  # one client, one announced message endpoint
        (stream,) = posts.values()
        assert type(stream) is SseStream
        assert not is_error(await session.call_tool("search", {"query": "q"}))
        assert stream.waiting == {}  # the answered call is awaited no more
    with anyio.fail_after(10):  # guards a hang only: the stream's end is what is awaited
        while connections.by_client:
            await anyio.sleep(0.01)
    assert the_record(telemetry)[t.ATTEMPTS_EFFECT] == ("applied",)
    assert sse_server.counters.executions("search") == 1


async def test_sse_transport_network_failure_fails_only_that_call(
    sse_server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    instrument(servers={sse_server.origin: {"policy": "app-authorized", "tools": {}}})
    sse_server.faults.add("search", DropBeforeExecution())
    async with sse_session(sse_server) as session:
        with anyio.fail_after(10), pytest.raises(UnknownEffectError):
            await session.call_tool("search", {"query": "q"})
        with anyio.fail_after(10):
            assert is_error(await session.call_tool("search", {"query": "next"})) is False
    assert records(telemetry)[0][t.MAY_HAVE_RUN] is True


async def test_a_call_gets_a_scope_the_seam_can_end_until_its_session_is_seen_on_streamable_http(
    sse_server: ServerHandle, server: ServerHandle, instrument: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only where the SDK would wait forever for an answer (the legacy SSE transport, a connection
    whose answers cannot be matched) does the HTTP seam end a call by cancelling its scope. A session
    once seen speaking streamable HTTP, where the SDK resolves a failed request itself, gets none.
    mcp 1.x does not resolve a streamable-HTTP call whose event stream ended without its answer (it
    waits, docs/mcp-lines.md): there every call keeps its scope."""
    from otel_mcp_replay.patches import session as session_patch

    scoped = 0
    real = session_patch._stoppable

    async def counted(*args: Any) -> Any:
        nonlocal scoped
        scoped += 1
        return await real(*args)

    monkeypatch.setattr(session_patch, "_stoppable", counted)
    kept = 1 if LINE == 1 else 0  # the scope a call of a session known as streamable HTTP gets
    app = {"policy": "app-authorized", "tools": {}}
    instrument(servers={sse_server.url: app, server.url: app})
    async with Client(server.url) as client:
        assert is_error(await client.call_tool("search", {"query": "streamable"})) is False
        assert scoped == 1  # its session was not known yet
        assert is_error(await client.call_tool("search", {"query": "again"})) is False
        assert scoped == 1 + kept
        sse_server.faults.add("search", DropBeforeExecution())
        async with sse_session(sse_server) as session:
            with anyio.fail_after(10), pytest.raises(UnknownEffectError):
                await session.call_tool("search", {"query": "sse"})  # ended by its scope
            assert scoped == 2 + kept
            assert is_error(await session.call_tool("search", {"query": "sse again"})) is False
            assert scoped == 3 + kept  # an SSE session keeps its scope
            assert is_error(await client.call_tool("search", {"query": "meanwhile"})) is False
            assert scoped == 3 + 2 * kept


async def test_an_sse_client_imported_before_instrument_keeps_the_declaration_of_its_url(
    sse_server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    """Frameworks import sse_client when they load, before the app calls instrument(): the plugin
    knows the connection where it is used (its GET stream), and the declaration keyed by the URL
    the app connects to (`.../sse`) governs the calls POSTed to the endpoint it announced."""
    early = sse_client  # bound at import, before instrument()
    instrument(
        servers={sse_server.url: {"policy": "app-authorized", "tools": {"search": {"on": ["throttle"]}}}}
    )
    assert mcp.client.sse.sse_client is early  # nothing wraps it: import order cannot matter
    sse_server.faults.add("search", Throttle("0"))
    async with early(sse_server.url) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        with anyio.fail_after(10):
            result = await session.call_tool("search", {"query": "q"})
    assert not is_error(result)
    record = the_record(telemetry)
    assert record[t.POLICY] == "app-authorized"
    assert record[t.ATTEMPTS_PERMISSION] == ("first", "app")
    assert record[t.ATTEMPTS_STATUS] == (429, 202)
    assert sse_server.counters.executions("search") == 1


@pytest.mark.parametrize("key", ["url", "origin"])
async def test_an_sse_stream_opened_before_instrument_is_refused_at_once_under_app_authorized(
    sse_server: ServerHandle, telemetry: Telemetry, instrument: Any, key: str
) -> None:
    """Its GET stream was never seen, so its answers cannot be matched, nor can its calls' URL be
    told from its own: an app-authorized declaration on its origin refuses it (fail closed) before
    sending, at once (not after the SDK's timeout), and the session lives on."""
    async with sse_client(sse_server.url) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        declared = sse_server.url if key == "url" else sse_server.origin
        instrument(servers={declared: {"policy": "app-authorized", "tools": {}}})
        # The SDK's own timeout is far longer than this guard against a hang.
        with anyio.fail_after(10), pytest.raises(ReplayUnavailableError):
            await session.call_tool("search", {"query": "q"})
        assert (await session.list_tools()).tools  # the connection itself still works
    assert sse_server.counters.tool_posts("search") == 0  # refused before it was sent
    record = the_record(telemetry)
    assert (record[t.SENT], record[t.EFFECT], record[t.VERDICT]) == (0, "none", "failed")


async def test_a_streamable_session_opened_before_instrument_has_its_calls_followed(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    """A session (and its transport) opened before instrument(): its calls are still this plugin's,
    repeated by the declaration of its URL and filed as sent there (mcp 1.x POSTs from a task the
    transport started before instrument(), where no call is current)."""
    from mcp.client.streamable_http import streamable_http_client

    async with (
        streamable_http_client(server.url) as (read, write, *_),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        instrument(servers=declared(server, {"search": {"on": ["throttle"]}}))
        server.faults.add("search", Throttle("0"))
        with anyio.fail_after(10):
            assert not is_error(await session.call_tool("search", {"query": "q"}))
    record = the_record(telemetry)
    assert (record[t.POLICY], record[t.ENDPOINT]) == ("app-authorized", server.origin)
    assert record[t.ATTEMPTS_STATUS] == (429, 200) and record[t.ATTEMPTS_PERMISSION] == ("first", "app")
    assert record[t.SENT] == 2 == server.counters.posts(record[t.JSONRPC_REQUEST_ID])


async def test_a_callers_timeout_is_never_replaced_by_a_plugin_error(
    sse_server: ServerHandle, server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    """A caller that stops waiting gets its own timeout, on both transports, whatever the plugin knew,
    and its session lives on."""
    app = {"policy": "app-authorized", "tools": {"search": {"on": ["network"]}}}
    instrument(servers={sse_server.url: app, server.url: app})
    sse_server.faults.add("search", StallThenPass(3.0))
    async with sse_session(sse_server) as session:
        # asyncio.wait_for's own: the builtin TimeoutError from Python 3.11, a class of its own on 3.10.
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(session.call_tool("search", {"query": "slow"}), 0.5)
        # The timed-out call's late answer comes on the session's stream. Closing the session while
        # the SDK delivers it is the SDK's own race, with the plugin or without (its sse_reader then
        # raises BrokenResourceError out of sse_client): a next call, which the server takes after
        # the first was answered or cancelled, lets it land first, and shows the session lives.
        assert sse_server.counters.wait_until(lambda c: c.executions("search") == 1)
        with anyio.fail_after(10):
            assert not is_error(await session.call_tool("search", {"query": "next"}))
    server.faults.add("search", StallThenPass(3.0))
    async with Client(server.url) as client:
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(client.call_tool("search", {"query": "slow"}), 0.5)
    sse_slow, sse_next, streamable_slow = records(telemetry)
    for timed_out in (sse_slow, streamable_slow):  # the caller's: never "may have run"
        assert (timed_out[t.VERDICT], timed_out[t.MAY_HAVE_RUN]) == ("failed", False)
    assert sse_next[t.VERDICT] == "completed"


async def test_an_sse_refusal_that_is_not_repeated_fails_that_call_at_once_and_the_session_lives(
    sse_server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    """A 429 the law declines (a changing tool without a key) fails that call promptly with the
    server's status kept, as on streamable HTTP; the SDK alone would lose the session."""
    instrument(servers={sse_server.url: {"tools": {"send_email": {"changes": True}}}})
    sse_server.faults.add("send_email", Throttle("0"))
    async with sse_session(sse_server) as session:
        with anyio.fail_after(10), pytest.raises(McpError) as refused:  # a guard against a hang only
            await session.call_tool("send_email", {"to": "a", "body": "b"})
        assert "429" in str(refused.value)
        assert is_error(await session.call_tool("search", {"query": "next"})) is False
    record = records(telemetry)[0]
    assert record[t.ATTEMPTS_STATUS] == (429,) and record[t.VERDICT] == "failed"
    assert sse_server.counters.executions("send_email") == 0


# -- answers that never came --


@pytest.mark.parametrize("kind", ["streamable", "streamable-json"])
async def test_a_2xx_without_the_answer_is_may_have_run_under_app_authorized(
    telemetry: Telemetry, instrument: Any, kind: str
) -> None:
    fault = SseWithoutAnswer(run_tool=True) if kind == "streamable" else DropMidBody()
    with running_server(kind) as server:
        instrument(servers=declared(server, {}))
        server.faults.add("search", fault)
        async with Client(server.url) as client:
            with anyio.fail_after(10), pytest.raises(UnknownEffectError):
                await client.call_tool("search", {"query": "q"})
            assert is_error(await client.call_tool("search", {"query": "next"})) is False
    failed = records(telemetry)[0]
    assert failed[t.MAY_HAVE_RUN] is True
    assert failed[t.EFFECT] == "unknown"
    # A stream that ended without its answer is a response (`error`); a body cut mid-way is not.
    assert failed[t.ATTEMPTS_FAILURE] == (("error",) if kind == "streamable" else ("network",))


async def test_a_body_cut_mid_way_is_repeated_when_the_tool_names_network(
    telemetry: Telemetry, instrument: Any
) -> None:
    with running_server("streamable-json") as server:
        instrument(servers=declared(server, {"search": {"on": ["network"]}}))
        server.faults.add("search", DropMidBody())
        async with Client(server.url) as client:
            result = await client.call_tool("search", {"query": "q"})
        assert not is_error(result)
        record = the_record(telemetry)
        assert record[t.ATTEMPTS_FAILURE] == ("network", "")
        assert record[t.SENT] == 2 == server.counters.posts(record[t.JSONRPC_REQUEST_ID])


# -- a repeat is the same request --


async def test_a_repeat_sends_the_same_bytes_in_the_same_session(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    instrument(servers=declared(server, {"search": {"on": ["throttle", "network"]}}))
    server.faults.add("search", Throttle("0"), DropBeforeExecution())
    async with Client(server.url, mode="legacy") as client:
        await client.call_tool("search", {"query": "same"})
    posts = [p for p in server.counters.post_log() if p.tool == "search"]
    assert len(posts) == 3
    assert len({p.body for p in posts}) == 1
    assert len({p.session_id for p in posts}) == 1 and posts[0].session_id


async def test_auth_flows_run_again_for_each_attempt(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    """Same identity, fresh credential: the HTTP client's Auth flow signs every attempt anew."""

    class Counting(http.Auth):
        def __init__(self) -> None:
            self.signed = 0

        def auth_flow(self, request: http.Request) -> Any:
            self.signed += 1
            request.headers["authorization"] = f"Bearer token-{self.signed}"
            yield request

    auth = Counting()
    instrument(servers=declared(server, {"search": {"on": ["throttle"]}}))
    server.faults.add("search", Throttle("0"))
    from mcp.client.streamable_http import streamable_http_client

    async with (
        http.AsyncClient(auth=auth) as http_client,
        streamable_http_client(server.url, http_client=http_client) as (read, write, *_),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        await session.call_tool("search", {"query": "q"})
    tokens = [dict(p.headers).get("authorization") for p in server.counters.post_log() if p.tool == "search"]
    assert len(tokens) == 2 and len(set(tokens)) == 2  # the same request, signed anew for each attempt


# -- a TCP cut through a real proxy --


async def opened(client: Any) -> None:
    """The session's opening is over: a round trip (1.x's `initialize` returns before its
    `notifications/initialized` has been POSTed, and a failed notification POST ends the session)."""
    await client.list_tools()


async def closed_all(proxy: TcpProxy) -> None:
    """Every connection open through the proxy closed, and gone from it."""
    proxy.cut_active()
    with anyio.fail_after(5):
        while proxy.active:
            await anyio.sleep(0.01)


async def test_a_connection_accepted_then_closed_at_once_may_have_carried_the_request(
    telemetry: Telemetry, instrument: Any
) -> None:
    """A proxy that accepts the TCP connection and closes it: the client wrote its request into an
    open connection, so for all it can know the server got it. Its effect is unknown, not none
    (the server's count shows nothing ran, which the client cannot see)."""
    with running_server("streamable") as server, TcpProxy(server.port) as proxy:
        url = server.url.replace(f":{server.port}", f":{proxy.port}")
        instrument(servers={url: {"policy": "app-authorized", "tools": {"search": {"on": ["network"]}}}})
        async with Client(url, mode=ERAS[-1]) as client:
            await opened(client)
            proxy.refuse(True)
            # The connections the session opened (a legacy-era session, 1.x's only era, opens some)
            # are closed too: the call's POST needs a new one, which the proxy accepts and closes.
            await closed_all(proxy)
            with anyio.fail_after(10), pytest.raises(McpError):
                await client.call_tool("search", {"query": "q"})
            proxy.refuse(False)
        record = the_record(telemetry)
        assert set(record[t.ATTEMPTS_FAILURE]) == {"network"}
        assert set(record[t.ATTEMPTS_EFFECT]) == {"unknown"} and record[t.EFFECT] == "unknown"
        assert proxy.refused >= 1
        assert server.counters.tool_posts("search") == 0


async def test_a_connection_refused_is_never_sent_so_its_effect_is_none(
    telemetry: Telemetry, instrument: Any
) -> None:
    """Nothing listens (ECONNREFUSED): the request never left, so nothing can have run. The session
    is opened through a proxy (a legacy-era session, 1.x's only era, talks to the server on open),
    which is then stopped: nothing listens on its port any more, and the connections it held are
    gone, so the call's POST needs a new connection, which is refused."""
    with running_server("streamable") as server:
        proxy = TcpProxy(server.port).start()
        url = proxy.url_for(server.url)
        instrument(servers={url: {"policy": "app-authorized", "tools": {"search": {"on": ["network"]}}}})
        # The SDK's own error for a refused connection reaches the caller (as it alone shows it: on
        # these lines its transport's task raises it), never one of the plugin's.
        with anyio.fail_after(10), pytest.raises(BaseException) as raised:
            async with Client(url, mode=ERAS[-1]) as client:
                await opened(client)
                proxy.stop()
                await client.call_tool("search", {"query": "q"})
        assert server.counters.tool_posts("search") == 0
    seen = leaves(raised.value) if isinstance(raised.value, BaseExceptionGroup) else [raised.value]
    assert [type(e) for e in seen] == [http.ConnectError]
    record = the_record(telemetry)
    # Never sent: no failure kind, so nothing permits a repeat (one attempt), effect none.
    assert record[t.ATTEMPTS_FAILURE] == ("",)
    assert record[t.ATTEMPTS_EFFECT] == ("none",) and record[t.EFFECT] == "none"
    assert record[t.SENT] == 0 and record[t.MAY_HAVE_RUN] is False


# -- stdio: recorded, never repeated --


async def test_stdio_calls_are_recorded_as_one_attempt(telemetry: Telemetry, instrument: Any) -> None:
    instrument()
    params = StdioServerParameters(command=sys.executable, args=["-m", "harness.stdio_server"])
    async with Client(params) as client:
        with anyio.fail_after(20):
            result = await client.call_tool("search", {"query": "q"})
    assert not is_error(result)
    record = the_record(telemetry)
    assert record[t.SENT] == 1
    assert record[t.ENDPOINT] == "local"
    assert record[t.POLICY] == "compatibility"
    assert record[t.ATTEMPTS_EFFECT] == ("applied",)
    assert record[t.JSONRPC_REQUEST_ID].isdigit()  # the id the call went out under


async def test_a_stdio_call_that_fails_is_recorded_as_one_attempt_that_may_have_run(
    telemetry: Telemetry, instrument: Any
) -> None:
    """No HTTP: the call's own end is its one attempt's outcome, classified as any other (law.classify):
    failed without a result, it may have run, and it is never repeated."""
    instrument()
    params = StdioServerParameters(command=sys.executable, args=["-m", "harness.stdio_server"])
    async with Client(params) as client:
        with anyio.fail_after(20), pytest.raises(Exception):  # noqa: B017 (the caller's own timeout, as the SDK raises it)
            await client.call_tool("slow", {"seconds": 5}, read_timeout_seconds=0.2)
    record = the_record(telemetry)
    assert (record[t.SENT], record[t.VERDICT], record[t.ENDPOINT]) == (1, "failed", "local")
    assert record[t.ATTEMPTS_STATUS] == (0,)
    assert record[t.ATTEMPTS_FAILURE] == ("error",)
    assert record[t.ATTEMPTS_EFFECT] == ("unknown",) and record[t.EFFECT] == "unknown"
    # Over stdio the call has its span and record and no attempt span: there is no HTTP request.
    assert attempt_spans(telemetry) == []
    (call,) = [s for s in telemetry.spans() if s.name == f"{t.CALL_SPAN_PREFIX} slow"]
    assert (call.attributes or {})[t.NETWORK_TRANSPORT] == "pipe" and call.kind.name == "CLIENT"


# -- one tree with the SDK's spans and the HTTP client instrumentor's --


@pytest.mark.skipif(
    LINE == 2 and Version(version("opentelemetry-instrumentation-httpx")) < Version("0.65b0"),
    reason="the httpx2 instrumentor comes with opentelemetry-instrumentation-httpx 0.65b0",
)
async def test_one_tree_with_the_httpx2_instrumentor(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    """The attempts nest under the call's span, each the only span of its POST, with the line's own
    HTTP client instrumentor (httpx2's on 2.x, httpx's on 1.x)."""
    from opentelemetry.instrumentation.httpx import HTTPX2ClientInstrumentor, HTTPXClientInstrumentor

    httpx_instrumentor = HTTPX2ClientInstrumentor() if LINE == 2 else HTTPXClientInstrumentor()
    httpx_instrumentor.instrument(tracer_provider=telemetry.tracer_provider)
    try:
        instrument(servers=declared(server, {"search": {"on": ["throttle"]}}))
        server.faults.add("search", Throttle("0"))
        async with Client(server.url) as client:
            await client.call_tool("search", {"query": "q"})
    finally:
        httpx_instrumentor.uninstrument()
    spans = telemetry.spans()
    ours = [
        s for s in spans if s.instrumentation_scope and s.instrumentation_scope.name == t.INSTRUMENTATION_NAME
    ]
    call = next(s for s in ours if s.name == f"{t.CALL_SPAN_PREFIX} search")
    trace_id = call.context.trace_id
    attempts = attempt_spans(telemetry)
    assert len(attempts) == 2
    by_id = {s.context.span_id: s for s in spans}
    for attempt in attempts:
        assert attempt.context.trace_id == trace_id
        assert attempt.parent is not None and attempt.parent.span_id == call.context.span_id
        # The attempt is the HTTP client span of its POST: the instrumentation makes none under it.
        assert not [s for s in spans if s.parent is not None and s.parent.span_id == attempt.context.span_id]
    # The call span stands in for the SDK's own client span of the request (mcp 1.x makes none).
    assert not [s for s in spans if s.name.startswith("MCP send tools/call")]
    assert call.kind.name == "CLIENT"
    assert attempts and all(s.kind.name == "CLIENT" and s.name == "POST" for s in attempts)
    assert by_id  # the tree was read from real exported spans


# -- the plugin's promises about itself --


async def test_no_argument_result_or_key_reaches_telemetry(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    tools = {"charge": {"changes": True, "on": ["network"]}}
    instrument(servers=declared(server, tools, deduplicates={"argument": "idempotency_key"}))
    server.faults.add("charge", DropAfterExecution())
    async with Client(server.url) as client:
        await client.call_tool("charge", {"amount": 987654321, "idempotency_key": "CANARY-KEY-5e1f"})
    ours = [
        s
        for s in telemetry.spans()
        if s.instrumentation_scope and s.instrumentation_scope.name == t.INSTRUMENTATION_NAME
    ]
    assert ours
    text = repr(
        [(s.name, dict(s.attributes or {}), [dict(e.attributes or {}) for e in s.events]) for s in ours]
    )
    for canary in ("CANARY-KEY-5e1f", "987654321", "charged", "/mcp"):
        assert canary not in text


async def test_suppressed_instrumentation_records_and_repeats_nothing(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    instrument(servers=declared(server, {"search": {"on": ["throttle"]}}))
    server.faults.add("search", Throttle("0"))

    async def suppressed(client: Any) -> None:
        with suppress_instrumentation():
            await client.call_tool("search", {"query": "q"})

    await refused(server.url, 429, suppressed)
    assert records(telemetry) == []
    assert server.counters.tool_posts("search") == 1


async def test_suppressed_instrumentation_on_the_sse_transport_repeats_nothing(
    sse_server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    """mcp 1.x POSTs an SSE session's messages from a task of its own: the caller's suppression rides
    with its message there too (the plugin once repeated this 429 on 1.x)."""
    instrument(
        servers={sse_server.url: {"policy": "app-authorized", "tools": {"search": {"on": ["throttle"]}}}}
    )
    sse_server.faults.add("search", Throttle("0"))
    async with sse_session(sse_server) as session:
        with suppress_instrumentation(), anyio.move_on_after(1.0):
            await session.call_tool("search", {"query": "q"})  # the SDK alone never answers it
        await anyio.sleep(0.3)  # a repeat would have been sent by now
    assert records(telemetry) == []
    assert sse_server.counters.tool_posts("search") == 1


async def test_metrics_count_attempts_waits_and_calls(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    instrument(servers=declared(server, {"search": {"on": ["throttle"]}}))
    server.faults.add("search", Throttle("0"))
    async with Client(server.url) as client:
        await client.call_tool("search", {"query": "q"})
    metrics = telemetry.metrics()
    attempts = metrics[t.METRIC_ATTEMPTS]
    assert sum(v for _, v in attempts) == 2
    assert any(a.get(t.FAILURE) == "throttle" for a, _ in attempts)
    assert any(a.get(t.PERMISSION_BY) == "app" for a, _ in attempts)
    calls = metrics[t.METRIC_CALLS]
    assert calls == [
        (
            {
                t.VERDICT: "completed",
                t.EFFECT: "unknown",
                t.POLICY: "app-authorized",
                t.GEN_AI_TOOL_NAME: "search",
            },
            1.0,
        )
    ]
    assert t.METRIC_WAIT in metrics


def test_uninstrument_restores_every_patched_function(instrument: Any) -> None:
    originals = [seam(*where) for where in SEAMS]
    instrumentor = instrument()
    assert sorted(instrumentor._wrapped) == sorted(SEAMS)  # a new seam is named here too
    assert http.AsyncClient.send is not ORIGINAL_SEND
    assert ClientSession.call_tool is not ORIGINAL_CALL_TOOL
    assert all(seam(*where) is not original for where, original in zip(SEAMS, originals, strict=True))
    assert mcp.client.sse.sse_client is ORIGINAL_SSE_CLIENT  # never wrapped: import order cannot matter
    instrumentor.uninstrument()
    assert http.AsyncClient.send is ORIGINAL_SEND
    assert ClientSession.call_tool is ORIGINAL_CALL_TOOL
    assert all(seam(*where) is original for where, original in zip(SEAMS, originals, strict=True))
    assert mcp.client.sse.sse_client is ORIGINAL_SSE_CLIENT


def test_the_private_mcp_names_this_plugin_relies_on_are_still_there() -> None:
    """Pins: if an mcp upgrade moves these, this fails loudly instead of the plugin going quiet."""
    import inspect

    from mcp.client.streamable_http import StreamableHTTPTransport
    from mcp.shared._httpx_utils import create_mcp_http_client

    # sse_client's default factory, the SDK's own: its client is an AsyncClient of the line's HTTP
    # library, whose `send` (a class attribute) the HTTP seam wraps, whenever the client was made.
    default = inspect.signature(mcp.client.sse.sse_client).parameters["httpx_client_factory"].default
    assert default is create_mcp_http_client
    # The HTTP client's one door to its transport, once per request that goes out (past its auth flow
    # and event hooks): an attempt's request never seen there was never sent (patches/http_send.py).
    assert list(inspect.signature(http.AsyncClient._send_single_request).parameters) == ["self", "request"]
    assert "_send_single_request" in inspect.getsource(http.AsyncClient._send_handling_redirects)
    # The streamable-HTTP transport's Accept header: how its POSTs are known outside a tool call.
    headers = StreamableHTTPTransport("http://127.0.0.1:1/mcp")._prepare_headers()
    assert "application/json" in headers["accept"] and "text/event-stream" in headers["accept"]
    if LINE == 1:
        # The carrier (patches/carrier.py) replaces arguments by position or keyword: the write stream
        # a session is given, and post_writer's stream reader and task group.
        session_params = list(inspect.signature(ClientSession.__init__).parameters)
        assert session_params[1:3] == ["read_stream", "write_stream"]
        writer_params = list(inspect.signature(StreamableHTTPTransport.post_writer).parameters)
        assert writer_params[1:] == [
            "client",
            "write_stream_reader",
            "read_stream_writer",
            "write_stream",
            "start_get_stream",
            "tg",
        ]
        # A session (or transport) made before instrument(): given a carrier where it keeps its write
        # stream; its message's call made current where the message is POSTed.
        assert list(inspect.signature(StreamableHTTPTransport._handle_post_request).parameters) == [
            "self",
            "ctx",
        ]
        from mcp.client.streamable_http import RequestContext

        assert "session_message" in RequestContext.__dataclass_fields__
        send, receive = anyio.create_memory_object_stream[Any](1)
        with send, receive:
            assert ClientSession(receive, send)._write_stream is send
        # What the carrier reads of a message: `.message.root`, the JSON-RPC request.
        from mcp.shared.message import SessionMessage

        request = types.JSONRPCRequest(jsonrpc="2.0", id=1, method="tools/call", params={"name": "search"})
        assert SessionMessage(types.JSONRPCMessage(request)).message.root is request
    else:
        # A caller's cancel is known where the call's own session's dispatcher sends it (session.notify).
        from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher

        send, receive = anyio.create_memory_object_stream[Any](1)
        with send, receive:
            assert isinstance(ClientSession(receive, send)._dispatcher, JSONRPCDispatcher)


async def test_a_record_the_allow_list_refuses_is_refused_whole_and_counted(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    """A tool name with a control character cannot be a record's word: the record is refused whole."""
    instrument(servers=declared(server, {}))
    async with Client(server.url) as client:
        with contextlib.suppress(McpError):
            await client.call_tool("no\x07such", {})
    assert records(telemetry) == []
    ours = [s for s in telemetry.spans() if s.name.startswith(t.CALL_SPAN_PREFIX) and s.events]
    events = [e for s in ours for e in s.events if e.name == t.RECORD_REFUSED_EVENT]
    assert len(events) == 1 and not events[0].attributes
    refused = telemetry.metrics()[t.METRIC_RECORDS_REFUSED]
    assert sum(v for _, v in refused) == 1


@pytest.mark.parametrize("ran", [False, True])
async def test_a_tcp_cut_before_or_after_the_tool_ran(
    telemetry: Telemetry, instrument: Any, ran: bool
) -> None:
    """Through a real proxy: the plugin cannot tell the two apart, so both are `unknown`; only the
    server's counter knows. Under app-authorized, not named: may have run, only that call fails."""
    with running_server("streamable") as server, TcpProxy(server.port) as proxy:
        url = proxy.url_for(server.url)
        instrument(servers={url: {"policy": "app-authorized", "tools": {}}})
        # The newest era the line speaks: a cut lands on the tools/call POST whatever was sent
        # before it (1.x speaks only the legacy era, whose session is opened first).
        async with Client(url, mode=ERAS[-1]) as client:
            proxy.cut_next(None, forward_request=ran, match=b'"tools/call"')
            with anyio.fail_after(10), pytest.raises(UnknownEffectError):
                await client.call_tool("search", {"query": "q"})
            assert is_error(await client.call_tool("search", {"query": "next"})) is False
        assert server.counters.executions("search") == (2 if ran else 1)
        failed = records(telemetry)[0]
        assert failed[t.ATTEMPTS_EFFECT] == ("unknown",)
        assert failed[t.MAY_HAVE_RUN] is True
        assert proxy.cuts == 1


async def test_a_call_given_up_before_its_post_left_files_nothing_sent(
    server: ServerHandle, telemetry: Telemetry, instrument: Any, mode: str
) -> None:
    instrument(servers=declared(server, {}, label="billing"))
    async with Client(server.url, mode=mode) as client:
        await client.call_tool("search", {"query": "first"})  # the session's endpoint is now known
        with anyio.move_on_after(0):
            await client.call_tool("send_email", {"to": "a@example.test", "body": "hi"})
        await anyio.sleep(0.3)
    assert server.counters.tool_posts("send_email") == 0
    record = records(telemetry)[1]
    assert (record[t.POLICY], record[t.ENDPOINT]) == ("app-authorized", "billing")
    assert record[t.SENT] == 0
    assert record[t.EFFECT] == "none"
    assert record[t.ATTEMPTS_STATUS] == ()
    assert record[t.VERDICT] == "failed" and record[t.MAY_HAVE_RUN] is False


@pytest.mark.parametrize("policy", ["compatibility", "app-authorized"])
async def test_a_call_given_up_while_the_server_holds_its_post_files_the_attempt_it_sent(
    server: ServerHandle, telemetry: Telemetry, instrument: Any, mode: str, policy: str
) -> None:
    instrument(servers=declared(server, {}, policy))
    server.faults.add("send_email", StallThenPass(0.6))
    async with Client(server.url, mode=mode) as client:
        with anyio.move_on_after(0.2):
            await client.call_tool("send_email", {"to": "a@example.test", "body": "hi"})
        # The server runs it once its stall is over (the bound guards a hang only).
        assert server.counters.wait_until(lambda c: c.executions("send_email") == 1, 10)
    record = the_record(telemetry)
    assert server.counters.posts(record[t.JSONRPC_REQUEST_ID]) == 1
    assert server.counters.executions("send_email") == 1
    assert record[t.SENT] == 1
    assert record[t.EFFECT] == "unknown"  # sent without an answer: `none` is only never-sent
    assert record[t.ATTEMPTS_EFFECT] == ("unknown",)
    assert record[t.MAY_HAVE_RUN] is False  # the caller saw its own cancel, not UnknownEffectError
    assert len(attempt_spans(telemetry, record[t.JSONRPC_REQUEST_ID])) == 1  # its span ended


async def test_a_tools_call_sent_outside_call_tool_keeps_the_side_effect_guard(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    instrument(servers=declared(server, {"send_email": {"changes": True, "on": ["throttle"]}}))
    server.faults.add("send_email", Throttle("0"))
    request: Any = types.CallToolRequest(
        params=types.CallToolRequestParams(name="send_email", arguments={"to": "a", "body": "b"})
    )
    if LINE == 1:  # 1.x's send_request takes the ClientRequest union, not one of its members
        request = types.ClientRequest(request)

    async def send(client: Any) -> None:
        await client.session.send_request(request, types.CallToolResult)

    await refused(server.url, 429, send, mode="legacy")
    assert server.counters.tool_posts("send_email") == 1  # never repeated as if it were `initialize`
    record = the_record(telemetry)  # a call as call_tool's are (tests/test_known_faults.py)
    assert (record[t.SENT], record[t.ATTEMPTS_STATUS], record[t.VERDICT]) == (1, (429,), "failed")


async def test_a_repeat_after_a_429_whose_stream_then_ends_without_the_answer_may_have_run(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    """The delivered attempt decides "accepted without an answer", not an earlier refused one."""
    instrument(servers=declared(server, {"search": {"on": ["throttle"]}}))
    server.faults.add("search", Throttle("0"), SseWithoutAnswer(run_tool=True))
    async with Client(server.url, mode="legacy") as client:
        with anyio.fail_after(10), pytest.raises(UnknownEffectError):
            await client.call_tool("search", {"query": "q"})
    record = the_record(telemetry)
    assert record[t.ATTEMPTS_STATUS] == (429, 200)
    assert record[t.ATTEMPTS_FAILURE] == ("throttle", "error")  # a response came: never `network`
    assert record[t.MAY_HAVE_RUN] is True


# -- redirects --


async def test_a_followed_redirect_is_one_attempt_and_the_answer_after_it_is_known(
    server: ServerHandle, telemetry: Telemetry, instrument: Any, mode: str
) -> None:
    """The SDK follows a 307 within the endpoint's origin with the same request: the hop and the
    request it leads to are one attempt, whose answer says what it did (not `unknown`)."""
    instrument(servers=declared(server, {}))
    server.faults.add("search", HttpStatus(307, headers={"location": server.url}))
    async with Client(server.url, mode=mode) as client:
        with anyio.fail_after(10):
            result = await client.call_tool("search", {"query": "q"})
    assert not is_error(result)
    record = the_record(telemetry)
    assert (record[t.EFFECT], record[t.VERDICT], record[t.SENT]) == ("applied", "completed", 1), str(record)
    assert record[t.ATTEMPTS_STATUS] == (200,) and record[t.ATTEMPTS_EFFECT] == ("applied",)
    assert len(attempt_spans(telemetry)) == 1
    assert server.counters.executions("search") == 1


async def test_a_redirect_the_sdk_does_not_follow_is_recorded_as_what_came(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    instrument(servers=declared(server, {}))
    elsewhere = "http://127.0.0.2:9/mcp"  # another origin: the SDK does not follow it (never connected)
    server.faults.add("search", HttpStatus(307, headers={"location": elsewhere}))
    with anyio.fail_after(10):
        await refused_call(server.url, "search", {"query": "q"}, 307)
    record = the_record(telemetry)
    assert record[t.ATTEMPTS_STATUS] == (307,) and record[t.ATTEMPTS_EFFECT] == ("unknown",)
    assert record[t.VERDICT] == "failed"


# -- the legacy SSE transport: an answer seen is the answer --


async def test_an_sse_answer_that_follows_a_cut_post_is_the_answer(
    sse_server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    """The server took the POST, ran the tool, and its connection was cut before the 202: the answer
    still comes on the stream, and the call completes on it, whichever the client was told first."""
    instrument(
        servers={sse_server.url: {"policy": "app-authorized", "tools": {"send_email": {"changes": True}}}}
    )
    for _ in range(3):  # the order of the cut and the answer varies: the outcome must not
        sse_server.faults.add("send_email", DropAfterExecution())
    async with sse_session(sse_server) as session:
        for n in range(3):
            with anyio.fail_after(10):
                result = await session.call_tool("send_email", {"to": "a", "body": f"b{n}"})
            assert not is_error(result)
    assert sse_server.counters.executions("send_email") == 3
    assert records(telemetry), "no record was filed"
    for record in records(telemetry):
        assert (record[t.VERDICT], record[t.EFFECT], record[t.MAY_HAVE_RUN]) == (
            "completed",
            "applied",
            False,
        )


async def test_an_sse_answer_that_never_comes_after_a_cut_post_may_have_run(
    sse_server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    instrument(
        servers={sse_server.url: {"policy": "app-authorized", "tools": {"send_email": {"changes": True}}}}
    )
    sse_server.faults.add("send_email", DropAfterExecution(answer_lost=True))
    async with sse_session(sse_server) as session:
        with anyio.fail_after(10), pytest.raises(UnknownEffectError):
            await session.call_tool("send_email", {"to": "a", "body": "b"})
        assert is_error(await session.call_tool("search", {"query": "next"})) is False  # the session lives
    assert sse_server.counters.executions("send_email") == 1
    assert records(telemetry)[0][t.MAY_HAVE_RUN] is True


# -- a status the HTTP client hands over as an IntEnum --


async def test_a_status_given_as_httpstatus_is_recorded_as_the_int_it_is(
    telemetry: Telemetry, instrument: Any
) -> None:
    """An in-process ASGI transport hands the app's `HTTPStatus.OK` over as the response's status;
    the record's status column holds exact ints, so the plugin once filed a record its own
    allow-list refused (found by the mcp SDK's own suite, tests/interaction/transports)."""
    from mcp.client.streamable_http import streamable_http_client

    from harness.server import build_app, build_server

    server = build_server()
    app, path = build_app(server, "streamable-json")
    instrument()
    async with (
        server.session_manager.run(),
        http.AsyncClient(transport=http.ASGITransport(app), base_url="http://127.0.0.1:8000") as http_client,
        streamable_http_client(f"http://127.0.0.1:8000{path}", http_client=http_client) as (read, write, *_),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        with anyio.fail_after(10):
            assert is_error(await session.call_tool("search", {"query": "q"})) is False
    events = [e.name for s in telemetry.spans() for e in s.events]
    assert t.RECORD_REFUSED_EVENT not in events
    record = the_record(telemetry)
    assert record[t.ATTEMPTS_STATUS] == (200,) and type(record[t.ATTEMPTS_STATUS][0]) is int
