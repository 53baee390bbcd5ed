"""The run's one global tracer provider, emptied for each test, and the readers of what the plugin
wrote on it (its records and attempt spans)."""

from __future__ import annotations

from typing import Any

import anyio
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

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


# The HTTP names the contrib httpx instrumentation writes on a POST that a response answered, in each
# vocabulary OTEL_SEMCONV_STABILITY_OPT_IN selects (its source, 0.60b0 to 0.66b2): an attempt span,
# which stands in for its span, writes exactly these. The old names are the default's.
OLD_HTTP_STATUS = "http.status_code"
OLD_HTTP_NAMES = frozenset(("http.method", "http.url", OLD_HTTP_STATUS))
STABLE_HTTP_NAMES = frozenset(
    (
        "http.request.method",
        "url.full",
        "server.address",
        "server.port",
        "network.peer.address",
        "network.peer.port",
        "http.response.status_code",
        "network.protocol.version",
    )
)
# `http/dup`: both, and the old names of the facts the instrumentation writes in the stable ones only.
HTTP_NAMES = {
    "": OLD_HTTP_NAMES,
    "http": STABLE_HTTP_NAMES,
    "http/dup": OLD_HTTP_NAMES | STABLE_HTTP_NAMES | {"http.host", "net.peer.port", "http.flavor"},
}


def records(telemetry: Telemetry) -> list[dict[str, Any]]:
    """Every request_attempts record, in the order the calls ended."""
    from otel_mcp_replay import telemetry as t

    out = []
    for span in telemetry.spans():
        for event in span.events:
            if event.name == t.RECORD_EVENT:
                out.append(dict(event.attributes or {}))
    return out


def is_attempt(span: ReadableSpan) -> bool:
    """An attempt span: the plugin's HTTP client span of one POST of a tool call."""
    from otel_mcp_replay import telemetry as t

    scope = span.instrumentation_scope
    return scope is not None and scope.name == t.INSTRUMENTATION_NAME and t.ATTEMPT in (span.attributes or {})


def attempt_spans(telemetry: Telemetry, request_id: str | None = None) -> list[ReadableSpan]:
    from otel_mcp_replay import telemetry as t

    spans = [s for s in telemetry.spans() if is_attempt(s)]
    if request_id is not None:
        spans = [s for s in spans if (s.attributes or {}).get(t.JSONRPC_REQUEST_ID) == request_id]
    return sorted(spans, key=lambda s: (s.attributes or {}).get(t.ATTEMPT, 0))


def the_record(telemetry: Telemetry) -> dict[str, Any]:
    found = records(telemetry)
    assert len(found) == 1, f"expected one record, found {len(found)}"
    return found[0]


async def decided_attempts(telemetry: Telemetry, count: int = 1) -> list[ReadableSpan]:
    """The attempt spans, once `count` have ended. An attempt's span ends when its series decides
    on it: repeated (its wait on the span) or not (declined, or the answer): one ended without a
    wait shows the series done with it, so a test counts what was sent instead of sleeping past
    the wait. The 10 s bound guards a hang only; it decides nothing."""
    with anyio.fail_after(10):
        while len(attempt_spans(telemetry)) < count:
            await anyio.sleep(0.01)
    return attempt_spans(telemetry)
