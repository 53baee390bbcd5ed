"""The real parts (demo server, faults, proxy, OTLP receiver) behave as the other tests assume.

Everything runs for real on 127.0.0.1 with the PLAIN mcp client (no plugin): these tests also pin
what the SDK alone does under each fault, which is what the plugin's compatibility policy must
reproduce. Async scenarios run through `run()`: `asyncio.run` with a hard deadline.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import anyio
import httpx2
import pytest
from mcp import Client, ClientSession
from mcp.client.sse import sse_client
from mcp.shared.exceptions import MCPError
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.trace import SpanKind, Status, StatusCode

from harness.faults import (
    DropAfterExecution,
    DropBeforeExecution,
    DropMidBody,
    FaultContext,
    FaultPlan,
    HeldUntilPost,
    JsonRpcError,
    RandomFaults,
    SseWithoutAnswer,
    StallThenDrop,
    StallThenPass,
    Throttle,
    http_date,
    retryable_conflict,
)
from harness.faults import Status as HttpStatus
from harness.proxy import TcpProxy
from harness.receiver import OtlpReceiver, SpanDict, format_trace_tree
from harness.server import Counters, ServerHandle, running_server
from otel_mcp_replay import telemetry as t

if sys.version_info < (3, 11):  # pragma: no cover - anyio brings the backport there
    from exceptiongroup import BaseExceptionGroup

pytestmark = pytest.mark.timeout(60)

MODES = ("legacy", "2026-07-28")
STREAMABLE = ("streamable", "streamable-json")
T = TypeVar("T")


def run(scenario: Callable[[], Awaitable[T]], timeout: float = 10.0) -> T:
    """Run an async scenario on a fresh event loop, failing it after `timeout` seconds."""

    async def bounded() -> T:
        with anyio.fail_after(timeout):
            return await scenario()

    return asyncio.run(bounded())


def leaves(exc: BaseException) -> list[BaseException]:
    """The non-group exceptions inside (possibly nested) exception groups."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in leaves(sub)]
    return [exc]


def tool_posts(handle: ServerHandle, tool: str) -> list[Any]:
    return [r for r in handle.counters.post_log() if r.tool == tool]


@pytest.fixture(scope="module")
def streamable() -> Iterator[ServerHandle]:
    with running_server("streamable") as handle:
        yield handle


@pytest.fixture(scope="module")
def streamable_json() -> Iterator[ServerHandle]:
    with running_server("streamable-json") as handle:
        yield handle


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[ServerHandle]:
    """The module's streamable server of the kind named by the test's `kind` parameter, reset."""
    callspec = getattr(request.node, "callspec", None)
    kind = callspec.params.get("kind", "streamable") if callspec is not None else "streamable"
    handle: ServerHandle = request.getfixturevalue(
        "streamable_json" if kind == "streamable-json" else "streamable"
    )
    handle.reset()
    yield handle
    handle.reset()


async def call_twice(url: str, mode: str, tool: str = "search") -> tuple[BaseException | Any, Any]:
    """First call (its result or the exception it raised), then a second call on the same Client."""
    async with Client(url, mode=mode) as client:
        try:
            first: BaseException | Any = await client.call_tool(tool, {"query": "first"})
        except MCPError as exc:
            first = exc
        second = await client.call_tool(tool, {"query": "second"})
        return first, second


async def call_expecting_teardown(url: str, mode: str) -> type[BaseException]:
    """Call search once; return what the call raised (it must raise), let the Client's exit raise."""
    async with Client(url, mode=mode) as client:
        try:
            await client.call_tool("search", {"query": "q"})
        except BaseException as exc:  # the SDK cancels the caller: CancelledError
            raised = type(exc)
            raise
        pytest.fail("the call returned")
    return raised  # pragma: no cover - the block above always raises


# ----------------------------------------------------------------------------------------------
# The server and its counters, without faults.


@pytest.mark.parametrize("kind", STREAMABLE)
@pytest.mark.parametrize("mode", MODES)
def test_a_call_executes_once_and_counts_one_post(server: ServerHandle, mode: str, kind: str) -> None:
    async def scenario() -> Any:
        async with Client(server.url, mode=mode) as client:
            return await client.call_tool("search", {"query": "cats"})

    result = run(scenario)
    assert not result.is_error
    assert result.content[0].text == "3 results for 'cats'"
    (post,) = tool_posts(server, "search")
    assert server.counters.executions("search") == 1
    assert server.counters.executions_for(post.request_id, "search") == 1
    assert server.counters.posts(post.request_id, post.session_id) == 1
    assert post.method == "tools/call" and post.fault is None
    params = json.loads(post.body)["params"]
    assert (params["name"], params["arguments"]) == ("search", {"query": "cats"})
    if mode == "legacy":
        assert post.session_id is not None and post.protocol_version != "2026-07-28"
    else:
        assert post.session_id is None and post.protocol_version == "2026-07-28"
    assert server.counters.total_posts == len(server.counters.post_log()) >= 1


def test_legacy_session_id_is_the_same_on_every_post(server: ServerHandle) -> None:
    async def scenario() -> None:
        async with Client(server.url, mode="legacy") as client:
            for q in "abc":
                await client.call_tool("search", {"query": q})

    run(scenario)
    posts = tool_posts(server, "search")
    assert len(posts) == 3 and len({p.session_id for p in posts}) == 1
    assert len({p.request_id for p in posts}) == 3


def test_charge_deduplicates_by_key_and_counts_only_real_runs(server: ServerHandle) -> None:
    async def scenario() -> list[str]:
        async with Client(server.url, mode="2026-07-28") as client:
            texts = []
            for args in (
                {"amount": 5, "idempotency_key": "k-1"},
                {"amount": 5, "idempotency_key": "k-1"},
                {"amount": 7},
                {"amount": 7, "idempotency_key": ""},
            ):
                result = await client.call_tool("charge", args)
                assert not result.is_error
                texts.append(result.content[0].text)
            return texts

    texts = run(scenario)
    assert texts[0] == texts[1] == "charged 5 (charge #1)"
    assert texts[2:] == ["charged 7 (charge #2)", "charged 7 (charge #3)"]
    assert server.counters.executions("charge") == 3
    assert server.counters.deduplicated("charge") == 1
    assert server.counters.tool_posts("charge") == 4


def test_the_other_tools(server: ServerHandle) -> None:
    async def scenario() -> dict[str, Any]:
        async with Client(server.url, mode="2026-07-28") as client:
            listed = await client.list_tools()
            slow = await client.call_tool("slow", {"seconds": 0.2})
            return {
                "tools": {tool.name: tool for tool in listed.tools},
                "email": await client.call_tool("send_email", {"to": "a@example.com", "body": "hi"}),
                "email2": await client.call_tool("send_email", {"to": "a@example.com", "body": "hi"}),
                "slow": slow,
                "fail": await client.call_tool("fail", {}),
            }

    out = run(scenario)
    assert set(out["tools"]) == {"search", "charge", "send_email", "slow", "fail", "bulk"}
    assert out["tools"]["search"].annotations.read_only_hint is True
    assert out["tools"]["charge"].annotations.read_only_hint is False
    assert set(out["tools"]["charge"].input_schema["properties"]) == {"amount", "idempotency_key"}
    assert out["email"].content[0].text == "sent 2 characters to a@example.com"
    assert server.counters.executions("send_email") == 2
    assert out["slow"].content[0].text == "slept 0.2s"  # the server's own word that it slept
    # A tool error is a result with isError, not a JSON-RPC error: the call returns.
    assert out["fail"].is_error and "failed on purpose" in out["fail"].content[0].text
    assert server.counters.executions("fail") == 1


def test_counters_wait_until_and_reset() -> None:
    counters = Counters()
    assert not counters.wait_until(lambda c: c.executions("search") >= 1, timeout=0.05)
    counters.record_execution("search", "1", None)
    assert counters.wait_until(lambda c: c.executions("search") >= 1, timeout=0.05)
    assert counters.executions() == 1 and counters.executions_for(1) == 1
    counters.reset()
    assert counters.executions() == 0 and counters.post_log() == []


def test_server_starts_on_loopback_and_stops() -> None:
    with running_server("streamable-json") as handle:
        assert handle.url == f"http://127.0.0.1:{handle.port}/mcp"
        socket.create_connection(("127.0.0.1", handle.port), timeout=1).close()
        thread = handle._thread
    assert not thread.is_alive()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", handle.port), timeout=1).close()


def test_stateless_server_serves_both_client_eras() -> None:
    async def scenario(url: str, mode: str) -> str:
        async with Client(url, mode=mode) as client:
            result = await client.call_tool("search", {"query": mode})
            return str(result.content[0].text)

    with running_server("streamable", stateless=True) as handle:
        for mode in MODES:
            assert run(lambda mode=mode: scenario(handle.url, mode)) == f"3 results for {mode!r}"
        assert {p.session_id for p in tool_posts(handle, "search")} == {None}


# ----------------------------------------------------------------------------------------------
# Faults as the plain SDK meets them.


@pytest.mark.parametrize("kind", STREAMABLE)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "fault",
    [Throttle(), Throttle("2"), HttpStatus(503), retryable_conflict(), retryable_conflict(in_body=True)],
    ids=["429", "429-retry-after", "503", "409-header", "409-body"],
)
def test_http_refusals_reach_the_plain_client_as_an_internal_error(
    server: ServerHandle, mode: str, kind: str, fault: Any
) -> None:
    server.faults.add("search", fault)
    first, second = run(lambda: call_twice(server.url, mode))
    # The SDK loses the status: 429, 503 and 409 all read the same, and the session survives.
    assert isinstance(first, MCPError)
    assert (first.code, str(first)) == (-32603, "Server returned an error response")
    assert not second.is_error
    assert server.counters.executions("search") == 1  # only the second call ran
    assert [p.fault for p in tool_posts(server, "search")] == [fault.name, None]


@pytest.mark.parametrize("mode", MODES)
def test_a_jsonrpc_error_body_reaches_the_plain_client_as_that_error(server: ServerHandle, mode: str) -> None:
    server.faults.add("search", JsonRpcError(-32050, "upstream said no"))
    first, second = run(lambda: call_twice(server.url, mode))
    assert isinstance(first, MCPError) and (first.code, str(first)) == (-32050, "upstream said no")
    assert not second.is_error
    assert server.counters.executions("search") == 1


@pytest.mark.parametrize("kind", STREAMABLE)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("run_tool", [True, False])
def test_an_sse_stream_without_the_answer(server: ServerHandle, mode: str, kind: str, run_tool: bool) -> None:
    server.faults.add("search", SseWithoutAnswer(run_tool=run_tool))
    first, second = run(lambda: call_twice(server.url, mode))
    # The SDK resolves the waiting call itself (CONNECTION_CLOSED); the session survives.
    assert isinstance(first, MCPError)
    assert (first.code, str(first)) == (-32000, "SSE stream ended without a response")
    assert not second.is_error
    assert server.counters.executions("search") == (2 if run_tool else 1)


@pytest.mark.parametrize("kind", STREAMABLE)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("fault", "executed", "error"),
    [
        (DropBeforeExecution(), 0, httpx2.RemoteProtocolError),
        (DropBeforeExecution(reset=True), 0, httpx2.ReadError),
        (DropAfterExecution(), 1, httpx2.RemoteProtocolError),
        (DropAfterExecution(reset=True), 1, httpx2.ReadError),
        (StallThenDrop(0.2), 0, httpx2.RemoteProtocolError),
    ],
    ids=["before", "before-rst", "after", "after-rst", "stall-then-drop"],
)
def test_a_dropped_connection_tears_the_plain_session_down(
    server: ServerHandle, mode: str, kind: str, fault: Any, executed: int, error: type[BaseException]
) -> None:
    server.faults.add("search", fault)
    with pytest.raises(BaseExceptionGroup) as info:
        run(lambda: call_expecting_teardown(server.url, mode))
    # The plain SDK: the transport task group dies; the caller gets CancelledError and the Client's
    # exit raises the group holding the network error.
    (leaf,) = leaves(info.value)
    assert type(leaf) is error
    if error is httpx2.RemoteProtocolError:
        assert str(leaf) == "Server disconnected without sending a response."
    assert server.counters.executions("search") == executed
    assert server.counters.tool_posts("search") == 1


def _until(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    # A hang guard only: the condition decides; the deadline is generous for a busy machine.
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def test_uvicorn_still_hands_each_connection_to_the_registry_that_cuts_it() -> None:
    # The harness's one uvicorn internal, pinned: uvicorn gives an ASGI app no way to drop its
    # connection (raising makes it answer 500), and no public API hands out a connection's transport,
    # so harness.faults.abortable_h11_protocol subclasses uvicorn.protocols.http.h11_impl.H11Protocol
    # (not a documented API) and overrides only asyncio.Protocol's connection_made/connection_lost.
    # If a uvicorn upgrade moves or reshapes that class, this test names it; the drop tests would
    # only fail with "cannot cut the connection".
    from uvicorn.protocols.http.h11_impl import H11Protocol

    assert issubclass(H11Protocol, asyncio.Protocol)
    with running_server("streamable-json") as server:
        # Looked up by this socket's own address, not by the registry's size: the start-up probe is a
        # bare connect the kernel accepts at once, and uvicorn may hand it to connection_made after
        # that probe has closed, so its entry can come and go at any moment of this test.
        with socket.create_connection(("127.0.0.1", server.port), timeout=1) as sock:
            client = sock.getsockname()
            registered = _until(lambda: server.connections.get(client) is not None)
            assert registered, "uvicorn no longer calls connection_made"
            transport = server.connections.get(client)
            assert isinstance(transport, asyncio.Transport), "the registry holds no transport for it"
        released = _until(lambda: server.connections.get(client) is None)
        assert released, "uvicorn no longer calls connection_lost"


@pytest.mark.parametrize("mode", MODES)
def test_a_drop_mid_json_body_tears_the_plain_session_down(streamable_json: ServerHandle, mode: str) -> None:
    streamable_json.reset()
    streamable_json.faults.add("search", DropMidBody())
    with pytest.raises(BaseExceptionGroup) as info:
        run(lambda: call_expecting_teardown(streamable_json.url, mode))
    (leaf,) = leaves(info.value)
    assert isinstance(leaf, httpx2.RemoteProtocolError)
    assert str(leaf).startswith("peer closed connection without sending complete message body")
    assert streamable_json.counters.executions("search") == 1


def test_a_drop_mid_sse_body_is_a_stream_without_answer_to_the_plain_client(streamable: ServerHandle) -> None:
    # Only the legacy era frames a quick answer as SSE (2026-07-28 answers JSON unless it takes long).
    streamable.reset()
    streamable.faults.add("search", DropMidBody())
    first, second = run(lambda: call_twice(streamable.url, "legacy"))
    assert isinstance(first, MCPError)
    assert (first.code, str(first)) == (-32000, "SSE stream ended without a response")
    assert not second.is_error
    assert streamable.counters.executions("search") == 2


def test_a_stall_then_pass_delays_but_answers(server: ServerHandle) -> None:
    server.faults.add("search", StallThenPass(0.3))
    first, second = run(lambda: call_twice(server.url, "2026-07-28"))
    assert not first.is_error and not second.is_error
    # The stall held the first call's one POST, then handed it to the tool: counted on the server,
    # not on a clock (the fault sleeps before it passes the request on, so a run is a stall waited).
    ((method, tool, stalled_id, fault),) = server.faults.applied()
    assert (method, tool, fault) == ("tools/call", "search", "StallThenPass")
    assert server.counters.posts(stalled_id) == 1
    assert server.counters.executions_for(stalled_id, "search") == 1
    assert server.counters.executions("search") == 2


HELD_S = 5.0  # a hang guard: held past it, `came` is not set, and the test fails


def test_a_post_held_until_another_goes_on_when_it_comes(server: ServerHandle) -> None:
    """HeldUntilPost tells two requests in flight at once from two sent one after the other: two
    calls sent at once, each held until the other's comes, meet whichever arrives first; a call
    sent after the held one ended cannot (its wait ends at its bound, which decides nothing: no
    call comes while it is held)."""
    search, email = HeldUntilPost("send_email", HELD_S), HeldUntilPost("search", HELD_S, JsonRpcError())
    apart = HeldUntilPost("send_email", 0.2)
    server.faults.add("search", search, apart)
    server.faults.add("send_email", email)

    async def refused_email(client: Client) -> None:
        with pytest.raises(MCPError):  # `then`: the server's JSON-RPC error, the tool not run
            await client.call_tool("send_email", {"to": "a@example.com", "body": "b"})

    async def both_at_once(client: Client) -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(client.call_tool, "search", {"query": "held"})
            group.start_soon(refused_email, client)

    async def scenario() -> None:
        async with Client(server.url, mode="2026-07-28") as client:
            await both_at_once(client)
            await client.call_tool("search", {"query": "held"})  # none comes while it is held
            await client.call_tool("send_email", {"to": "a@example.com", "body": "b"})

    run(scenario)
    assert search.came.is_set() and email.came.is_set()
    assert not apart.came.is_set()
    # Each held request went on once it was let go: to the tool, or to `then`.
    assert (server.counters.executions("search"), server.counters.executions("send_email")) == (2, 1)
    assert [fault for _, _, _, fault in server.faults.applied()] == ["HeldUntilPost"] * 3


def test_a_protocol_request_can_be_throttled_too(server: ServerHandle) -> None:
    server.faults.add_method("initialize", Throttle("1"))

    async def scenario() -> None:
        async with Client(server.url, mode="legacy"):
            pass

    # The handshake fails inside the transport's task group: MCPError arrives wrapped in groups.
    with pytest.raises(BaseExceptionGroup) as info:
        run(scenario)
    (leaf,) = leaves(info.value)
    assert isinstance(leaf, MCPError) and leaf.code == -32603
    assert [(m, name) for m, _, _, name in server.faults.applied()] == [("initialize", "Throttle")]


def test_faults_queue_per_tool_then_pass(server: ServerHandle) -> None:
    server.faults.add("search", Throttle(), HttpStatus(503)).add("charge", Throttle())
    assert server.faults.pending() == 3 and server.faults.pending("search") == 2

    async def scenario() -> list[str]:
        outcomes = []
        async with Client(server.url, mode="2026-07-28") as client:
            for tool, args in [("search", {"query": "q"})] * 3 + [("charge", {"amount": 1})] * 2:
                try:
                    await client.call_tool(tool, args)
                    outcomes.append("ok")
                except MCPError:
                    outcomes.append("error")
        return outcomes

    assert run(scenario) == ["error", "error", "ok", "error", "ok"]
    assert [p.fault for p in server.counters.post_log() if p.tool] == [
        "Throttle",
        "Status",
        None,
        "Throttle",
        None,
    ]
    assert server.faults.pending() == 0


async def raw_post(url: str, request_id: int) -> httpx2.Response:
    body = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {"name": "search"}}
    async with httpx2.AsyncClient() as http:
        return await http.post(url, json=body)


def test_fault_responses_on_the_wire(server: ServerHandle) -> None:
    date = http_date(3)
    server.faults.add(
        "search",
        Throttle(date),
        retryable_conflict(),
        retryable_conflict(in_body=True),
        JsonRpcError(-32001, "busy", status=500, data={"why": "test"}),
    )
    throttled, conflict, conflict_body, jsonrpc = (run(lambda i=i: raw_post(server.url, i)) for i in range(4))
    assert throttled.status_code == 429 and throttled.headers["retry-after"] == date
    assert date.endswith(" GMT")
    assert conflict.status_code == 409
    assert conflict.headers["x-amzn-errortype"] == "RetryableConflictException"
    assert conflict_body.status_code == 409
    assert conflict_body.headers["content-type"] == "application/json"
    assert conflict_body.json()["__type"] == "RetryableConflictException"
    assert jsonrpc.status_code == 500
    assert jsonrpc.json() == {
        "jsonrpc": "2.0",
        "id": 3,
        "error": {"code": -32001, "message": "busy", "data": {"why": "test"}},
    }
    assert server.counters.posts(3) == 1 and server.counters.executions() == 0


def test_random_faults_are_reproducible_by_seed() -> None:
    def draw(seed: int) -> list[str | None]:
        rule = RandomFaults(
            seed, [(None, 2), (Throttle("0"), 1), (DropAfterExecution(), 1)], tools=["charge"]
        )
        plan = FaultPlan(rule)
        out = []
        for i in range(50):
            ctx = FaultContext("tools/call", "charge", {}, str(i), None, 0)
            fault = plan.next_fault(ctx)
            out.append(None if fault is None else fault.name)
        assert plan.next_fault(FaultContext("tools/call", "search", {}, "x", None, 0)) is None
        return out

    assert draw(7) == draw(7)
    assert draw(7) != draw(8)
    assert {"Throttle", "DropAfterExecution", None} <= set(draw(7))


def test_a_fault_plan_from_json() -> None:
    plan = FaultPlan.from_json(
        '{"search": [{"fault": "throttle", "retry_after": "1"}, {"fault": "drop-after"}],'
        ' "method:tools/list": [{"fault": "status", "code": 503}]}'
    )
    assert plan.pending("search") == 2 and plan.pending() == 3
    with pytest.raises(ValueError, match="unknown fault kind"):
        FaultPlan.from_json('{"search": [{"fault": "explode"}]}')


# ----------------------------------------------------------------------------------------------
# The legacy SSE transport.


def test_the_sse_app_serves_sse_client_and_counts_its_posts() -> None:
    async def scenario(url: str) -> Any:
        async with (
            sse_client(url, timeout=5, sse_read_timeout=5) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            return await session.call_tool("search", {"query": "sse"})

    with running_server("sse") as handle:
        assert handle.url.endswith("/sse")
        result = run(lambda: scenario(handle.url))
        assert result.content[0].text == "3 results for 'sse'"
        (post,) = tool_posts(handle, "search")
        assert post.path == "/messages/" and post.session_id is not None
        assert handle.counters.executions_for(post.request_id, "search") == 1
        assert handle.counters.posts(post.request_id, post.session_id) == 1


def test_a_429_on_the_sse_transport_stops_the_plain_post_writer() -> None:
    async def scenario(url: str) -> list[MCPError]:
        errors: list[MCPError] = []
        async with (
            sse_client(url, timeout=2, sse_read_timeout=5) as (read, write),
            ClientSession(read, write, read_timeout_seconds=1.0) as session,
        ):
            await session.initialize()
            for query in ("first", "second"):
                try:
                    await session.call_tool("search", {"query": query})
                except MCPError as exc:
                    errors.append(exc)
            return errors

    with running_server("sse") as handle:
        handle.faults.add("search", Throttle("1"))
        first, second = run(lambda: scenario(handle.url))
        # The plain SDK: the call waits for its read timeout (the SDK's own error says it timed out);
        # the next one finds the connection closed.
        assert (first.code, str(first)) == (-32001, "Request 'tools/call' timed out")
        assert (second.code, str(second)) == (-32000, "Connection closed")
        assert handle.counters.executions("search") == 0 and handle.counters.tool_posts("search") == 1


# ----------------------------------------------------------------------------------------------
# The proxy.


@pytest.mark.parametrize("mode", MODES)
def test_the_proxy_forwards_and_cuts_after_the_tool_ran(streamable_json: ServerHandle, mode: str) -> None:
    handle = streamable_json
    handle.reset()
    with TcpProxy(handle.port) as proxy:
        url = proxy.url_for(handle.url)
        assert url == f"http://127.0.0.1:{proxy.port}/mcp"
        first, second = run(lambda: call_twice(url, mode))
        assert not first.is_error and not second.is_error and proxy.accepted >= 1

        proxy.cut_next(match=b'"tools/call"')
        with pytest.raises(BaseExceptionGroup) as info:
            run(lambda: call_expecting_teardown(url, mode))
        (leaf,) = leaves(info.value)
        assert isinstance(leaf, httpx2.RemoteProtocolError)
        assert handle.counters.executions("search") == 3  # the cut call ran
        assert proxy.cuts == 1 and proxy.armed == 0


@pytest.mark.parametrize("reset", [False, True])
def test_the_proxy_cuts_before_the_request_reaches_the_server(
    streamable_json: ServerHandle, reset: bool
) -> None:
    handle = streamable_json
    handle.reset()
    with TcpProxy(handle.port) as proxy:
        proxy.cut_next(forward_request=False, match=b'"tools/call"', reset=reset)
        with pytest.raises(BaseExceptionGroup) as info:
            run(lambda: call_expecting_teardown(proxy.url_for(handle.url), "2026-07-28"))
        (leaf,) = leaves(info.value)
        assert isinstance(leaf, httpx2.ReadError if reset else httpx2.RemoteProtocolError)
        assert handle.counters.executions("search") == 0
        assert handle.counters.tool_posts("search") == 0


@pytest.mark.parametrize("mode", MODES)
def test_the_proxy_answers_in_the_servers_place(streamable_json: ServerHandle, mode: str) -> None:
    """A 429 the proxy answers before the request reaches the server (how the conformance matrix
    throttles a server this project did not write): the plain client reads the server's refusal."""
    handle = streamable_json
    handle.reset()
    throttled = b"HTTP/1.1 429 Too Many Requests\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    with TcpProxy(handle.port) as proxy:
        proxy.cut_next(forward_request=False, match=b'"tools/call"', answer=throttled)
        first, second = run(lambda: call_twice(proxy.url_for(handle.url), mode))
        assert proxy.armed == 0
    assert isinstance(first, MCPError) and (first.code, str(first)) == (
        -32603,
        "Server returned an error response",
    )
    assert not second.is_error
    assert handle.counters.executions("search") == 1  # only the second call ran
    assert handle.counters.tool_posts("search") == 1  # the first never reached the server


def test_the_proxy_cuts_after_some_answer_bytes_refuses_and_stops(streamable_json: ServerHandle) -> None:
    handle = streamable_json
    handle.reset()
    with TcpProxy(handle.port) as proxy:
        url = proxy.url_for(handle.url)
        # 200 bytes: past the headers, inside the JSON body.
        proxy.cut_next(200, match=b'"tools/call"')
        with pytest.raises(BaseExceptionGroup) as info:
            run(lambda: call_expecting_teardown(url, "2026-07-28"))
        (leaf,) = leaves(info.value)
        assert isinstance(leaf, httpx2.RemoteProtocolError)
        assert str(leaf).startswith("peer closed connection without sending complete message body")
        assert handle.counters.executions("search") == 1

        proxy.refuse(True)
        with pytest.raises(BaseExceptionGroup) as refused:
            run(lambda: call_expecting_teardown(url, "2026-07-28"))
        assert isinstance(leaves(refused.value)[0], httpx2.NetworkError | httpx2.RemoteProtocolError)
        assert proxy.refused >= 1 and handle.counters.executions("search") == 1
        proxy.refuse(False)
        port = proxy.port
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def test_the_proxy_can_cut_a_call_in_flight(streamable_json: ServerHandle) -> None:
    handle = streamable_json
    handle.reset()

    async def scenario(url: str, proxy: TcpProxy) -> None:
        async with Client(url, mode="2026-07-28") as client, anyio.create_task_group() as tg:
            tg.start_soon(client.call_tool, "slow", {"seconds": 0.5})
            assert await anyio.to_thread.run_sync(
                lambda: handle.counters.wait_until(lambda c: c.executions("slow") == 1, 5.0)
            )
            assert await anyio.to_thread.run_sync(lambda: proxy.cut_active()) >= 1

    with TcpProxy(handle.port) as proxy, pytest.raises(BaseExceptionGroup) as info:
        run(lambda: scenario(proxy.url_for(handle.url), proxy))
    assert any(isinstance(leaf, httpx2.RemoteProtocolError | httpx2.ReadError) for leaf in leaves(info.value))


# ----------------------------------------------------------------------------------------------
# The OTLP receiver.


CANARY = "canary-7f3a9c"


def export_spans(endpoint: str, compression: Compression, timeout: float = 5.0) -> tuple[TracerProvider, Any]:
    exporter = OTLPSpanExporter(endpoint=endpoint, compression=compression, timeout=timeout)
    provider = TracerProvider(
        resource=Resource.create({"service.name": "harness-test", "deployment": CANARY})
    )
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


@pytest.mark.parametrize("compression", [Compression.NoCompression, Compression.Gzip])
def test_the_receiver_decodes_spans_from_the_real_exporter(compression: Compression) -> None:
    with OtlpReceiver() as receiver:
        provider, _ = export_spans(receiver.traces_endpoint, compression)
        tracer = provider.get_tracer("harness.scope", "1.2.3")
        with tracer.start_as_current_span("parent", kind=SpanKind.CLIENT) as parent:
            parent.set_attribute("s", "text")
            parent.set_attribute("i", 42)
            parent.set_attribute("f", 1.5)
            parent.set_attribute("b", True)
            parent.set_attribute("ss", ["a", "b"])
            parent.set_attribute("ii", [1, 2, 3])
            parent.set_attribute("secret", CANARY)
            parent.add_event("happened", {"n": 1, "flags": [True, False]})
            with tracer.start_as_current_span("child") as child:
                child.set_status(Status(StatusCode.ERROR, "bad"))
        provider.shutdown()
        assert receiver.wait_for(lambda spans: len(spans) == 2, timeout=5)
        by_name = {s["name"]: s for s in receiver.spans()}
        p, c = by_name["parent"], by_name["child"]
        assert p["attributes"] == {
            "s": "text",
            "i": 42,
            "f": 1.5,
            "b": True,
            "ss": ["a", "b"],
            "ii": [1, 2, 3],
            "secret": CANARY,
        }
        assert p["events"][0]["name"] == "happened"
        assert p["events"][0]["attributes"] == {"n": 1, "flags": [True, False]}
        assert p["kind"] == "CLIENT" and c["kind"] == "INTERNAL"
        assert c["parent_span_id"] == p["span_id"] and p["parent_span_id"] == ""
        assert c["trace_id"] == p["trace_id"] == format(parent.get_span_context().trace_id, "032x")
        assert c["status"] == {"code": "ERROR", "message": "bad"}
        assert p["resource"]["service.name"] == "harness-test"
        assert (p["scope"], p["scope_version"]) == ("harness.scope", "1.2.3")
        raw = receiver.raw_requests()
        assert raw and all(r.path == "/v1/traces" for r in raw)
        if compression is Compression.Gzip:
            assert all(dict(r.headers)["content-encoding"] == "gzip" for r in raw)
            assert all(gzip.decompress(r.wire) == r.body for r in raw)
        assert CANARY.encode() in receiver.raw_bytes()


def test_the_receiver_decodes_metrics() -> None:
    with OtlpReceiver() as receiver:
        reader = PeriodicExportingMetricReader(
            OTLPMetricExporter(endpoint=receiver.metrics_endpoint), export_interval_millis=60_000
        )
        provider = MeterProvider(metric_readers=[reader])
        meter = provider.get_meter("harness.metrics")
        meter.create_counter("calls", unit="{call}").add(3, {"tool": "search"})
        meter.create_histogram("wait", unit="ms").record(12.5)
        provider.shutdown()
        by_name = {m["name"]: m for m in receiver.metrics()}
        assert by_name["calls"]["type"] == "sum"
        assert by_name["calls"]["points"] == [{"attributes": {"tool": "search"}, "value": 3}]
        assert by_name["wait"]["type"] == "histogram" and by_name["wait"]["points"][0]["count"] == 1
        assert by_name["wait"]["points"][0]["sum"] == 12.5


def test_the_receiver_plays_a_dead_backend() -> None:
    with OtlpReceiver() as receiver:
        provider, exporter = export_spans(receiver.traces_endpoint, Compression.NoCompression, timeout=0.5)
        tracer = provider.get_tracer("t")
        receiver.set_mode("refuse")
        with tracer.start_as_current_span("refused"):
            pass
        assert receiver.rejected >= 1 and receiver.spans() == []

        receiver.set_mode("hang", hang_seconds=10)
        rejected = receiver.rejected
        result = exporter.export([_finished_span(tracer)])
        assert result is SpanExportResult.FAILURE
        # Bounded by the exporter's timeout, not the hang: the receiver still holds the request
        # (it counts a rejection only when its 10 s hang ends).
        assert receiver.rejected == rejected
        receiver.set_mode("ok")
        with tracer.start_as_current_span("accepted"):
            pass
        assert receiver.wait_for(lambda spans: [s["name"] for s in spans] == ["accepted"], timeout=5)
        provider.shutdown()
    # stop() returned although a handler was still hanging


def _finished_span(tracer: Any) -> Any:
    span = tracer.start_span("hung")
    span.end()
    return span


def test_the_trace_tree_reads_like_a_story() -> None:
    with OtlpReceiver() as receiver:
        provider, _ = export_spans(receiver.traces_endpoint, Compression.NoCompression)
        tracer = provider.get_tracer(t.INSTRUMENTATION_NAME)
        with tracer.start_as_current_span(f"{t.CALL_SPAN_PREFIX} search") as call:
            with tracer.start_as_current_span(t.ATTEMPT_SPAN_NAME) as a1:
                a1.set_attributes(
                    {
                        t.ATTEMPT: 1,
                        t.HTTP_STATUS_CODE: 429,
                        t.FAILURE: "throttle",
                        t.EFFECT: "none",
                        t.WAIT_MS: 1000,
                    }
                )
            with tracer.start_as_current_span(t.ATTEMPT_SPAN_NAME) as a2:
                a2.set_attributes(
                    {
                        t.ATTEMPT: 2,
                        t.HTTP_RESEND_COUNT: 1,
                        t.HTTP_STATUS_CODE: 200,
                        t.EFFECT: "applied",
                        t.PERMISSION_BY: "compatibility",
                        t.PERMISSION_ON: "throttle",
                        t.PERMISSION_ASSUMES: "refused-before-execution",
                    }
                )
            call.add_event(
                t.RECORD_EVENT,
                {
                    t.POLICY: "compatibility",
                    t.SENT: 2,
                    t.EFFECT: "applied",
                    t.VERDICT: "completed",
                    t.MAY_HAVE_RUN: False,
                    t.ENDPOINT: "http://127.0.0.1:1",
                    t.OMITTED: 0,
                    t.ATTEMPTS_STATUS: [429, 200],
                    t.ATTEMPTS_FAILURE: ["throttle", ""],
                    t.ATTEMPTS_EFFECT: ["none", "applied"],
                    t.ATTEMPTS_PERMISSION: ["first", "compatibility"],
                    t.ATTEMPTS_WAIT_MS: [1000, 0],
                },
            )
        provider.shutdown()
        assert receiver.wait_for(lambda spans: len(spans) == 3)
        tree = format_trace_tree(receiver.spans())
    lines = tree.splitlines()
    assert lines[0].startswith("trace ") and lines[1].startswith("└─ tools/call search")
    assert "call: verdict completed · effect applied · sent 2 · may have run: no" in tree
    assert "#1 first: HTTP 429, throttle, effect none, waited 1000 ms" in tree
    assert "#2 compatibility: HTTP 200, answered, effect applied" in tree
    assert "├─ POST" in tree and "└─ POST" in tree
    assert "attempt 1 · HTTP 429 · failed: throttle · effect none · then waited 1000 ms" in tree
    assert (
        "attempt 2 · HTTP 200 · repeat allowed by compatibility on throttle, "
        "assuming refused-before-execution · effect applied" in tree
    )
    assert "{" not in tree  # words, not JSON


def test_the_trace_tree_of_spans_whose_parent_never_arrived() -> None:
    def span(name: str, span_id: str, parent: str, start: int) -> SpanDict:
        return SpanDict(
            trace_id="ab" * 16,
            span_id=span_id,
            parent_span_id=parent,
            name=name,
            kind="INTERNAL",
            start_time_unix_nano=start,
            end_time_unix_nano=start + 1_000_000,
            attributes={t.ATTEMPT: 1},
            events=[],
            status={"code": "UNSET", "message": ""},
            resource={},
            scope="s",
            scope_version="",
        )

    tree = format_trace_tree([span("late", "02", "ff", 2), span("early", "01", "ee", 1)])
    assert tree.splitlines()[1:3] == ["├─ early  [internal, 1.0 ms]", "│       attempt 1 · no response"]
    assert tree.splitlines()[3].startswith("└─ late")


# ----------------------------------------------------------------------------------------------
# The demo server as a process.


def test_the_demo_server_runs_as_a_process() -> None:
    plan = json.dumps({"search": [{"fault": "throttle", "retry_after": "1"}]})
    command = [sys.executable, "-m", "harness.server", "--app", "streamable-json"]
    with subprocess.Popen(
        [*command, "--faults", plan],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            assert proc.stdout is not None and proc.stdin is not None and proc.stderr is not None
            line = proc.stdout.readline().strip()
            assert line.startswith("MCP_URL=http://127.0.0.1:")
            first, second = run(lambda: call_twice(line.removeprefix("MCP_URL="), "2026-07-28"))
            assert isinstance(first, MCPError) and not second.is_error
            proc.stdin.close()
            assert proc.wait(timeout=10) == 0
            assert "search=1" in proc.stderr.read()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(5)


def test_no_property_test_is_failed_by_a_clock() -> None:
    # tests/conftest.py's hypothesis profile: no example is failed for its time, nor a search for its
    # pace, whatever settings a test adds (they inherit the profile). Each property test of the suite,
    # as collected from its module, is checked.
    import importlib
    from pathlib import Path

    from hypothesis import HealthCheck

    root = Path(__file__).resolve().parents[1]
    checked = given = 0
    for path in sorted(root.rglob("test_*.py")):
        text = path.read_text(encoding="utf-8")
        if "from hypothesis import" not in text:
            continue
        given += text.count("\n@given(")
        module = importlib.import_module(".".join(path.relative_to(root.parent).with_suffix("").parts))
        for name, test in vars(module).items():
            chosen = getattr(test, "_hypothesis_internal_use_settings", None)
            if name.startswith("test_") and chosen is not None:
                assert chosen.deadline is None, f"{path.name}::{name}"
                assert HealthCheck.too_slow in chosen.suppress_health_check, f"{path.name}::{name}"
                checked += 1
    assert checked == given >= 20  # every property test of the suite was found


def test_a_port_named_before_its_server_binds_it_comes_from_below_the_ephemeral_range() -> None:
    # harness/ports.py: the servers bound to port 0 (most of a run's) draw from the ephemeral range,
    # so a port picked there could be taken before its process binds it; one picked below cannot.
    from harness import ports

    low = ports._ephemeral_low()
    assert low - 1 - ports.LOWEST >= 4096  # this machine has room below (Linux's default: 32768)
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        assert not ports._binds(held.getsockname()[1])  # a port a socket holds is not free
        picked = [ports.free_port() for _ in range(50)]
    assert all(ports.LOWEST <= port < low and ports._binds(port) for port in picked)
    assert len(set(picked)) > 1  # drawn, not one fixed port
