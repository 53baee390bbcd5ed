"""Whether the spans an app exports pass through redaction, said once when they do not.

The rule: when the SDK TracerProvider the plugin is instrumented with hands spans to an exporter
that is not behind RedactingSpanExporter or RedactingSpanProcessor, the plugin logs ONE WARNING
naming the fix (OTEL_PYTHON_CONFIGURATOR=mcp_replay, or under a configuration file the exporter
`mcp_replay_redacting` around the file's exporter, or wrapping the exporter) and never raises.
It happens under `opentelemetry-instrument` when another configurator ran (opentelemetry-distro's
is found first, depending on install order, when OTEL_PYTHON_CONFIGURATOR is not set), and in apps
that set up tracing in code with a bare exporter.

How it sees: the exporters of SimpleSpanProcessor and BatchSpanProcessor through their public
`span_exporter`. The SDK has no public way to list a TracerProvider's processors: the private
`_active_span_processor` and its `_span_processors` are read, guarded, and pinned by a test that
fails when an SDK release moves them. A processor of another kind (no `span_exporter`) is not
judged: it may export, or not. A provider that is not the SDK's exports nothing by itself.
"""

from __future__ import annotations

import logging
import os
import weakref
from collections.abc import Iterator
from typing import Final

from opentelemetry import trace
from opentelemetry.sdk.trace import ConcurrentMultiSpanProcessor, SynchronousMultiSpanProcessor
from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider

from otel_mcp_replay.redaction.wrappers import RedactingSpanExporter, RedactingSpanProcessor

_logger = logging.getLogger(__name__)

FIX: Final = "OTEL_PYTHON_CONFIGURATOR=mcp_replay"
# Under a configuration file the SDK builds the file's exporters: the fix is in the file.
FILE_FIX: Final = (
    "name the exporter mcp_replay_redacting around each exporter of the OTEL_CONFIG_FILE "
    "(exporter: {mcp_replay_redacting: {otlp_http: {...}}})"
)
_MAX_DEPTH: Final = 8  # nested multi-processors deeper than this are not read


def unredacted_exporters(tracer_provider: object) -> list[object]:
    """The exporters `tracer_provider` hands spans to without redaction (empty: none seen)."""
    if not isinstance(tracer_provider, SdkTracerProvider):
        return []
    return list(_walk(getattr(tracer_provider, "_active_span_processor", None), 0))


def _walk(processor: object, depth: int) -> Iterator[object]:
    if processor is None or isinstance(processor, RedactingSpanProcessor) or depth > _MAX_DEPTH:
        return
    if isinstance(processor, (SynchronousMultiSpanProcessor, ConcurrentMultiSpanProcessor)):
        children = getattr(processor, "_span_processors", ())
        for child in children if isinstance(children, (tuple, list)) else ():
            yield from _walk(child, depth + 1)
        return
    exporter = getattr(processor, "span_exporter", None)
    if exporter is not None and not isinstance(exporter, RedactingSpanExporter):
        yield exporter


def check_export_path(
    tracer_provider: object | None = None, *, told: weakref.WeakSet[object] | None = None
) -> None:
    """Log one WARNING when spans of `tracer_provider` (None: the global one) reach an exporter
    without redaction, naming those not yet in `told` and adding them (the instrumentor's set: each
    exporter is told once, however often instrument() runs). Never raises (it runs inside
    `instrument()`)."""
    try:
        provider = trace.get_tracer_provider() if tracer_provider is None else tracer_provider
        fresh = unredacted_exporters(provider)
        if told is not None:  # once per exporter: instrument() may run many times
            fresh = [exporter for exporter in fresh if exporter not in told]
            told.update(fresh)
        names = sorted({type(exporter).__name__ for exporter in fresh})
    except Exception:  # a provider or processor of unexpected shape: nothing said is better than a crash
        _logger.debug("otel-mcp-replay could not check the span export path", exc_info=True)
        return
    if names:
        _logger.warning(
            "otel-mcp-replay: spans are exported by %s without redaction (credentials in URLs, captured "
            "authorization headers and raw mcp-session-id values leave as they are); %s, or wrap the "
            "exporter in RedactingSpanExporter",
            ", ".join(names),
            f"in the file {FILE_FIX}"
            if os.environ.get("OTEL_CONFIG_FILE", "").strip()
            else f"under opentelemetry-instrument set {FIX}",
        )
