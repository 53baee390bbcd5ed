"""redact_log_exporters: a LoggerProvider's exporting processors put behind RedactingLogRecordExporter.

A real SDK LoggerProvider with SimpleLogRecordProcessor and BatchLogRecordProcessor, each into its own
InMemoryLogExporter: after the call, each log record leaves redacted, a record still queued in the
batch too. The exporters sit in private places of the SDK (`_multi_log_record_processor`,
`_log_record_processors`, `_exporter`, `_batch_processor._exporter`): exporting through them here
fails when an SDK release moves them.
"""

from __future__ import annotations

from typing import Any

from opentelemetry._logs import LogRecord
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import (
    BatchLogRecordProcessor,
    InMemoryLogExporter,
    LogRecordExporter,
    SimpleLogRecordProcessor,
)

from otel_mcp_replay.redaction import (
    MASK,
    RedactingLogRecordExporter,
    RedactingLogRecordProcessor,
    RedactionRules,
)
from otel_mcp_replay.redaction.log_export_path import redact_log_exporters

CANARY = "CANARY-5d21"


def redacting(exporter: LogRecordExporter) -> RedactingLogRecordExporter:
    return RedactingLogRecordExporter(exporter, RedactionRules(), on_refused=lambda: None)


def emit(provider: LoggerProvider, body: str) -> None:
    provider.get_logger("app").emit(LogRecord(body=body, attributes={"app.db.password": CANARY}))


def passwords(exporter: InMemoryLogExporter) -> list[Any]:
    return [(log.log_record.attributes or {}).get("app.db.password") for log in exporter.get_finished_logs()]


def test_the_sdk_keeps_the_processors_and_exporters_where_they_are_read() -> None:
    exporter = InMemoryLogExporter()
    simple, batch = SimpleLogRecordProcessor(exporter), BatchLogRecordProcessor(exporter)
    provider = LoggerProvider()
    provider.add_log_record_processor(simple)
    provider.add_log_record_processor(batch)
    assert provider._multi_log_record_processor._log_record_processors == (simple, batch)
    assert simple._exporter is exporter
    assert batch._batch_processor._exporter is exporter
    provider.shutdown()


def test_both_sdk_processors_exporters_are_put_behind_redaction() -> None:
    simple_out, batch_out = InMemoryLogExporter(), InMemoryLogExporter()
    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(simple_out))
    provider.add_log_record_processor(BatchLogRecordProcessor(batch_out, schedule_delay_millis=60_000))
    emit(provider, "queued before")  # simple: exported at once, as it was; batch: redacted as it leaves
    redact_log_exporters(provider, redacting)
    emit(provider, "after")
    provider.force_flush()
    assert passwords(simple_out) == [CANARY, MASK]
    assert passwords(batch_out) == [MASK, MASK]
    redact_log_exporters(provider, redacting)  # a second instrument(): not wrapped twice
    emit(provider, "again")
    provider.force_flush()
    assert passwords(simple_out) == [CANARY, MASK, MASK]
    provider.shutdown()


def test_redacted_paths_are_left_and_it_never_raises() -> None:
    out = InMemoryLogExporter()
    given = RedactingLogRecordProcessor(
        SimpleLogRecordProcessor(out), RedactionRules(), on_refused=lambda: None
    )
    provider = LoggerProvider()
    provider.add_log_record_processor(given)
    redact_log_exporters(provider, redacting)
    assert given.inner._exporter is out  # behind a redacting processor already: not touched

    class Odd(LoggerProvider):
        @property
        def _multi_log_record_processor(self) -> Any:
            raise RuntimeError("odd")

        @_multi_log_record_processor.setter
        def _multi_log_record_processor(self, value: Any) -> None:
            pass

    redact_log_exporters(Odd(shutdown_on_exit=False), redacting)
    redact_log_exporters(object(), redacting)
    provider.shutdown()
