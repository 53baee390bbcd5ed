"""The trace a user reads: one tools/call is 1 + N client spans (N: its HTTP attempts).

The call span is the MCP client span (kind CLIENT, `tools/call {tool}`): the plugin's, or, under
fastmcp's `Client`, fastmcp's own span of the call, which the plugin enriches instead of making a
second one. Each attempt is the HTTP client span of its POST (kind CLIENT, `POST`), its child, and
no MCP operation (no `mcp.method.name`), so a "kind CLIENT and `mcp.method.name`" query answers the
call span alone. The SDK's own client span of that request (mcp 2.x) is not made, so the server's
span is the call span's child; the HTTP client instrumentation, on or off, makes no second span for
those POSTs, and the attempt spans and the duration recorded in its place speak its vocabulary
(`OTEL_SEMCONV_STABILITY_OPT_IN`, read once per process: the other values run in a process each,
below). Protocol requests (tools/list, initialize, ...) keep the SDK's and the instrumentation's
spans. Every case runs with the httpx instrumentation on and off, in each protocol era the installed
line speaks, with `mcp.Client` and fastmcp's `Client` where installed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession
from mcp.client.sse import sse_client
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode
from tests.support.calls import declared
from tests.support.telemetry import HTTP_NAMES, Telemetry, is_attempt

from harness.client import ERAS, Client, McpError, is_error
from harness.faults import DropAfterExecution, JsonRpcError, Throttle
from harness.sdk import LINE
from harness.server import Counters, ServerHandle, build_server, running_server
from otel_mcp_replay import UnknownEffectError
from otel_mcp_replay import telemetry as t
from otel_mcp_replay.http_conventions import http_mode
from otel_mcp_replay.lines import LINE as PLUGIN_LINE

pytestmark = pytest.mark.anyio

HTTP_SCOPE = "opentelemetry.instrumentation.httpx"
FASTMCP_SCOPE = "fastmcp"
OPT_IN = "OTEL_SEMCONV_STABILITY_OPT_IN"
# This process's HTTP vocabulary (the contrib helpers read it once per process).
VOCABULARY = os.environ.get(OPT_IN, "")

# The HTTP client duration of each vocabulary, and the key that holds a point's status.
HTTP_DURATIONS = {
    "": {t.METRIC_HTTP_DURATION_OLD: "http.status_code"},
    "http": {t.METRIC_HTTP_DURATION: "http.response.status_code"},
    "http/dup": {
        t.METRIC_HTTP_DURATION_OLD: "http.status_code",
        t.METRIC_HTTP_DURATION: "http.response.status_code",
    },
}
# The MCP conventions' attributes of mcp.client.operation.duration: the list, and those of a failure.
OPERATION_KEYS = {
    t.MCP_METHOD_NAME,
    t.GEN_AI_OPERATION_NAME,
    t.GEN_AI_TOOL_NAME,
    t.MCP_PROTOCOL_VERSION,
    t.NETWORK_PROTOCOL_NAME,
    t.NETWORK_PROTOCOL_VERSION,
    t.NETWORK_TRANSPORT,
    t.SERVER_ADDRESS,
    t.SERVER_PORT,
}
FAILED_OPERATION_KEYS = {t.ERROR_TYPE, t.RPC_RESPONSE_STATUS_CODE}
CLIENTS = ("mcp.Client", "fastmcp.Client")


def stable(key: str) -> str:
    """What this process's vocabulary names a stable HTTP key (the old name where only it is written)."""
    old = {
        t.HTTP_REQUEST_METHOD: "http.method",
        t.URL_FULL: "http.url",
        t.HTTP_STATUS_CODE: "http.status_code",
    }
    return old[key] if VOCABULARY == "" else key


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


@pytest.fixture(params=CLIENTS)
def client_kind(request: pytest.FixtureRequest) -> str:
    """The app's client: mcp's own, or fastmcp's, which makes its own MCP client span of each call."""
    if request.param == "fastmcp.Client":
        pytest.importorskip("fastmcp")
    return str(request.param)


class AppClient:
    """`call_tool` as the app calls it on either client: the raw CallToolResult back."""

    def __init__(self, kind: str, client: Any) -> None:
        self.kind, self.client = kind, client

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        if self.kind == "fastmcp.Client":
            return await self.client.call_tool_mcp(name, arguments)
        return await self.client.call_tool(name, arguments)

    async def list_tools(self) -> Any:
        return await self.client.list_tools()


@asynccontextmanager
async def app_client(kind: str, url: str, mode: str) -> AsyncIterator[AppClient]:
    if kind == "fastmcp.Client":
        import fastmcp

        # fastmcp 4 (mcp 2.x) chooses the era; fastmcp 3 (mcp 1.x) speaks the legacy one only.
        async with fastmcp.Client(url, **({"mode": mode} if LINE == 2 else {})) as client:
            yield AppClient(kind, client)
        return
    async with Client(url, mode=mode) as client:
        yield AppClient(kind, client)


def scope(span: ReadableSpan) -> str:
    return span.instrumentation_scope.name if span.instrumentation_scope is not None else ""


def parent_id(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def is_mcp_operation(span: ReadableSpan, method: str = t.TOOLS_CALL_METHOD) -> bool:
    """What a "kind CLIENT and `mcp.method.name`" query answers (a span metric counting operations)."""
    return span.kind is SpanKind.CLIENT and (span.attributes or {}).get(t.MCP_METHOD_NAME) == method


def http_names(span: ReadableSpan) -> set[str]:
    """A POST span's HTTP names: its keys less the MCP, GenAI, JSON-RPC and replay ones."""
    return {k for k in span.attributes or {} if not k.startswith(("mcp.", "gen_ai.", "jsonrpc."))}


class Tree:
    """The spans of one call's trace, read as a user's backend shows them."""

    def __init__(self, telemetry: Telemetry, tool: str, client_kind: str = "mcp.Client") -> None:
        spans = telemetry.spans()
        # Exactly one MCP client span of the call, in the whole run: never two.
        calls = [
            s for s in spans if is_mcp_operation(s) and (s.attributes or {}).get(t.GEN_AI_TOOL_NAME) == tool
        ]
        assert len(calls) == 1, [(s.name, scope(s)) for s in spans]
        self.call = calls[0]
        self.outer = client_kind == "fastmcp.Client"
        assert scope(self.call) == (FASTMCP_SCOPE if self.outer else t.INSTRUMENTATION_NAME)
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
        # A query for MCP operations (kind CLIENT and mcp.method.name) answers the call span alone.
        assert [s for s in self.spans if is_mcp_operation(s)] == [call]
        numbers: dict[object, int] = {}  # each round (its request id) numbers its attempts from 1
        for attempt in self.attempts:
            attributes = attempt.attributes or {}
            number = numbers[attributes[t.JSONRPC_REQUEST_ID]] = (
                numbers.get(attributes[t.JSONRPC_REQUEST_ID], 0) + 1
            )
            assert attempt.kind is SpanKind.CLIENT and attempt.name == "POST"
            assert parent_id(attempt) == call.context.span_id
            assert t.MCP_METHOD_NAME not in attributes  # an HTTP span, not an MCP operation
            assert attributes[t.ATTEMPT] == number
            assert attributes[stable(t.HTTP_REQUEST_METHOD)] == "POST"
            # No path, no query value (a session id, a path secret): they are REDACTED.
            url = str(attributes[stable(t.URL_FULL)])
            assert re.fullmatch(r"http://127\.0\.0\.1:\d+/REDACTED(\?REDACTED)?", url), url
            if VOCABULARY:  # the stable names say where it went, and a repeat's resend count
                assert attributes[t.SERVER_ADDRESS] == "127.0.0.1" and isinstance(
                    attributes[t.SERVER_PORT], int
                )
                assert attributes.get(t.HTTP_RESEND_COUNT) == (number - 1 if number > 1 else None)
            else:  # the old names have neither, nor error.type
                assert not {t.SERVER_ADDRESS, t.HTTP_RESEND_COUNT, t.ERROR_TYPE} & set(attributes)
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
        if any(stable(t.HTTP_STATUS_CODE) in (s.attributes or {}) for s in self.attempts):  # a response came
            assert attributes[t.NETWORK_PROTOCOL_VERSION] == "1.1"
        assert attributes[t.SERVER_ADDRESS] == "127.0.0.1" and isinstance(attributes[t.SERVER_PORT], int)
        assert attributes[t.JSONRPC_REQUEST_ID] == (self.attempts[-1].attributes or {})[t.JSONRPC_REQUEST_ID]
        # The record is on the call span, whoever made it: one per round.
        assert [e for e in self.call.events if e.name == t.RECORD_EVENT]
        for key, value in expected.items():
            if self.outer and key == t.ERROR_TYPE:
                # fastmcp ends its span after the plugin wrote it, and writes error.type then, its own way.
                assert attributes.get(key) is not None, key
                continue
            assert attributes.get(key) == value, (key, attributes.get(key), value)
        if t.ERROR_TYPE in attributes:
            assert self.call.status.status_code is StatusCode.ERROR
            if not self.outer:  # fastmcp writes its own description after the plugin's status
                assert not self.call.status.description
        else:
            assert self.call.status.status_code is StatusCode.UNSET
        return attributes

    def check_server_span(self, tool: str) -> None:
        """On mcp 2.x the server's span is the call span's child (the trace context in `_meta`)."""
        if LINE != 2:
            return
        servers = [s for s in self.spans if s.kind is SpanKind.SERVER and s.name == f"tools/call {tool}"]
        assert servers and all(parent_id(s) == self.call.context.span_id for s in servers)


def check_http_names(tree: Tree, telemetry: Telemetry, http_on: bool) -> None:
    """An attempt answered with a response says its POST in the names of this process's vocabulary,
    the very names the instrumentation writes on the other POSTs of the run (initialize, tools/list)."""
    answered = [s for s in tree.attempts if t.ERROR_TYPE not in (s.attributes or {})]
    assert answered
    expected = HTTP_NAMES[VOCABULARY]
    for attempt in answered:
        assert http_names(attempt) - {t.HTTP_RESEND_COUNT} == expected, sorted(http_names(attempt))
    if http_on:
        theirs = [s for s in telemetry.spans() if scope(s) == HTTP_SCOPE and s.name == "POST"]
        assert theirs and all(http_names(s) == expected for s in theirs), [
            sorted(http_names(s)) for s in theirs
        ]


def points(
    telemetry: Telemetry, name: str, scope_name: str = t.INSTRUMENTATION_NAME
) -> list[tuple[dict[str, Any], int]]:
    """(attributes, count) of each point of the histogram `name` a scope recorded."""
    out: list[tuple[dict[str, Any], int]] = []
    data = telemetry.reader.get_metrics_data()
    for resource_metrics in data.resource_metrics if data is not None else []:
        for scope_metrics in resource_metrics.scope_metrics:
            if scope_metrics.scope.name != scope_name:
                continue
            for metric in scope_metrics.metrics:
                if metric.name == name:
                    out.extend((dict(p.attributes or {}), p.count) for p in metric.data.data_points)
    return out


def check_http_durations(telemetry: Telemetry, http_on: bool, statuses: list[int]) -> None:
    """The HTTP client duration of this process's vocabulary, recorded by the plugin for the
    attempts' POSTs in the suppressed instrumentation's place, only when that instrumentation is on,
    under the instrumentation's own attribute names."""
    durations = HTTP_DURATIONS[VOCABULARY]
    for name in (t.METRIC_HTTP_DURATION_OLD, t.METRIC_HTTP_DURATION):
        if name not in durations or not http_on:
            assert points(telemetry, name) == [], name
            continue
        status_key = durations[name]
        by_status: dict[object, int] = {}
        for attributes, count in points(telemetry, name):
            by_status[attributes.get(status_key)] = by_status.get(attributes.get(status_key), 0) + count
        expected: dict[object, int] = {}
        for status in statuses:
            expected[status or None] = expected.get(status or None, 0) + 1
        assert by_status == expected, name
        answered = {frozenset(a) for a, _ in points(telemetry, name) if a.get(status_key) == 200}
        theirs = {frozenset(a) for a, _ in points(telemetry, name, HTTP_SCOPE) if a.get(status_key) == 200}
        if answered:  # the instrumentation's names for a POST answered 200, on its own points
            assert theirs and answered == theirs, (answered, theirs)


def check_operation(
    telemetry: Telemetry, *failed: str, unknown: frozenset[str] = frozenset()
) -> list[dict[str, Any]]:
    """The MCP conventions' operation duration: one point per tools/call request, with every
    attribute the conventions give it (those of a failure when it failed), less what is `unknown`
    (no response came: no HTTP version)."""
    found = points(telemetry, t.METRIC_OPERATION_DURATION)
    expected = (OPERATION_KEYS | set(failed)) - unknown
    for attributes, count in found:
        assert count == 1
        keys = set(attributes)
        assert keys == expected, sorted(keys ^ expected)
        assert attributes[t.GEN_AI_OPERATION_NAME] == "execute_tool"
        assert (attributes[t.NETWORK_PROTOCOL_NAME], attributes[t.NETWORK_TRANSPORT]) == ("http", "tcp")
    return [attributes for attributes, _ in found]


def test_the_vocabulary_in_force_is_this_process_s() -> None:
    """The plugin reads OTEL_SEMCONV_STABILITY_OPT_IN as the contrib helpers do (the child runs below
    run this too, each under its own value)."""
    assert http_mode().value == (VOCABULARY or "default")


@pytest.mark.skipif(VOCABULARY != "", reason="started from the default vocabulary's process")
@pytest.mark.parametrize("value", ["http", "http/dup"])
def test_each_http_vocabulary_in_a_process_of_its_own(value: str) -> None:
    """The span tree in the other two vocabularies: the instrumentation reads the value once per
    process, so each runs this module's main cases in a pytest of its own."""
    env = {**os.environ, OPT_IN: value}
    repository = Path(__file__).resolve().parents[2]
    # Each client, era and the instrumentation on and off, as above.
    cases = "vocabulary_in_force or clean_call or 429_then_200 or cut_changes"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__, "-k", cases]
    done = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=600, check=False, cwd=repository
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    passed = re.search(r"(\d+) passed", done.stdout)
    assert passed is not None and int(passed.group(1)) >= 1 + 3 * len(ERAS), done.stdout[-2000:]


async def test_a_clean_call(
    server: ServerHandle,
    telemetry: Telemetry,
    instrument: Any,
    mode: str,
    httpx_instrumentation: bool,
    client_kind: str,
) -> None:
    instrument(servers=declared(server, {"search": {"on": ["throttle"]}}))
    async with app_client(client_kind, server.url, mode) as client:
        await client.list_tools()  # a protocol request: the instrumentation's POST beside the plugin's
        result = await client.call_tool("search", {"query": "q"})
    assert not is_error(result) and server.counters.executions("search") == 1
    tree = Tree(telemetry, "search", client_kind)
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
    if mode == "legacy":  # hashed, never raw (fastmcp wrote it raw: the plugin's write replaced it)
        assert str(attributes[t.MCP_SESSION_ID]).startswith("h:")
        raw = {session for session, _, _ in server.counters._executions_by_request if session}
        assert raw and attributes[t.MCP_SESSION_ID] not in raw
    else:
        assert t.MCP_SESSION_ID not in attributes
    (attempt,) = tree.attempts
    assert attempt.status.status_code is StatusCode.UNSET
    assert {
        k: (attempt.attributes or {}).get(k) for k in (stable(t.HTTP_STATUS_CODE), t.EFFECT, t.FAILURE)
    } == {
        stable(t.HTTP_STATUS_CODE): 200,
        t.EFFECT: "applied",
        t.FAILURE: None,
    }
    tree.check_server_span("search")
    check_http_names(tree, telemetry, httpx_instrumentation)
    check_http_durations(telemetry, httpx_instrumentation, [200])
    (metric,) = check_operation(telemetry)
    assert (
        metric[t.GEN_AI_TOOL_NAME] == "search"
        and metric[t.MCP_PROTOCOL_VERSION] == attributes[t.MCP_PROTOCOL_VERSION]
    )
    assert (metric[t.SERVER_ADDRESS], metric[t.SERVER_PORT]) == (
        attributes[t.SERVER_ADDRESS],
        attributes[t.SERVER_PORT],
    )


async def test_a_429_then_200(
    server: ServerHandle,
    telemetry: Telemetry,
    instrument: Any,
    mode: str,
    httpx_instrumentation: bool,
    client_kind: str,
) -> None:
    instrument(servers=declared(server, {"search": {"on": ["throttle"]}}))
    server.faults.add("search", Throttle(retry_after="0"))
    async with app_client(client_kind, server.url, mode) as client:
        await client.call_tool("search", {"query": "q"})
    assert server.counters.executions("search") == 1
    tree = Tree(telemetry, "search", client_kind)
    tree.check_shape(2, httpx_instrumentation)
    tree.check_call(**{t.SENT: 2, t.EFFECT: "unknown", t.VERDICT: "completed", t.MAY_HAVE_RUN: False})
    first, second = (dict(s.attributes or {}) for s in tree.attempts)
    assert (first[stable(t.HTTP_STATUS_CODE)], first[t.FAILURE]) == (429, "throttle")
    assert first.get(t.ERROR_TYPE) == ("429" if VOCABULARY else None)  # the old names have no error.type
    assert tree.attempts[0].status.status_code is StatusCode.ERROR
    assert (second[stable(t.HTTP_STATUS_CODE)], second[t.PERMISSION_BY], second[t.PERMISSION_ON]) == (
        200,
        "app",
        "throttle",
    )
    assert t.ERROR_TYPE not in second and tree.attempts[1].status.status_code is StatusCode.UNSET
    tree.check_server_span("search")
    check_http_names(tree, telemetry, httpx_instrumentation)
    check_http_durations(telemetry, httpx_instrumentation, [429, 200])
    check_operation(telemetry)  # one request: one point, however many attempts carried it


async def test_a_cut_changes_call(
    server: ServerHandle,
    telemetry: Telemetry,
    instrument: Any,
    mode: str,
    httpx_instrumentation: bool,
    client_kind: str,
) -> None:
    instrument(servers=declared(server, {"charge": {"changes": True, "on": ["network"]}}))
    server.faults.add("charge", DropAfterExecution())
    async with app_client(client_kind, server.url, mode) as client:
        with pytest.raises(UnknownEffectError):
            await client.call_tool("charge", {"amount": 7})
    assert server.counters.executions("charge") == 1
    tree = Tree(telemetry, "charge", client_kind)
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
    assert stable(t.HTTP_STATUS_CODE) not in attempt
    if VOCABULARY:  # the stable names' error.type: the error it got no response with
        assert str(attempt[t.ERROR_TYPE]).startswith(f"{PLUGIN_LINE.http}.")
    check_http_durations(telemetry, httpx_instrumentation, [0])
    no_response = frozenset({t.NETWORK_PROTOCOL_VERSION})
    (metric,) = check_operation(telemetry, t.ERROR_TYPE, unknown=no_response)
    assert metric[t.ERROR_TYPE] == "otel_mcp_replay.UnknownEffectError"


async def test_a_tool_error_result(
    server: ServerHandle,
    telemetry: Telemetry,
    instrument: Any,
    mode: str,
    httpx_instrumentation: bool,
    client_kind: str,
) -> None:
    instrument(servers=declared(server, {}))
    async with app_client(client_kind, server.url, mode) as client:
        result = await client.call_tool("fail", {})
    assert is_error(result)
    tree = Tree(telemetry, "fail", client_kind)
    tree.check_shape(1, httpx_instrumentation)
    tree.check_call(**{t.VERDICT: "tool-error", t.EFFECT: "applied", t.ERROR_TYPE: "tool_error"})
    assert t.RPC_RESPONSE_STATUS_CODE not in (tree.call.attributes or {})
    assert tree.attempts[0].status.status_code is StatusCode.UNSET  # the POST itself went well
    ((metric, _),) = points(telemetry, t.METRIC_OPERATION_DURATION)
    assert metric[t.ERROR_TYPE] == "tool_error" and t.RPC_RESPONSE_STATUS_CODE not in metric


async def test_a_json_rpc_error(
    server: ServerHandle,
    telemetry: Telemetry,
    instrument: Any,
    mode: str,
    httpx_instrumentation: bool,
    client_kind: str,
) -> None:
    instrument(servers=declared(server, {"search": {"on": ["throttle"]}}))
    server.faults.add("search", JsonRpcError(code=-32050))
    async with app_client(client_kind, server.url, mode) as client:
        with pytest.raises(McpError):
            await client.call_tool("search", {"query": "q"})
    tree = Tree(telemetry, "search", client_kind)
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
    (metric,) = check_operation(telemetry, *FAILED_OPERATION_KEYS)
    assert (metric[t.ERROR_TYPE], metric[t.RPC_RESPONSE_STATUS_CODE]) == ("-32050", "-32050")


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
        assert [(s.attributes or {})[stable(t.HTTP_STATUS_CODE)] for s in tree.attempts] == [429, 202]


@pytest.mark.parametrize("same_call", [True, False], ids=["the-same-call", "another-operation"])
async def test_an_outer_mcp_client_span_is_enriched_only_when_it_is_this_call_s(
    server: ServerHandle, telemetry: Telemetry, instrument: Any, same_call: bool
) -> None:
    """Any instrumentation's MCP client span of the very call (kind CLIENT, tools/call, the same tool)
    current around `mcp.Client.call_tool` is the call span; a span of another tool is only a parent."""
    instrument(servers=declared(server, {"search": {"on": ["throttle"]}}))
    tracer = telemetry.tracer_provider.get_tracer("an-app-instrumentation")
    tool = "search" if same_call else "another_tool"
    outer_attributes = {t.MCP_METHOD_NAME: t.TOOLS_CALL_METHOD, t.GEN_AI_TOOL_NAME: tool}
    async with Client(server.url, mode="legacy") as client:
        with tracer.start_as_current_span(
            f"tools/call {tool}", kind=SpanKind.CLIENT, attributes=outer_attributes
        ):
            await client.call_tool("search", {"query": "q"})
    assert server.counters.executions("search") == 1
    (outer,) = [s for s in telemetry.spans() if scope(s) == "an-app-instrumentation"]
    calls = [
        s
        for s in telemetry.spans()
        if is_mcp_operation(s) and (s.attributes or {}).get(t.GEN_AI_TOOL_NAME) == "search"
    ]
    (call,) = calls
    attempts = [s for s in telemetry.spans() if is_attempt(s)]
    assert [parent_id(s) for s in attempts] == [call.context.span_id]
    assert [e.name for e in call.events] == [t.RECORD_EVENT]
    assert (call.attributes or {})[t.VERDICT] == "completed"
    if same_call:  # enriched, ended by its maker, the plugin's own span never made
        assert call is outer or call.context.span_id == outer.context.span_id
        assert not [
            s
            for s in telemetry.spans()
            if scope(s) == t.INSTRUMENTATION_NAME and s.name.startswith("tools/call")
        ]
    else:  # the plugin's own call span, under the app's
        assert scope(call) == t.INSTRUMENTATION_NAME and parent_id(call) == outer.context.span_id
        assert t.VERDICT not in (outer.attributes or {}) and not outer.events


async def test_a_call_refused_before_it_was_sent_is_no_operation_point(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    """The operation duration times a request: the repeat guard's refusal sent none, so it has a
    call span (its record, `repeat-of-unknown`) and no point."""
    from otel_mcp_replay import RepeatRefusedError

    instrument(servers=declared(server, {"charge": {"changes": True}}))
    server.faults.add("charge", DropAfterExecution())
    async with Client(server.url, mode="legacy") as client:
        with pytest.raises(UnknownEffectError):
            await client.call_tool("charge", {"amount": 7})
        with pytest.raises(RepeatRefusedError):
            await client.call_tool("charge", {"amount": 7})
    assert server.counters.executions("charge") == 1 and server.counters.tool_posts("charge") == 1
    calls = [s for s in telemetry.spans() if is_mcp_operation(s)]
    assert [(s.attributes or {}).get(t.DECLINED) for s in calls] == [None, "repeat-of-unknown"]
    (metric,) = check_operation(telemetry, t.ERROR_TYPE, unknown=frozenset({t.NETWORK_PROTOCOL_VERSION}))
    assert metric[t.ERROR_TYPE] == "otel_mcp_replay.UnknownEffectError"
