"""The trace a user reads: one tools/call is 1 + N client spans (N: its HTTP attempts).

The call span is the MCP client span (kind CLIENT, `tools/call {tool}`); each attempt is the HTTP
client span of its POST (kind CLIENT, `POST`), its child; the SDK's own client span of that request
(mcp 2.x) is not made, so the server's span is the call span's child; the HTTP client
instrumentation, on or off, makes no second span for those POSTs. Protocol requests (tools/list,
initialize, ...) keep the SDK's and the instrumentation's spans. Every case runs with the httpx
instrumentation on and off, in each protocol era the installed line speaks.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from mcp import ClientSession
from mcp.client.sse import sse_client
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode
from tests.support.calls import declared
from tests.support.telemetry import Telemetry, is_attempt

from harness.client import ERAS, Client, McpError, is_error
from harness.faults import DropAfterExecution, JsonRpcError, Throttle
from harness.sdk import LINE
from harness.server import Counters, ServerHandle, build_server, running_server
from otel_mcp_replay import UnknownEffectError
from otel_mcp_replay import telemetry as t
from otel_mcp_replay.lines import LINE as PLUGIN_LINE

pytestmark = pytest.mark.anyio

SDK_SCOPE = "mcp-python-sdk"
HTTP_SCOPE = "opentelemetry.instrumentation.httpx"


@pytest.fixture(params=["httpx-off", "httpx-on"])
def httpx_instrumentation(request: pytest.FixtureRequest, telemetry: Telemetry) -> Iterator[bool]:
    """The contrib HTTP client instrumentation of the installed line's client, on or off."""
    if request.param == "httpx-off":
        yield False
        return
    contrib = pytest.importorskip("opentelemetry.instrumentation.httpx")
    if not hasattr(contrib, PLUGIN_LINE.http_instrumentor):  # httpx2's came with 0.65b0
        pytest.skip(f"this opentelemetry-instrumentation-httpx has no {PLUGIN_LINE.http_instrumentor}")
    instrumentor = getattr(contrib, PLUGIN_LINE.http_instrumentor)()
    instrumentor.instrument(
        tracer_provider=telemetry.tracer_provider, meter_provider=telemetry.meter_provider
    )
    try:
        yield True
    finally:
        instrumentor.uninstrument()


def scope(span: ReadableSpan) -> str:
    return span.instrumentation_scope.name if span.instrumentation_scope is not None else ""


def parent_id(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


class Tree:
    """The spans of one call's trace, read as a user's backend shows them."""

    def __init__(self, telemetry: Telemetry, tool: str) -> None:
        spans = telemetry.spans()
        calls = [s for s in spans if scope(s) == t.INSTRUMENTATION_NAME and s.name == f"tools/call {tool}"]
        assert len(calls) == 1, [s.name for s in spans]
        self.call = calls[0]
        self.spans = [s for s in spans if s.context.trace_id == self.call.context.trace_id]
        self.by_id = {s.context.span_id: s for s in self.spans}
        self.attempts = sorted((s for s in self.spans if is_attempt(s)), key=lambda s: s.start_time or 0)

    def method_of(self, span: ReadableSpan) -> object:
        """The MCP method a span serves: its own, else its nearest ancestor's that names one."""
        current: ReadableSpan | None = span
        while current is not None:
            method = (current.attributes or {}).get(t.MCP_METHOD_NAME)
            if method is not None:
                return method
            up = parent_id(current)
            current = self.by_id.get(up) if up is not None else None
        return None

    def call_client_spans(self) -> list[ReadableSpan]:
        """Every client span the tools/call itself made (not the SDK's protocol requests inside it)."""
        return [
            s for s in self.spans if s.kind is SpanKind.CLIENT and self.method_of(s) == t.TOOLS_CALL_METHOD
        ]

    def check_shape(self, attempts: int, http_on: bool) -> None:
        call = self.call
        assert call.kind is SpanKind.CLIENT and call.parent is None
        assert len(self.attempts) == attempts
        # 1 + N client spans carry the call: the call span and one POST per attempt, nothing twice.
        assert sorted(id(s) for s in self.call_client_spans()) == sorted(
            id(s) for s in [call, *self.attempts]
        )
        numbers: dict[object, int] = {}  # each round (its request id) numbers its attempts from 1
        for attempt in self.attempts:
            attributes = attempt.attributes or {}
            number = numbers[attributes[t.JSONRPC_REQUEST_ID]] = (
                numbers.get(attributes[t.JSONRPC_REQUEST_ID], 0) + 1
            )
            assert attempt.kind is SpanKind.CLIENT and attempt.name == "POST"
            assert parent_id(attempt) == call.context.span_id
            assert attributes[t.ATTEMPT] == number
            assert attributes[t.HTTP_REQUEST_METHOD] == "POST"
            assert attributes[t.MCP_METHOD_NAME] == t.TOOLS_CALL_METHOD
            assert attributes[t.SERVER_ADDRESS] == "127.0.0.1" and isinstance(attributes[t.SERVER_PORT], int)
            # No path, no query value (a session id, a path secret): they are REDACTED.
            base = f"http://127.0.0.1:{attributes[t.SERVER_PORT]}/REDACTED"
            assert attributes[t.URL_FULL] in (base, f"{base}?REDACTED")
            assert attributes.get(t.HTTP_RESEND_COUNT) == (number - 1 if number > 1 else None)
            # No HTTP client span under the attempt: the instrumentation was suppressed for its POST.
            assert not [s for s in self.spans if parent_id(s) == attempt.context.span_id]
        # No SDK client span for the tools/call: the call span stands in for it.
        assert not [s for s in self.spans if s.name.startswith("MCP send tools/call")]
        if http_on:  # the instrumentation still draws the protocol requests' POSTs
            assert all(self.method_of(s) != t.TOOLS_CALL_METHOD for s in self.spans if scope(s) == HTTP_SCOPE)

    def check_call(self, **expected: object) -> dict[str, Any]:
        attributes = dict(self.call.attributes or {})
        assert attributes[t.MCP_METHOD_NAME] == t.TOOLS_CALL_METHOD
        assert attributes[t.GEN_AI_OPERATION_NAME] == "execute_tool"
        assert attributes[t.NETWORK_TRANSPORT] == "tcp" and attributes[t.NETWORK_PROTOCOL_NAME] == "http"
        if any(t.HTTP_STATUS_CODE in (s.attributes or {}) for s in self.attempts):  # a response came
            assert attributes[t.NETWORK_PROTOCOL_VERSION] == "1.1"
        assert attributes[t.SERVER_ADDRESS] == "127.0.0.1" and isinstance(attributes[t.SERVER_PORT], int)
        assert attributes[t.JSONRPC_REQUEST_ID] == (self.attempts[-1].attributes or {})[t.JSONRPC_REQUEST_ID]
        for key, value in expected.items():
            assert attributes.get(key) == value, (key, attributes.get(key), value)
        if t.ERROR_TYPE in attributes:
            assert self.call.status.status_code is StatusCode.ERROR and not self.call.status.description
        else:
            assert self.call.status.status_code is StatusCode.UNSET
        return attributes

    def check_server_span(self, tool: str) -> None:
        """On mcp 2.x the server's span is the call span's child (the trace context in `_meta`)."""
        if LINE != 2:
            return
        servers = [s for s in self.spans if s.kind is SpanKind.SERVER and s.name == f"tools/call {tool}"]
        assert servers and all(parent_id(s) == self.call.context.span_id for s in servers)


def operation_points(telemetry: Telemetry, name: str) -> list[tuple[dict[str, Any], int]]:
    """(attributes, count) of each point of the plugin's histogram `name`."""
    out: list[tuple[dict[str, Any], int]] = []
    data = telemetry.reader.get_metrics_data()
    for resource_metrics in data.resource_metrics if data is not None else []:
        for scope_metrics in resource_metrics.scope_metrics:
            if scope_metrics.scope.name != t.INSTRUMENTATION_NAME:
                continue
            for metric in scope_metrics.metrics:
                if metric.name == name:
                    out.extend((dict(p.attributes or {}), p.count) for p in metric.data.data_points)
    return out


def check_http_durations(telemetry: Telemetry, http_on: bool, statuses: list[int]) -> None:
    """The HTTP conventions' duration, recorded by the plugin for the attempts' POSTs in the
    suppressed instrumentation's place, and only when that instrumentation is on."""
    points = operation_points(telemetry, t.METRIC_HTTP_DURATION)
    if not http_on:
        assert points == []
        return
    by_status: dict[object, int] = {}
    for attributes, count in points:
        assert attributes[t.HTTP_REQUEST_METHOD] == "POST" and attributes[t.SERVER_ADDRESS] == "127.0.0.1"
        by_status[attributes.get(t.HTTP_STATUS_CODE)] = (
            by_status.get(attributes.get(t.HTTP_STATUS_CODE), 0) + count
        )
    expected: dict[object, int] = {}
    for status in statuses:
        expected[status or None] = expected.get(status or None, 0) + 1
    assert by_status == expected


async def test_a_clean_call(
    server: ServerHandle, telemetry: Telemetry, instrument: Any, mode: str, httpx_instrumentation: bool
) -> None:
    instrument(servers=declared(server, {"search": {"on": ["throttle"]}}))
    async with Client(server.url, mode=mode) as client:
        result = await client.call_tool("search", {"query": "q"})
    assert not is_error(result) and server.counters.executions("search") == 1
    tree = Tree(telemetry, "search")
    tree.check_shape(1, httpx_instrumentation)
    attributes = tree.check_call(
        **{
            t.GEN_AI_TOOL_NAME: "search",
            t.POLICY: "app-authorized",
            t.SENT: 1,
            t.EFFECT: "applied",
            t.VERDICT: "completed",
            t.MAY_HAVE_RUN: False,
        }
    )
    assert t.ERROR_TYPE not in attributes and t.RPC_RESPONSE_STATUS_CODE not in attributes
    assert isinstance(attributes[t.MCP_PROTOCOL_VERSION], str)
    if mode == "legacy":  # hashed, never raw; the conventions keep it off 2026-07-28 calls
        assert str(attributes[t.MCP_SESSION_ID]).startswith("h:")
        raw = {session for session, _, _ in server.counters._executions_by_request if session}
        assert raw and attributes[t.MCP_SESSION_ID] not in raw
    else:
        assert t.MCP_SESSION_ID not in attributes
    (attempt,) = tree.attempts
    assert attempt.status.status_code is StatusCode.UNSET
    assert {k: (attempt.attributes or {}).get(k) for k in (t.HTTP_STATUS_CODE, t.EFFECT, t.FAILURE)} == {
        t.HTTP_STATUS_CODE: 200,
        t.EFFECT: "applied",
        t.FAILURE: None,
    }
    tree.check_server_span("search")
    check_http_durations(telemetry, httpx_instrumentation, [200])
    ((metric, count),) = operation_points(telemetry, t.METRIC_OPERATION_DURATION)
    assert count == 1 and t.ERROR_TYPE not in metric
    assert metric[t.GEN_AI_TOOL_NAME] == "search" and metric[t.NETWORK_TRANSPORT] == "tcp"
    assert metric[t.MCP_PROTOCOL_VERSION] == attributes[t.MCP_PROTOCOL_VERSION]


async def test_a_429_then_200(
    server: ServerHandle, telemetry: Telemetry, instrument: Any, mode: str, httpx_instrumentation: bool
) -> None:
    instrument(servers=declared(server, {"search": {"on": ["throttle"]}}))
    server.faults.add("search", Throttle(retry_after="0"))
    async with Client(server.url, mode=mode) as client:
        await client.call_tool("search", {"query": "q"})
    assert server.counters.executions("search") == 1
    tree = Tree(telemetry, "search")
    tree.check_shape(2, httpx_instrumentation)
    tree.check_call(**{t.SENT: 2, t.EFFECT: "unknown", t.VERDICT: "completed", t.MAY_HAVE_RUN: False})
    first, second = (dict(s.attributes or {}) for s in tree.attempts)
    assert (first[t.HTTP_STATUS_CODE], first[t.ERROR_TYPE], first[t.FAILURE]) == (429, "429", "throttle")
    assert tree.attempts[0].status.status_code is StatusCode.ERROR
    assert (second[t.HTTP_STATUS_CODE], second[t.PERMISSION_BY], second[t.PERMISSION_ON]) == (
        200,
        "app",
        "throttle",
    )
    assert t.ERROR_TYPE not in second and tree.attempts[1].status.status_code is StatusCode.UNSET
    tree.check_server_span("search")
    check_http_durations(telemetry, httpx_instrumentation, [429, 200])


async def test_a_cut_changes_call(
    server: ServerHandle, telemetry: Telemetry, instrument: Any, mode: str, httpx_instrumentation: bool
) -> None:
    instrument(servers=declared(server, {"charge": {"changes": True, "on": ["network"]}}))
    server.faults.add("charge", DropAfterExecution())
    async with Client(server.url, mode=mode) as client:
        with pytest.raises(UnknownEffectError):
            await client.call_tool("charge", {"amount": 7})
    assert server.counters.executions("charge") == 1
    tree = Tree(telemetry, "charge")
    tree.check_shape(1, httpx_instrumentation)
    tree.check_call(
        **{
            t.SENT: 1,
            t.EFFECT: "unknown",
            t.VERDICT: "failed",
            t.MAY_HAVE_RUN: True,
            t.ERROR_TYPE: "otel_mcp_replay.UnknownEffectError",
        }
    )
    attempt = dict(tree.attempts[0].attributes or {})
    assert (attempt[t.FAILURE], attempt[t.EFFECT], attempt[t.DECLINED]) == (
        "network",
        "unknown",
        "changes-without-key",
    )
    assert t.HTTP_STATUS_CODE not in attempt and str(attempt[t.ERROR_TYPE]).startswith(f"{PLUGIN_LINE.http}.")
    check_http_durations(telemetry, httpx_instrumentation, [0])


async def test_a_tool_error_result(
    server: ServerHandle, telemetry: Telemetry, instrument: Any, mode: str, httpx_instrumentation: bool
) -> None:
    instrument(servers=declared(server, {}))
    async with Client(server.url, mode=mode) as client:
        result = await client.call_tool("fail", {})
    assert is_error(result)
    tree = Tree(telemetry, "fail")
    tree.check_shape(1, httpx_instrumentation)
    tree.check_call(**{t.VERDICT: "tool-error", t.EFFECT: "applied", t.ERROR_TYPE: "tool_error"})
    assert t.RPC_RESPONSE_STATUS_CODE not in (tree.call.attributes or {})
    assert tree.attempts[0].status.status_code is StatusCode.UNSET  # the POST itself went well


async def test_a_json_rpc_error(
    server: ServerHandle, telemetry: Telemetry, instrument: Any, mode: str, httpx_instrumentation: bool
) -> None:
    instrument(servers=declared(server, {"search": {"on": ["throttle"]}}))
    server.faults.add("search", JsonRpcError(code=-32050))
    async with Client(server.url, mode=mode) as client:
        with pytest.raises(McpError):
            await client.call_tool("search", {"query": "q"})
    tree = Tree(telemetry, "search")
    tree.check_shape(1, httpx_instrumentation)
    tree.check_call(
        **{
            t.VERDICT: "failed",
            t.ERROR_TYPE: "-32050",
            t.RPC_RESPONSE_STATUS_CODE: "-32050",
            t.MAY_HAVE_RUN: False,
        }
    )
    assert (tree.attempts[0].attributes or {})[t.FAILURE] == "error"


@pytest.mark.skipif("2026-07-28" not in ERAS, reason="multi-round calls (SEP-2322) are the 2026-07-28 era's")
async def test_a_multi_round_call_is_one_call_span(
    telemetry: Telemetry, instrument: Any, httpx_instrumentation: bool
) -> None:
    import mcp_types as types
    from mcp import Client as SdkClient
    from mcp.client.context import ClientRequestContext

    async def confirm(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"ok": True})

    counters = Counters()
    with running_server(counters=counters, server=build_server(counters, era_tools=True)) as server:
        instrument(servers=declared(server, {}))
        async with SdkClient(server.url, mode="2026-07-28", elicitation_callback=confirm) as client:
            await client.call_tool("ask_then_charge", {"amount": 3})
        assert counters.executions("ask_then_charge") == 1
    tree = Tree(telemetry, "ask_then_charge")
    tree.check_shape(2, httpx_instrumentation)  # one POST per round, both under the one call span
    assert len({(s.attributes or {})[t.JSONRPC_REQUEST_ID] for s in tree.attempts}) == 2
    tree.check_call(**{t.SENT: 2, t.VERDICT: "completed", t.EFFECT: "applied"})
    assert len([e for e in tree.call.events if e.name == t.RECORD_EVENT]) == 2


async def test_legacy_sse_the_message_post_is_the_attempt(
    telemetry: Telemetry, instrument: Any, httpx_instrumentation: bool
) -> None:
    with running_server("sse") as server:
        instrument(servers=declared(server, {"search": {"on": ["throttle"]}}))
        server.faults.add("search", Throttle(retry_after="0"))
        async with sse_client(server.url) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            await session.call_tool("search", {"query": "q"})
        assert server.counters.executions("search") == 1
        tree = Tree(telemetry, "search")
        tree.check_shape(2, httpx_instrumentation)
        attributes = tree.check_call(**{t.SENT: 2, t.VERDICT: "completed", t.POLICY: "app-authorized"})
        assert str(attributes[t.MCP_SESSION_ID]).startswith("h:")  # the message endpoint's, hashed
        assert [(s.attributes or {})[t.HTTP_STATUS_CODE] for s in tree.attempts] == [429, 202]
