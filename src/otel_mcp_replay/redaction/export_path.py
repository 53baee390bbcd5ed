"""Whether the spans an app exports pass through redaction: put behind it under auto-instrumentation,
else said once.

The rule: under auto-instrumentation (`opentelemetry-instrument`), whichever configurator built the
global TracerProvider (the SDK's, opentelemetry-distro's, a vendor distro's such as
aws-opentelemetry-distro's), each exporter its exporting processors hand spans to is put behind a
RedactingSpanExporter when the plugin is instrumented (`redact_exporters`): spans still queued are
redacted as they leave. What cannot be put behind it (an exporter held where this cannot reach it,
a processor of another kind), and in apps that set up tracing in code with a bare exporter, the
plugin logs ONE WARNING naming the fix (OTEL_PYTHON_CONFIGURATOR=mcp_replay, or under a
configuration file the exporter `mcp_replay_redacting` around the file's exporter, or wrapping the
exporter) and never raises.

How it sees: the exporters of SimpleSpanProcessor and BatchSpanProcessor through their public
`span_exporter`. The SDK has no public way to list a TracerProvider's processors: the private
`_active_span_processor` and its `_span_processors` are read, guarded, and pinned by a test that
fails when an SDK release moves them. How it replaces: SimpleSpanProcessor's public `span_exporter`,
and the exporter BatchSpanProcessor's worker reads on each export (`_batch_processor._exporter`,
private: pinned by a test that exports through it); each replacement is checked by reading
`span_exporter` back. A processor of another kind (no `span_exporter`) is not judged: it may
export, or not. A provider that is not the SDK's exports nothing by itself.
"""

from __future__ import annotations

import logging
import os
import weakref
from collections.abc import Callable, Iterator
from typing import Final

from opentelemetry import trace
from opentelemetry.sdk.trace import ConcurrentMultiSpanProcessor, SynchronousMultiSpanProcessor
from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter

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
    return [exporter for _, exporter in _unredacted(tracer_provider)]


def redact_exporters(
    tracer_provider: object, redacting: Callable[[SpanExporter], RedactingSpanExporter]
) -> None:
    """Put each exporter `tracer_provider` hands spans to without redaction behind `redacting(it)`,
    in its processor's place (those left as they were are what `check_export_path` then names).
    Never raises (it runs inside `instrument()`)."""
    try:
        for processor, exporter in _unredacted(tracer_provider):
            if isinstance(exporter, SpanExporter):
                _replace(processor, exporter, redacting(exporter))
    except Exception:  # a provider or processor of unexpected shape: left to the check to name
        _logger.debug("otel-mcp-replay could not redact the span export path", exc_info=True)


def _replace(processor: object, exporter: SpanExporter, redacting: RedactingSpanExporter) -> None:
    if isinstance(processor, SimpleSpanProcessor) and vars(processor).get("span_exporter") is exporter:
        processor.span_exporter = redacting
    elif isinstance(processor, BatchSpanProcessor):
        worker = getattr(processor, "_batch_processor", None)  # the SDK's, read on each export
        if getattr(worker, "_exporter", None) is exporter:
            worker._exporter = redacting  # type: ignore[union-attr]
    if getattr(processor, "span_exporter", None) is not redacting:
        _logger.debug("otel-mcp-replay could not put %s behind redaction", type(exporter).__name__)


def _unredacted(tracer_provider: object) -> list[tuple[object, object]]:
    if not isinstance(tracer_provider, SdkTracerProvider):
        return []
    return list(_walk(getattr(tracer_provider, "_active_span_processor", None), 0))


def _walk(processor: object, depth: int) -> Iterator[tuple[object, object]]:
    if processor is None or isinstance(processor, RedactingSpanProcessor) or depth > _MAX_DEPTH:
        return
    if isinstance(processor, (SynchronousMultiSpanProcessor, ConcurrentMultiSpanProcessor)):
        children = getattr(processor, "_span_processors", ())
        for child in children if isinstance(children, (tuple, list)) else ():
            yield from _walk(child, depth + 1)
        return
    exporter = getattr(processor, "span_exporter", None)
    if exporter is not None and not isinstance(exporter, RedactingSpanExporter):
        yield processor, exporter


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
