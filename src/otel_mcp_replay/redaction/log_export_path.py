"""Whether the log records an app exports pass through redaction: put behind it under
auto-instrumentation.

The rule: under auto-instrumentation, whichever configurator built the global LoggerProvider (the
SDK's, opentelemetry-distro's, a vendor distro's such as aws-opentelemetry-distro's, which turns log
export on), each exporter its SimpleLogRecordProcessor or BatchLogRecordProcessor hands log records
to is put behind a RedactingLogRecordExporter when the plugin is instrumented; records still queued
are redacted as they leave. Never raises; what it cannot reach is left as it was.

How it sees and replaces: the SDK has no public way to list a LoggerProvider's processors nor to read
a log processor's exporter. The private `_multi_log_record_processor` and its
`_log_record_processors`, SimpleLogRecordProcessor's `_exporter` and BatchLogRecordProcessor's
worker's `_batch_processor._exporter` (read on each export) are read and set, guarded, and pinned by
a test that exports through them and fails when an SDK release moves them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Final

from opentelemetry.sdk._logs import LoggerProvider as SdkLoggerProvider
from opentelemetry.sdk._logs.export import (
    BatchLogRecordProcessor,
    LogRecordExporter,
    SimpleLogRecordProcessor,
)

from otel_mcp_replay.redaction.logs import RedactingLogRecordExporter, RedactingLogRecordProcessor

_logger = logging.getLogger(__name__)

_MAX_DEPTH: Final = 8  # nested multi-processors deeper than this are not read


def redact_log_exporters(
    logger_provider: object, redacting: Callable[[LogRecordExporter], RedactingLogRecordExporter]
) -> None:
    """Put each exporter `logger_provider` hands log records to without redaction behind
    `redacting(it)`, in its processor's place. Never raises (it runs inside `instrument()`)."""
    try:
        if not isinstance(logger_provider, SdkLoggerProvider):
            return  # a provider that is not the SDK's exports nothing by itself
        for holder in list(_holders(getattr(logger_provider, "_multi_log_record_processor", None), 0)):
            exporter = getattr(holder, "_exporter", None)
            if isinstance(exporter, LogRecordExporter) and not isinstance(
                exporter, RedactingLogRecordExporter
            ):
                holder._exporter = redacting(exporter)  # type: ignore[attr-defined]
    except Exception:  # a provider or processor of unexpected shape: left as it was
        _logger.debug("otel-mcp-replay could not redact the log export path", exc_info=True)


def _holders(processor: object, depth: int) -> Iterator[object]:
    """The objects that hold an exporting processor's exporter as `_exporter`."""
    if processor is None or isinstance(processor, RedactingLogRecordProcessor) or depth > _MAX_DEPTH:
        return
    children = getattr(processor, "_log_record_processors", None)
    if isinstance(children, (tuple, list)):  # Synchronous- and ConcurrentMultiLogRecordProcessor
        for child in children:
            yield from _holders(child, depth + 1)
    elif isinstance(processor, SimpleLogRecordProcessor):
        yield processor
    elif isinstance(processor, BatchLogRecordProcessor):
        yield getattr(processor, "_batch_processor", None)  # the SDK's worker, read on each export
