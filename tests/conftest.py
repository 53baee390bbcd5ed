"""Shared fixtures: real OTel SDK pipelines in memory, the demo server, the instrumentor switched on
and off, and the one builder of a server's declaration."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Iterator, Mapping
from importlib.metadata import version
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from harness.client import ERAS, Client, McpError, http
from harness.sdk import LINE

if sys.version_info < (3, 11):  # pragma: no cover - Python 3.10
    from exceptiongroup import BaseExceptionGroup

# LangChain's adapters pin mcp < 2: their test runs in the mcp 1.30 environment (scripts/test-lines).
collect_ignore = ["frameworks/test_langchain.py"] if int(version("mcp").split(".")[0]) >= 2 else []


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# One global tracer provider for the whole run: the mcp SDK's own spans (tracer "mcp-python-sdk")
# and the httpx2 instrumentor's go to the global provider, and a global is set only once.
_EXPORTER = InMemorySpanExporter()
_PROVIDER = TracerProvider()
_PROVIDER.add_span_processor(SimpleSpanProcessor(_EXPORTER))
trace.set_tracer_provider(_PROVIDER)


class Telemetry:
    """The global tracer provider (emptied for each test) and a meter provider the test can read."""

    def __init__(self) -> None:
        self.exporter = _EXPORTER
        self.exporter.clear()
        self.tracer_provider = _PROVIDER
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def metrics(self) -> dict[str, list[tuple[dict[str, Any], float]]]:
        """Metric name -> [(attributes, value or count)]."""
        out: dict[str, list[tuple[dict[str, Any], float]]] = {}
        data = self.reader.get_metrics_data()
        if data is None:
            return out
        for resource_metrics in data.resource_metrics:
            for scope_metrics in resource_metrics.scope_metrics:
                for metric in scope_metrics.metrics:
                    for point in metric.data.data_points:
                        value = getattr(point, "value", None)
                        if value is None:
                            value = getattr(point, "count", 0)
                        out.setdefault(metric.name, []).append((dict(point.attributes or {}), float(value)))
        return out


@pytest.fixture(params=ERAS)
def mode(request: pytest.FixtureRequest) -> str:
    """Each protocol era the installed line speaks: session ids (legacy) and, on 2.x, per-message
    headers (2026-07-28)."""
    return str(request.param)


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[Any]:
    """The demo MCP server on 127.0.0.1: streamable HTTP (SSE-framed answers), or, in a module that
    sets SERVER_TRANSPORTS, each transport it names (see pytest_generate_tests)."""
    from harness.server import running_server

    with running_server(getattr(request, "param", "streamable")) as handle:
        yield handle


def declared(
    server: Any, tools: Mapping[str, Any], policy: str = "app-authorized", **more: Any
) -> dict[str, Any]:
    """The `servers` declaration of one server's URL: its policy, its tools and any other field
    (`deduplicates`, `label`, ...)."""
    return {server.url: {"policy": policy, "tools": dict(tools), **more}}


@pytest.fixture
def telemetry() -> Telemetry:
    return Telemetry()


@pytest.fixture
def instrument(telemetry: Telemetry) -> Iterator[Callable[..., Any]]:
    """instrument(**settings): the plugin on, with the test's providers; off again after the test."""
    from otel_mcp_replay import McpReplayInstrumentor

    instrumentor = McpReplayInstrumentor()

    def on(**settings: Any) -> Any:
        if instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.uninstrument()
        instrumentor.instrument(
            tracer_provider=telemetry.tracer_provider, meter_provider=telemetry.meter_provider, **settings
        )
        return instrumentor

    yield on
    if instrumentor.is_instrumented_by_opentelemetry:
        instrumentor.uninstrument()


# -- reading what the plugin wrote --


def records(telemetry: Telemetry) -> list[dict[str, Any]]:
    """Every request_attempts record, in the order the calls ended."""
    from otel_mcp_replay import telemetry as t

    out = []
    for span in telemetry.spans():
        for event in span.events:
            if event.name == t.RECORD_EVENT:
                out.append(dict(event.attributes or {}))
    return out


def attempt_spans(telemetry: Telemetry, request_id: str | None = None) -> list[ReadableSpan]:
    from otel_mcp_replay import telemetry as t

    spans = [s for s in telemetry.spans() if is_attempt(s)]
    if request_id is not None:
        spans = [s for s in spans if (s.attributes or {}).get(t.JSONRPC_REQUEST_ID) == request_id]
    return sorted(spans, key=lambda s: (s.attributes or {}).get(t.ATTEMPT, 0))


def is_attempt(span: ReadableSpan) -> bool:
    """An attempt span: the plugin's HTTP client span of one POST of a tool call."""
    from otel_mcp_replay import telemetry as t

    scope = span.instrumentation_scope
    return scope is not None and scope.name == t.INSTRUMENTATION_NAME and t.ATTEMPT in (span.attributes or {})


def the_record(telemetry: Telemetry) -> dict[str, Any]:
    found = records(telemetry)
    assert len(found) == 1, f"expected one record, found {len(found)}"
    return found[0]


# -- what the SDK raises --


async def refused_call(
    url: str, tool: str, arguments: dict[str, Any], status: int, mode: str | None = None
) -> BaseException:
    """`refused` for one `call_tool(tool, arguments)`."""
    return await refused(url, status, lambda client: client.call_tool(tool, arguments), mode)


async def refused(
    url: str, status: int, call: Callable[[Any], Awaitable[object]], mode: str | None = None
) -> BaseException:
    """`call(client)` on a new session, refused by the server with HTTP `status` and not repeated:
    the error the SDK alone raises for it. On 2.x the call's own error (the session lives). On 1.x
    the SDK raises for any non-2xx in its transport's task (docs/mcp-lines.md): the session dies, the
    call is cancelled, and the session's `async with` raises `ExceptionGroup(httpx.HTTPStatusError)`,
    which keeps the server's status."""
    if LINE == 2:
        async with Client(url, mode=mode) as client:
            with pytest.raises(McpError) as raised:
                await call(client)
        return raised.value
    with pytest.raises(BaseExceptionGroup) as torn:
        async with Client(url, mode=mode) as client:
            await call(client)
    assert [(type(e), e.response.status_code) for e in leaves(torn.value)] == [(http.HTTPStatusError, status)]
    return torn.value


def leaves(group: BaseExceptionGroup[BaseException]) -> list[Any]:
    out: list[Any] = []
    for exc in group.exceptions:
        out.extend(leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return out


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A module's `SERVER_TRANSPORTS = ("streamable", "sse")` runs each of its tests that uses the
    `server` fixture once on each transport."""
    transports = getattr(metafunc.module, "SERVER_TRANSPORTS", None)
    if transports and "server" in metafunc.fixturenames:
        metafunc.parametrize("server", transports, indirect=True)


def pytest_addoption(parser: pytest.Parser) -> None:
    """`--long`: the reliability suite's long run (at least 2,000 calls); CI runs a quick size."""
    parser.addoption("--long", action="store_true", default=False, help="run the long reliability suite")
