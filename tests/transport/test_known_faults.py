"""Ordinary faults, told as they happened: the record says only what is known (issue 21).

A caller's read timeout reaches it as the SDK alone raises it; a request never sent is filed `none`
and arms nothing; a 2xx without the answer is a response (`error`), delivered and never repeated;
`UnknownEffectError.__cause__` is the final error; the adapter's own refusal is repeated for the
protocol's requests too. Each against the SDK's own server on loopback, the fault injected at the
ASGI level or in the client's own HTTP auth flow; executions counted on the server. Both mcp lines
(scripts/test-lines runs this file on 1.30), both protocol eras where the line has them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Generator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from tests.support.calls import leaves
from tests.support.telemetry import Telemetry, attempt_spans, records, the_record

from harness.client import Client, McpError, http, is_error, types
from harness.faults import (
    ClaimedResult,
    DropAfterExecution,
    JsonRpcError,
    SseWithoutAnswer,
    StallThenPass,
    Status,
    Throttle,
    UnstructuredResult,
    retryable_conflict,
)
from harness.sdk import LINE
from harness.server import ServerHandle
from otel_mcp_replay import RepeatRefusedError, UnknownEffectError, repeat_confirmed
from otel_mcp_replay import telemetry as t

if sys.version_info < (3, 11):  # pragma: no cover - Python 3.10
    from exceptiongroup import BaseExceptionGroup

pytestmark = pytest.mark.anyio

STRICT = "app-authorized"
COMPAT = "compatibility"
EMAIL = {"to": "ada@example.com", "body": "hello"}
# The SDK's own code for a request its caller stopped waiting for: mcp_types.REQUEST_TIMEOUT on 2.x;
# 1.x raises httpx.codes.REQUEST_TIMEOUT.
REQUEST_TIMEOUT = -32001 if LINE == 2 else 408


def declare(server: ServerHandle, policy: str, tools: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {server.url: {"policy": policy, "tools": tools, **more}}


# -- 1. a caller's read timeout is the caller's --


async def _timed_out(url: str, mode: str, tool: str, arguments: dict[str, Any]) -> McpError:
    async with Client(url, mode=mode) as client:
        with anyio.fail_after(20), pytest.raises(McpError) as raised:
            await client.call_tool(tool, arguments, read_timeout_seconds=0.3)
    return raised.value


@pytest.mark.parametrize("policy", [STRICT, COMPAT])
async def test_a_callers_read_timeout_reaches_it_as_the_sdk_alone_raises_it(
    server: ServerHandle, telemetry: Telemetry, instrument: Any, mode: str, policy: str
) -> None:
    plain = await _timed_out(server.url, mode, "slow", {"seconds": 1.0})
    assert server.counters.wait_until(lambda c: c.executions("slow") == 1)
    instrument(servers=declare(server, policy, {"slow": {"on": ["network", "throttle"]}}))
    seen = await _timed_out(server.url, mode, "slow", {"seconds": 1.0})
    assert type(seen) is type(plain) is McpError  # never UnknownEffectError
    assert seen.error.code == plain.error.code == REQUEST_TIMEOUT
    assert server.counters.wait_until(lambda c: c.executions("slow") == 2)
    record = the_record(telemetry)
    assert (record[t.SENT], record[t.EFFECT], record[t.VERDICT]) == (1, "unknown", "failed")
    assert record[t.MAY_HAVE_RUN] is False  # what the caller was told: its own timeout
    assert record[t.ATTEMPTS_EFFECT] == ("unknown",)


async def test_a_changes_call_the_caller_timed_out_still_arms_the_repeat_guard(
    server: ServerHandle, telemetry: Telemetry, instrument: Any, mode: str
) -> None:
    """A framework's retry after a timeout is the commonest blind repeat."""
    instrument(servers=declare(server, STRICT, {"send_email": {"changes": True, "on": ["network"]}}))
    server.faults.add("send_email", StallThenPass(1.0))
    seen = await _timed_out(server.url, mode, "send_email", EMAIL)
    assert type(seen) is McpError and seen.error.code == REQUEST_TIMEOUT
    async with Client(server.url, mode=mode) as client:
        with anyio.fail_after(10), pytest.raises(RepeatRefusedError):
            await client.call_tool("send_email", dict(EMAIL))
    assert server.counters.tool_posts("send_email") == 1  # the repeat never left
    first, second = records(telemetry)
    assert (first[t.SENT], first[t.EFFECT]) == (1, "unknown")
    assert (second[t.SENT], second[t.EFFECT]) == (0, "none")


# -- 2. never sent is `none` --


class RefreshFailsOnce(http.Auth):  # type: ignore[misc,name-defined]
    """A bearer token whose refresh fails once, for the first tools/call: the flow raises before the
    request leaves, as an OAuth client's does when its token endpoint is down."""

    def __init__(self, failing: bool = True) -> None:
        self.failing = failing

    def auth_flow(self, request: Any) -> Generator[Any, Any, None]:
        if b'"tools/call"' in request.content and self.failing:
            self.failing = False
            raise RuntimeError("token refresh failed")
        request.headers["Authorization"] = "Bearer t0ken"
        yield request


def _with_failing_auth() -> Any:
    return create_mcp_http_client(auth=RefreshFailsOnce())


def _with_failing_event_hook() -> Any:
    """A request event hook (a signer, a header check) that raises once, for the first tools/call:
    the client calls it before the request reaches its transport."""
    failing = [True]

    async def sign(request: Any) -> None:
        if b'"tools/call"' in request.content and failing[0]:
            failing[0] = False
            raise RuntimeError("request signing failed")

    client = create_mcp_http_client()
    client.event_hooks["request"].append(sign)
    return client


NEVER_SENT = [
    pytest.param(_with_failing_auth, "token refresh failed", id="auth-flow"),
    pytest.param(_with_failing_event_hook, "request signing failed", id="event-hook"),
]


@asynccontextmanager
async def session_with(url: str, client: Any) -> AsyncIterator[ClientSession]:
    async with (
        client,
        streamable_http_client(url, http_client=client) as streams,
        ClientSession(streams[0], streams[1]) as session,
    ):
        await session.initialize()
        yield session


async def _first_email_with(url: str, failing_client: Any) -> str:
    """What the caller sees when the client raises before the first tools/call leaves: `Type:
    message` of the error, whether the call raised it or its session's teardown did."""
    try:
        async with session_with(url, failing_client()) as session:
            with anyio.fail_after(10):
                await session.call_tool("send_email", EMAIL)
    except BaseExceptionGroup as group:
        found = leaves(group)
        assert len(found) == 1
        return f"{type(found[0]).__qualname__}: {found[0]}"
    except Exception as exc:
        return f"{type(exc).__qualname__}: {exc}"
    raise AssertionError("the call succeeded")


@pytest.mark.parametrize("policy", [STRICT, COMPAT])
@pytest.mark.parametrize(("failing_client", "why"), NEVER_SENT)
async def test_a_request_its_client_never_let_leave_is_filed_none_and_arms_nothing(
    server: ServerHandle, telemetry: Telemetry, instrument: Any, policy: str, failing_client: Any, why: str
) -> None:
    plain = await _first_email_with(server.url, failing_client)
    tools = {"send_email": {"changes": True, "on": ["network"]}}
    instrument(servers=declare(server, policy, tools))
    seen = await _first_email_with(server.url, failing_client)
    assert seen == plain  # what the SDK alone shows, never UnknownEffectError
    assert "UnknownEffectError" not in seen and why in seen
    assert server.counters.tool_posts("send_email") == 0
    never_sent = the_record(telemetry)
    assert (never_sent[t.SENT], never_sent[t.EFFECT], never_sent[t.MAY_HAVE_RUN]) == (0, "none", False)
    assert never_sent[t.ATTEMPTS_EFFECT] == ("none",)
    assert never_sent[t.ATTEMPTS_FAILURE] == ("",)  # never sent is no failure kind
    # The same call again, its auth working now: it goes (the guard was never armed).
    async with session_with(
        server.url, create_mcp_http_client(auth=RefreshFailsOnce(failing=False))
    ) as session:
        with anyio.fail_after(10):
            assert not is_error(await session.call_tool("send_email", dict(EMAIL)))
    assert server.counters.executions("send_email") == 1


# -- 3. a 2xx without the answer is a response --


@pytest.mark.parametrize(
    ("fault", "runs"),
    [(Status(202), 0), (SseWithoutAnswer(run_tool=True), 1)],
    ids=["202", "stream-ended"],
)
async def test_a_2xx_without_the_answer_is_an_error_delivered_never_repeated(
    server: ServerHandle, telemetry: Telemetry, instrument: Any, mode: str, fault: Any, runs: int
) -> None:
    instrument(servers=declare(server, STRICT, {"search": {"on": ["network", "throttle"]}}))
    server.faults.add("search", fault)
    async with Client(server.url, mode=mode) as client:
        with anyio.fail_after(10), pytest.raises(UnknownEffectError):
            await client.call_tool("search", {"query": "q"})
        with anyio.fail_after(10):
            assert not is_error(await client.call_tool("search", {"query": "next"}))
    assert server.counters.executions("search") == runs + 1  # never sent again
    lost = records(telemetry)[0]
    assert lost[t.SENT] == 1 == server.counters.posts(lost[t.JSONRPC_REQUEST_ID])
    assert lost[t.ATTEMPTS_FAILURE] == ("error",)  # a response came: never `network`
    assert lost[t.ATTEMPTS_STATUS] == ((202,) if isinstance(fault, Status) else (200,))
    assert (lost[t.EFFECT], lost[t.MAY_HAVE_RUN]) == ("unknown", True)
    first = attempt_spans(telemetry, lost[t.JSONRPC_REQUEST_ID])[0].attributes or {}
    assert first[t.FAILURE] == "error" and first[t.DECLINED] == "not-retryable"


# -- 4. the cause is the final error --


FINAL_ERRORS = [pytest.param(JsonRpcError(-32050, "refused"), -32050, id="json-rpc-error")]
if LINE == 2:  # mcp 1.x ends the whole session on a received 503 (docs/mcp-lines.md): no call error
    FINAL_ERRORS.append(pytest.param(Status(503), -32603, id="503"))


@pytest.mark.parametrize(("final", "code"), FINAL_ERRORS)
async def test_unknown_effect_errors_cause_is_the_final_error(
    server: ServerHandle, telemetry: Telemetry, instrument: Any, mode: str, final: Any, code: int
) -> None:
    """A cut repeated on `network`, then a received error: the cause is that error, as the SDK alone
    raises it for it (a 503: INTERNAL_ERROR), not the first attempt's cut."""
    instrument(servers=declare(server, STRICT, {"search": {"on": ["network"]}}))
    server.faults.add("search", DropAfterExecution(), final)
    async with Client(server.url, mode=mode) as client:
        with anyio.fail_after(10), pytest.raises(UnknownEffectError) as raised:
            await client.call_tool("search", {"query": "q"})
    cause = raised.value.__cause__
    assert not isinstance(cause, http.TransportError)
    assert type(cause) is McpError and cause.error.code == code
    record = the_record(telemetry)
    assert record[t.ATTEMPTS_STATUS] == ((0, 503) if isinstance(final, Status) else (0, 200))
    assert server.counters.executions("search") == 1


# -- 5. the adapter's own refusal, on the protocol's requests --


@pytest.mark.parametrize("policy", [STRICT, COMPAT])
@pytest.mark.parametrize("in_body", [False, True], ids=["header", "body"])
async def test_the_adapters_refusal_of_a_protocol_request_is_repeated_by_the_adapter(
    server: ServerHandle, telemetry: Telemetry, instrument: Any, policy: str, in_body: bool
) -> None:
    """AgentCore answers its retryable conflict while a session starts: on `initialize`."""
    instrument(servers=declare(server, policy, {}, adapter="agentcore-runtime"))
    server.faults.add_method("initialize", retryable_conflict(in_body=in_body))
    server.faults.add_method("tools/list", retryable_conflict(in_body=in_body))
    async with Client(server.url, mode="legacy") as client:
        with anyio.fail_after(10):
            tools = await client.list_tools()
    assert {tool.name for tool in tools.tools} >= {"search"}
    assert server.faults.pending() == 0
    assert [p.method for p in server.counters.post_log()].count("initialize") == 2
    assert [p.method for p in server.counters.post_log()].count("tools/list") == 2
    assert records(telemetry) == [] and attempt_spans(telemetry) == []


async def test_the_adapters_refusal_of_a_protocol_request_is_repeated_within_the_budget(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    instrument(servers=declare(server, STRICT, {}, adapter="agentcore-runtime"), max_attempts=2)
    server.faults.add_method("initialize", retryable_conflict(), retryable_conflict())
    # The SDK's own failure to open, from its session's task group: on 2.x its error for a refused
    # initialize, on 1.x the HTTP client's status error (its transport's task raises for any non-2xx).
    with pytest.raises(BaseExceptionGroup) as raised:
        async with Client(server.url, mode="legacy") as client:
            await client.list_tools()
    (error,) = leaves(raised.value)
    if LINE == 2:
        assert isinstance(error, McpError) and error.error.code == types.INTERNAL_ERROR
    else:
        assert isinstance(error, http.HTTPStatusError) and error.response.status_code == 409
    assert [p.method for p in server.counters.post_log()].count("initialize") == 2


# -- 6. every client path that sends a tools/call gets the whole law --


def _call_tool_request(tool: str, arguments: dict[str, Any]) -> Any:
    request: Any = types.CallToolRequest(params=types.CallToolRequestParams(name=tool, arguments=arguments))
    return types.ClientRequest(request) if LINE == 1 else request  # 1.x takes the ClientRequest union


async def test_a_tools_call_sent_by_send_request_gets_the_span_the_record_and_the_guard(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    """`session.send_request(CallToolRequest(...))`, past call_tool: the same call, the same law."""
    instrument(servers=declare(server, STRICT, {"send_email": {"changes": True, "on": ["network"]}}))
    server.faults.add("send_email", DropAfterExecution())
    async with Client(server.url, mode="legacy") as client:
        with anyio.fail_after(10), pytest.raises(UnknownEffectError):
            await client.session.send_request(_call_tool_request("send_email", EMAIL), types.CallToolResult)
        with anyio.fail_after(10), pytest.raises(RepeatRefusedError):
            await client.session.send_request(
                _call_tool_request("send_email", dict(EMAIL)), types.CallToolResult
            )
        result = await client.session.send_request(
            _call_tool_request("send_email", {**EMAIL, "body": "other"}), types.CallToolResult
        )
        assert not is_error(result)
    assert server.counters.executions("send_email") == 2  # the cut one (never repeated) and the other
    assert server.counters.tool_posts("send_email") == 2
    cut, refused, other = records(telemetry)
    assert (cut[t.SENT], cut[t.EFFECT], cut[t.MAY_HAVE_RUN]) == (1, "unknown", True)
    assert (refused[t.SENT], refused[t.EFFECT], refused[t.VERDICT]) == (0, "none", "failed")
    assert (other[t.SENT], other[t.VERDICT]) == (1, "completed")
    assert len(attempt_spans(telemetry, cut[t.JSONRPC_REQUEST_ID])) == 1


async def test_a_tools_call_of_a_client_session_group_gets_the_whole_law(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    from mcp.client.session_group import ClientSessionGroup, StreamableHttpParameters

    instrument(servers=declare(server, STRICT, {"search": {"on": ["throttle"]}}))
    server.faults.add("search", Throttle("0"), DropAfterExecution())
    async with ClientSessionGroup() as group:
        await group.connect_to_server(StreamableHttpParameters(url=server.url))
        with anyio.fail_after(10), pytest.raises(UnknownEffectError):
            await group.call_tool("search", {"query": "q"})
    record = the_record(telemetry)
    assert record[t.ATTEMPTS_STATUS] == (429, 0)
    assert record[t.ATTEMPTS_PERMISSION] == ("first", "app")
    assert record[t.SENT] == 2 == server.counters.posts(record[t.JSONRPC_REQUEST_ID])
    assert server.counters.executions("search") == 1


class ChallengedOnce(http.Auth):  # type: ignore[misc,name-defined]
    """A token the server refuses once (401): the flow refreshes it and sends the request again."""

    def auth_flow(self, request: Any) -> Generator[Any, Any, None]:
        request.headers["Authorization"] = "Bearer stale"
        response = yield request
        if response.status_code == 401:
            request.headers["Authorization"] = "Bearer fresh"
            yield request


async def test_an_auth_flows_own_resend_after_a_401_is_an_attempt_of_the_record(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    """What reached the wire is what the record counts."""
    instrument(servers=declare(server, STRICT, {"search": {"on": ["network"]}}))
    server.faults.add("search", Status(401, body=b"token expired"))
    async with session_with(server.url, create_mcp_http_client(auth=ChallengedOnce())) as session:
        with anyio.fail_after(10):
            assert not is_error(await session.call_tool("search", {"query": "q"}))
    record = the_record(telemetry)
    assert record[t.SENT] == 2 == server.counters.posts(record[t.JSONRPC_REQUEST_ID])
    assert record[t.ATTEMPTS_STATUS] == (401, 200)
    assert record[t.ATTEMPTS_FAILURE] == ("error", "")
    assert record[t.ATTEMPTS_EFFECT] == ("unknown", "applied")  # a 401 is not proof nothing ran
    assert record[t.ATTEMPTS_PERMISSION] == ("first", "app")  # the app's own HTTP client sent it again
    assert record[t.EFFECT] == "unknown"
    spans = attempt_spans(telemetry, record[t.JSONRPC_REQUEST_ID])
    assert [(s.attributes or {})[t.ATTEMPT] for s in spans] == [1, 2]
    assert server.counters.executions("search") == 1


async def test_an_auth_flows_resend_is_a_new_attempt_with_its_own_span_and_count(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    """The 401 and the client's own re-send are two attempts, each with its own span (its number,
    its resend count, its permission), its row and its count: the first ended as the re-send began."""
    instrument(servers=declare(server, STRICT, {"search": {"on": ["network"]}}))
    server.faults.add("search", Status(401, body=b"token expired"))
    async with session_with(server.url, create_mcp_http_client(auth=ChallengedOnce())) as session:
        with anyio.fail_after(10):
            assert not is_error(await session.call_tool("search", {"query": "q"}))
    assert server.counters.executions("search") == 1
    record = the_record(telemetry)
    first, second = attempt_spans(telemetry, record[t.JSONRPC_REQUEST_ID])
    assert first.context is not None and second.context is not None
    assert first.context.span_id != second.context.span_id
    assert first.end_time is not None and second.start_time is not None
    assert first.end_time <= second.start_time  # ended as the re-send began
    one, two = dict(first.attributes or {}), dict(second.attributes or {})
    assert (one[t.ATTEMPT], two[t.ATTEMPT]) == (1, 2)
    assert (one[t.FAILURE], one[t.EFFECT]) == ("error", "unknown")
    assert t.FAILURE not in two and two[t.EFFECT] == "applied"
    assert t.PERMISSION_BY not in one
    assert (two[t.PERMISSION_BY], two[t.PERMISSION_ON]) == ("app", "error")  # the client's own re-send
    assert t.HTTP_RESEND_COUNT not in one
    stable = bool(os.environ.get("OTEL_SEMCONV_STABILITY_OPT_IN"))
    assert two.get(t.HTTP_RESEND_COUNT) == (1 if stable else None)
    counted = telemetry.metrics()[t.METRIC_ATTEMPTS]  # each attempt counted once, by its permission
    by = sorted((attributes.get(t.PERMISSION_BY, "first"), value) for attributes, value in counted)
    assert by == [("app", 1.0), ("first", 1.0)]


@pytest.mark.skipif(LINE == 1, reason="a client extension's claimed results are mcp 2.x's")
@pytest.mark.parametrize("redeemed", [False, True], ids=["resolver-raises", "resolver-returns"])
async def test_a_claimed_result_whose_resolver_raises_is_a_failed_call(
    server: ServerHandle, telemetry: Telemetry, instrument: Any, redeemed: bool
) -> None:
    """The server answers with an extension's own shape; the client's claim resolves it after the
    session's call returned. A resolver that raises fails the call: the record says `failed`."""
    from typing import Literal

    from mcp import Client as SdkClient
    from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
    from mcp_types import CallToolResult, Result, TextContent

    class Ticket(Result):
        result_type: Literal["com.example/ticket"] = "com.example/ticket"
        ticket: str

    async def redeem(claimed: Ticket, ctx: ClaimContext) -> CallToolResult:
        if not redeemed:
            raise RuntimeError("the ticket could not be redeemed")
        text = "redeemed"  # search declares an output schema: its result is structured too
        return CallToolResult(
            content=[TextContent(type="text", text=text)], structured_content={"result": text}
        )

    class Tickets(ClientExtension):
        identifier = "com.example/tickets"

        def claims(self) -> list[ResultClaim[Any]]:
            return [ResultClaim(result_type="com.example/ticket", model=Ticket, resolve=redeem)]

    instrument(servers=declare(server, STRICT, {}))
    server.faults.add("search", ClaimedResult("com.example/ticket", {"ticket": "t-1"}))
    async with SdkClient(server.url, mode="2026-07-28", extensions=[Tickets()]) as client:
        with anyio.fail_after(10):
            if redeemed:
                assert not is_error(await client.call_tool("search", {"query": "q"}))
            else:
                with pytest.raises(RuntimeError, match="could not be redeemed"):
                    await client.call_tool("search", {"query": "q"})
    record = the_record(telemetry)
    assert record[t.VERDICT] == ("completed" if redeemed else "failed")
    assert (record[t.EFFECT], record[t.MAY_HAVE_RUN], record[t.SENT]) == ("applied", False, 1)
    assert server.counters.executions("search") == 1


# -- a changing call that failed after its result came back: it ran, so the guard arms --

CHARGE = {"charge": {"changes": True, "on": ["network"]}}
KEYED = {"argument": "idempotency_key"}
ORDER = {"amount": 7}


@pytest.mark.parametrize("policy", [STRICT, COMPAT])
async def test_a_changes_call_whose_result_failed_validation_arms_the_repeat_guard(
    server: ServerHandle, telemetry: Telemetry, instrument: Any, mode: str, policy: str
) -> None:
    """The result came back (the tool ran) without the structured content its output schema
    requires: the SDK's validation raises, the effect is `applied`, and a blind repeat would charge
    twice. Refused until the app repeats on purpose."""
    instrument(servers=declare(server, policy, CHARGE, deduplicates=KEYED))
    server.faults.add("charge", UnstructuredResult())
    async with Client(server.url, mode=mode) as client:
        with anyio.fail_after(10), pytest.raises(RuntimeError, match="structured content"):
            await client.call_tool("charge", ORDER)  # the SDK's own error, as without the plugin
        assert server.counters.executions("charge") == 1
        with anyio.fail_after(10), pytest.raises(RepeatRefusedError):
            await client.call_tool("charge", dict(ORDER))  # a retry layer's new, identical call
        assert server.counters.executions("charge") == 1  # the repeat never left
        assert server.counters.tool_posts("charge") == 1
        with anyio.fail_after(10), repeat_confirmed():
            assert not is_error(await client.call_tool("charge", ORDER))  # checked, on purpose
        assert not is_error(await client.call_tool("charge", ORDER))  # completed: nothing to check
    assert server.counters.executions("charge") == 3
    failed, refused, confirmed, again = records(telemetry)
    assert (failed[t.VERDICT], failed[t.SENT], failed[t.EFFECT]) == ("failed", 1, "applied")
    assert failed[t.MAY_HAVE_RUN] is False  # it did run: an answer came, nothing is unknown
    assert (refused[t.VERDICT], refused[t.SENT], refused[t.EFFECT]) == ("failed", 0, "none")
    assert confirmed[t.VERDICT] == again[t.VERDICT] == "completed"


@pytest.mark.skipif(LINE == 1, reason="a client extension's claimed results are mcp 2.x's")
async def test_a_changes_call_whose_claimed_result_the_resolver_could_not_finish_arms_the_repeat_guard(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    """The server answered (the tool ran) with an extension's own shape, and the client's resolver
    raised after the session's call returned: a blind repeat would charge twice."""
    from typing import Literal

    from mcp import Client as SdkClient
    from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
    from mcp_types import CallToolResult, Result

    class Ticket(Result):
        result_type: Literal["com.example/ticket"] = "com.example/ticket"
        ticket: str

    async def redeem(claimed: Ticket, ctx: ClaimContext) -> CallToolResult:
        raise RuntimeError("the ticket could not be redeemed")

    class Tickets(ClientExtension):
        identifier = "com.example/tickets"

        def claims(self) -> list[ResultClaim[Any]]:
            return [ResultClaim(result_type="com.example/ticket", model=Ticket, resolve=redeem)]

    instrument(servers=declare(server, STRICT, CHARGE, deduplicates=KEYED))
    server.faults.add("charge", ClaimedResult("com.example/ticket", {"ticket": "t-1"}))
    async with SdkClient(server.url, mode="2026-07-28", extensions=[Tickets()]) as client:
        with anyio.fail_after(10), pytest.raises(RuntimeError, match="could not be redeemed"):
            await client.call_tool("charge", ORDER)
        with anyio.fail_after(10), pytest.raises(RepeatRefusedError):
            await client.call_tool("charge", dict(ORDER))
    assert server.counters.executions("charge") == 1
    assert server.counters.tool_posts("charge") == 1
    failed, refused = records(telemetry)
    assert (failed[t.VERDICT], failed[t.EFFECT], failed[t.MAY_HAVE_RUN]) == ("failed", "applied", False)
    assert (refused[t.VERDICT], refused[t.SENT]) == ("failed", 0)
