"""Every row of docs/contract.md's law table, end to end: the mcp SDK's own client and server on loopback.

Each test scripts a fault at the ASGI or TCP level, calls a tool through the installed line's client
(harness/client.py: `mcp.Client` on 2.x, a `ClientSession` on 1.x), and reads the ground truth from
the server (executions, POSTs per request id) and the record from the span. The same tests run on
mcp 2.x and 1.x; where the two SDKs surface an error differently, the expectation says which.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest
from tests.support.calls import declared, leaves, refused_call
from tests.support.telemetry import Telemetry, attempt_spans, records, the_record

from harness.client import Client, McpError, http, is_error
from harness.faults import (
    DropAfterExecution,
    DropBeforeExecution,
    JsonRpcError,
    Status,
    Throttle,
    retryable_conflict,
)
from harness.sdk import LINE
from harness.server import ServerHandle
from otel_mcp_replay import UnknownEffectError
from otel_mcp_replay import telemetry as t

if sys.version_info < (3, 11):  # pragma: no cover - Python 3.10
    from exceptiongroup import BaseExceptionGroup

pytestmark = pytest.mark.anyio

COMPAT = "compatibility"
STRICT = "app-authorized"


def posts_of(server: ServerHandle, record: dict[str, Any]) -> int:
    return server.counters.posts(record[t.JSONRPC_REQUEST_ID])


# -- throttle (HTTP 429) --


async def test_throttle_under_compatibility_repeats_by_compatibility_assuming_refused(
    server: ServerHandle, telemetry: Telemetry, instrument: Any, mode: str
) -> None:
    """No tool names throttle: compatibility repeats the 429 anyway, on a recorded assumption."""
    instrument(servers=declared(server, {}, COMPAT))
    server.faults.add("search", Throttle("0"))
    async with Client(server.url, mode=mode) as client:
        result = await client.call_tool("search", {"query": "q"})
    assert not is_error(result)
    assert server.counters.executions("search") == 1
    record = the_record(telemetry)
    assert record[t.SENT] == 2 == posts_of(server, record)
    assert record[t.ATTEMPTS_PERMISSION] == ("first", "compatibility")
    assert record[t.ATTEMPTS_STATUS] == (429, 200)
    assert record[t.ATTEMPTS_FAILURE] == ("throttle", "")
    # The 429 is not proof it did not run: the series' effect stays unknown.
    assert record[t.ATTEMPTS_EFFECT] == ("unknown", "applied")
    assert record[t.EFFECT] == "unknown"
    assert record[t.VERDICT] == "completed"
    second = attempt_spans(telemetry, record[t.JSONRPC_REQUEST_ID])[1].attributes or {}
    assert second[t.PERMISSION_BY] == "compatibility"
    assert second[t.PERMISSION_ON] == "throttle"
    assert second[t.PERMISSION_ASSUMES] == "refused-before-execution"
    assert second[t.ATTEMPT] == 2
    # The stable HTTP names' resend count (OTEL_SEMCONV_STABILITY_OPT_IN=http): the old ones have none.
    assert second.get(t.HTTP_RESEND_COUNT) == (1 if os.environ.get("OTEL_SEMCONV_STABILITY_OPT_IN") else None)


async def test_throttle_under_compatibility_named_by_the_tool_repeats_by_app(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    instrument(servers=declared(server, {"search": {"on": ["throttle"]}}, COMPAT))
    server.faults.add("search", Throttle("0"))
    async with Client(server.url) as client:
        await client.call_tool("search", {"query": "q"})
    record = the_record(telemetry)
    assert record[t.ATTEMPTS_PERMISSION] == ("first", "app")
    second = attempt_spans(telemetry, record[t.JSONRPC_REQUEST_ID])[1].attributes or {}
    assert t.PERMISSION_ASSUMES not in second


async def test_throttle_under_compatibility_with_retry_on_throttle_off_is_not_permitted(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    instrument(servers=declared(server, {}, COMPAT), retry_on_throttle=False)
    server.faults.add("search", Throttle("0"))
    error = await refused_call(server.url, "search", {"query": "q"}, 429)
    if LINE == 2:  # exactly the SDK's own error for a 429 (1.x's, its teardown, is checked by refused_call)
        assert type(error) is McpError
        assert error.error.code == -32603
    record = the_record(telemetry)
    assert record[t.SENT] == 1 == posts_of(server, record)
    assert record[t.VERDICT] == "failed"
    first = attempt_spans(telemetry, record[t.JSONRPC_REQUEST_ID])[0].attributes or {}
    assert first[t.DECLINED] == "not-permitted"
    assert server.counters.executions("search") == 0


async def test_throttle_under_app_authorized_not_named_is_not_permitted_and_keeps_the_servers_error(
    server: ServerHandle, telemetry: Telemetry, instrument: Any, mode: str
) -> None:
    instrument(servers=declared(server, {"search": {"on": ["network"]}}, STRICT))
    server.faults.add("search", Throttle("0"))
    if LINE == 2:
        async with Client(server.url, mode=mode) as client:
            with pytest.raises(McpError) as raised:
                await client.call_tool("search", {"query": "q"})
            # A received refusal is an answer: the server's error, not UnknownEffectError.
            assert not isinstance(raised.value, UnknownEffectError)
            assert is_error(await client.call_tool("search", {"query": "next"})) is False
    else:  # the server's error as the 1.x SDK raises it: its session's teardown (refused_call)
        error = await refused_call(server.url, "search", {"query": "q"}, 429)
        assert not isinstance(error, UnknownEffectError)
    first = attempt_spans(telemetry)[0].attributes or {}
    assert first[t.DECLINED] == "not-permitted"
    failed = next(r for r in records(telemetry) if r[t.VERDICT] == "failed")
    assert failed[t.MAY_HAVE_RUN] is False
    assert failed[t.SENT] == 1 == posts_of(server, failed)


async def test_throttle_under_app_authorized_named_repeats_by_app(
    server: ServerHandle, telemetry: Telemetry, instrument: Any, mode: str
) -> None:
    instrument(servers=declared(server, {"search": {"on": ["throttle"]}}, STRICT))
    server.faults.add("search", Throttle("0"), Throttle(None))
    async with Client(server.url, mode=mode) as client:
        result = await client.call_tool("search", {"query": "q"})
    assert not is_error(result)
    record = the_record(telemetry)
    assert record[t.ATTEMPTS_PERMISSION] == ("first", "app", "app")
    assert record[t.SENT] == 3 == posts_of(server, record)
    assert server.counters.executions("search") == 1


# -- network (sent, no response) --


async def test_network_under_compatibility_not_named_is_not_permitted_and_the_sdk_error_stands(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    """Unchanged behaviour: the SDK alone tears its transport down on a dropped POST (on both lines
    its transport's task raises the HTTP client's own error, in the session's task group)."""
    instrument(servers=declared(server, {}, COMPAT))
    server.faults.add("search", DropAfterExecution())
    with pytest.raises(BaseExceptionGroup) as raised:
        async with Client(server.url) as client:
            await client.call_tool("search", {"query": "q"})
    assert [type(e) for e in leaves(raised.value)] == [http.RemoteProtocolError]
    assert server.counters.executions("search") == 1
    record = the_record(telemetry)
    assert record[t.SENT] == 1 == posts_of(server, record)
    assert record[t.ATTEMPTS_FAILURE] == ("network",)
    assert record[t.ATTEMPTS_STATUS] == (0,)
    assert record[t.EFFECT] == "unknown"
    assert record[t.MAY_HAVE_RUN] is False  # compatibility never claims it
    first = attempt_spans(telemetry)[0].attributes or {}
    assert first[t.DECLINED] == "not-permitted"


async def test_network_under_compatibility_named_repeats_by_app(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    instrument(servers=declared(server, {"search": {"on": ["network"]}}, COMPAT))
    server.faults.add("search", DropBeforeExecution())
    async with Client(server.url) as client:
        result = await client.call_tool("search", {"query": "q"})
    assert not is_error(result)
    record = the_record(telemetry)
    assert record[t.ATTEMPTS_PERMISSION] == ("first", "app")
    assert record[t.ATTEMPTS_FAILURE] == ("network", "")
    assert record[t.SENT] == 2 == posts_of(server, record)
    assert server.counters.executions("search") == 1


async def test_network_under_app_authorized_not_named_fails_only_that_call_as_may_have_run(
    server: ServerHandle, telemetry: Telemetry, instrument: Any, mode: str
) -> None:
    instrument(servers=declared(server, {"search": {"on": ["throttle"]}}, STRICT))
    server.faults.add("search", DropAfterExecution())
    async with Client(server.url, mode=mode) as client:
        with pytest.raises(UnknownEffectError) as raised:
            await client.call_tool("search", {"query": "q"})
        assert isinstance(raised.value, McpError)
        cause = raised.value.__cause__
        assert cause is not None and type(cause).__module__.partition(".")[0] == http.__name__
        # Only that call failed: the session goes on.
        assert is_error(await client.call_tool("search", {"query": "again"})) is False
    assert server.counters.executions("search") == 2
    failed = next(r for r in records(telemetry) if r[t.VERDICT] == "failed")
    assert failed[t.MAY_HAVE_RUN] is True
    assert failed[t.EFFECT] == "unknown"
    assert failed[t.SENT] == 1 == posts_of(server, failed)


async def test_network_under_app_authorized_named_repeats_by_app(
    server: ServerHandle, telemetry: Telemetry, instrument: Any, mode: str
) -> None:
    instrument(servers=declared(server, {"search": {"on": ["network"]}}, STRICT))
    server.faults.add("search", DropAfterExecution())
    async with Client(server.url, mode=mode) as client:
        result = await client.call_tool("search", {"query": "q"})
    assert not is_error(result)
    # It ran twice: a repeat after a drop cannot know; that is why only the app may allow it.
    assert server.counters.executions("search") == 2
    record = the_record(telemetry)
    assert record[t.ATTEMPTS_PERMISSION] == ("first", "app")
    assert record[t.EFFECT] == "unknown"
    assert record[t.VERDICT] == "completed"


# -- session-busy (an adapter's recognised refusal) --


@pytest.mark.parametrize("policy", [COMPAT, STRICT])
@pytest.mark.parametrize("in_body", [False, True])
async def test_session_busy_repeats_by_adapter_assuming_refused(
    server: ServerHandle, telemetry: Telemetry, instrument: Any, policy: str, in_body: bool
) -> None:
    instrument(servers=declared(server, {}, policy, adapter="agentcore-runtime"))
    server.faults.add("search", retryable_conflict(in_body=in_body))
    async with Client(server.url) as client:
        await client.call_tool("search", {"query": "q"})
    record = the_record(telemetry)
    assert record[t.ATTEMPTS_FAILURE] == ("session-busy", "")
    assert record[t.ATTEMPTS_PERMISSION] == ("first", "adapter")
    assert record[t.ATTEMPTS_STATUS] == (409, 200)
    second = attempt_spans(telemetry, record[t.JSONRPC_REQUEST_ID])[1].attributes or {}
    assert second[t.PERMISSION_ASSUMES] == "refused-before-execution"
    assert server.counters.executions("search") == 1


async def test_the_same_409_without_a_declared_adapter_is_an_error(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    instrument(servers=declared(server, {}, COMPAT))
    server.faults.add("search", retryable_conflict())
    await refused_call(server.url, "search", {"query": "q"}, 409)
    record = the_record(telemetry)
    assert record[t.ATTEMPTS_FAILURE] == ("error",)
    assert (attempt_spans(telemetry)[0].attributes or {})[t.DECLINED] == "not-retryable"


async def test_a_409_with_other_words_is_never_session_busy(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    """Matched by code, never by a loose substring a server behind the runtime could write."""
    instrument(servers=declared(server, {}, COMPAT, adapter="agentcore-runtime"))
    body = {"message": "RetryableConflictException happened after the tool ran"}
    server.faults.add("search", Status(409, body=body))
    await refused_call(server.url, "search", {"query": "q"}, 409)
    assert the_record(telemetry)[t.ATTEMPTS_FAILURE] == ("error",)


# -- error (anything else) --


@pytest.mark.parametrize("policy", [COMPAT, STRICT])
async def test_a_503_is_not_retryable(
    server: ServerHandle, telemetry: Telemetry, instrument: Any, policy: str
) -> None:
    instrument(servers=declared(server, {"search": {"on": ["throttle", "network"]}}, policy))
    server.faults.add("search", Status(503))
    assert not isinstance(await refused_call(server.url, "search", {"query": "q"}, 503), UnknownEffectError)
    record = the_record(telemetry)
    assert record[t.SENT] == 1 == posts_of(server, record)
    assert record[t.ATTEMPTS_STATUS] == (503,)
    assert (attempt_spans(telemetry)[0].attributes or {})[t.DECLINED] == "not-retryable"


@pytest.mark.parametrize("policy", [COMPAT, STRICT])
async def test_a_json_rpc_error_is_an_error_and_its_effect_unknown(
    server: ServerHandle, telemetry: Telemetry, instrument: Any, policy: str
) -> None:
    instrument(servers=declared(server, {"search": {"on": ["throttle", "network"]}}, policy))
    server.faults.add("search", JsonRpcError(-32050, "refused"))
    async with Client(server.url) as client:
        with pytest.raises(McpError) as raised:
            await client.call_tool("search", {"query": "q"})
    assert raised.value.error.code == -32050  # the server's own error, as it came
    record = the_record(telemetry)
    assert record[t.ATTEMPTS_FAILURE] == ("error",)
    assert record[t.ATTEMPTS_EFFECT] == ("unknown",)
    assert record[t.MAY_HAVE_RUN] is False


async def test_a_tool_error_result_is_applied_and_verdict_tool_error(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    instrument(servers=declared(server, {}, STRICT))
    async with Client(server.url) as client:
        result = await client.call_tool("fail", {})
    assert is_error(result)
    record = the_record(telemetry)
    assert record[t.VERDICT] == "tool-error"
    assert record[t.EFFECT] == "applied"
    assert record[t.ATTEMPTS_FAILURE] == ("",)


# -- the side-effect guard --


@pytest.mark.parametrize("policy", [COMPAT, STRICT])
async def test_a_changes_tool_without_its_key_is_never_repeated(
    server: ServerHandle, telemetry: Telemetry, instrument: Any, policy: str
) -> None:
    tools = {"charge": {"changes": True, "on": ["throttle", "network"]}}
    instrument(servers=declared(server, tools, policy, deduplicates={"argument": "idempotency_key"}))
    server.faults.add("charge", Throttle("0"))
    await refused_call(server.url, "charge", {"amount": 5}, 429)
    record = the_record(telemetry)
    assert record[t.SENT] == 1 == posts_of(server, record)
    assert (attempt_spans(telemetry)[0].attributes or {})[t.DECLINED] == "changes-without-key"


async def test_a_changes_tool_with_a_key_but_no_declared_deduplication_is_never_repeated(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    instrument(servers=declared(server, {"charge": {"changes": True, "on": ["throttle"]}}, COMPAT))
    server.faults.add("charge", Throttle("0"))
    await refused_call(server.url, "charge", {"amount": 5, "idempotency_key": "k-1"}, 429)
    assert (attempt_spans(telemetry)[0].attributes or {})[t.DECLINED] == "changes-without-key"


async def test_a_changes_tool_carrying_its_key_is_repeated_and_the_server_deduplicates(
    server: ServerHandle, telemetry: Telemetry, instrument: Any, mode: str
) -> None:
    tools = {"charge": {"changes": True, "on": ["network"]}}
    instrument(servers=declared(server, tools, STRICT, deduplicates={"argument": "idempotency_key"}))
    server.faults.add("charge", DropAfterExecution())
    async with Client(server.url, mode=mode) as client:
        result = await client.call_tool("charge", {"amount": 5, "idempotency_key": "order-77"})
    assert not is_error(result)
    assert server.counters.executions("charge") == 1  # ran once, though sent twice
    assert server.counters.deduplicated("charge") == 1
    record = the_record(telemetry)
    assert record[t.SENT] == 2 == posts_of(server, record)


async def test_an_empty_key_does_not_count_as_carried(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    tools = {"charge": {"changes": True, "on": ["network"]}}
    instrument(servers=declared(server, tools, STRICT, deduplicates={"argument": "idempotency_key"}))
    server.faults.add("charge", DropAfterExecution())
    async with Client(server.url) as client:
        with pytest.raises(UnknownEffectError):
            await client.call_tool("charge", {"amount": 5, "idempotency_key": ""})
    assert server.counters.executions("charge") == 1
    assert (attempt_spans(telemetry)[0].attributes or {})[t.DECLINED] == "changes-without-key"


# -- protocol requests --


@pytest.mark.parametrize("policy", [COMPAT, STRICT])
async def test_protocol_requests_are_repeated_on_a_429_and_file_no_record(
    server: ServerHandle, telemetry: Telemetry, instrument: Any, policy: str
) -> None:
    instrument(servers=declared(server, {}, policy))
    server.faults.add_method("initialize", Throttle("0"))
    server.faults.add_method("notifications/initialized", Throttle("0"))
    server.faults.add_method("tools/list", Throttle("0"))
    async with Client(server.url, mode="legacy") as client:
        tools = await client.list_tools()
    assert {tool.name for tool in tools.tools} >= {"search", "charge"}
    assert server.faults.pending() == 0  # every 429 was met, and every message then went through
    initialized = [p for p in server.counters.post_log() if p.method == "notifications/initialized"]
    assert len(initialized) == 2  # a notification refused with a 429 is sent again too
    assert records(telemetry) == []
    assert attempt_spans(telemetry) == []


@pytest.mark.skipif(LINE == 1, reason="mcp 1.x tears its session down on any refused POST")
async def test_a_protocol_requests_refusal_costs_the_endpoints_budget_as_a_tool_calls_does(
    server: ServerHandle, instrument: Any
) -> None:
    """A protocol request's outcome is classified as any attempt's (law.classify, one function): its
    500 is a failed attempt and costs the endpoint's bucket a token, as a tool call's 500 does; an
    answered one gives `ratio` back."""
    instrumentor = instrument(servers=declared(server, {}, STRICT), retry_budget=(10, 1))
    async with Client(server.url, mode="legacy") as client:
        runtime = instrumentor.runtime
        budget = runtime.budgets.for_endpoint(runtime.origin(server.url))
        assert budget is not None and budget.tokens == 10
        server.faults.add_method("tools/list", Status(500))
        with pytest.raises(McpError):
            await client.list_tools()
        assert budget.tokens == 9
        server.faults.add("search", Status(500))
        with pytest.raises(McpError):
            await client.call_tool("search", {"query": "q"})
        assert budget.tokens == 8
        await client.list_tools()
        assert budget.tokens == 9
    assert server.faults.pending() == 0
    assert server.counters.executions("search") == 0
