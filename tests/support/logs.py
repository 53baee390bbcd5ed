"""The run's one global SDK LoggerProvider (set on first use: a global is set only once), its log
records read in memory, and the plugin's records among them (the log-based events)."""

from __future__ import annotations

from typing import Any

from opentelemetry import _logs
from opentelemetry.sdk._logs import LoggerProvider, ReadableLogRecord
from opentelemetry.sdk._logs.export import InMemoryLogExporter, SimpleLogRecordProcessor

from otel_mcp_replay import telemetry as t

_EXPORTER = InMemoryLogExporter()
_PROVIDER: LoggerProvider | None = None


class Logs:
    """The global SDK LoggerProvider (set by the first Logs of the run, emptied for each)."""

    def __init__(self) -> None:
        global _PROVIDER
        if _PROVIDER is None:
            _PROVIDER = LoggerProvider()
            _PROVIDER.add_log_record_processor(SimpleLogRecordProcessor(_EXPORTER))
            _logs.set_logger_provider(_PROVIDER)
        self.provider = _PROVIDER
        self.exporter = _EXPORTER
        self.exporter.clear()

    def emitted(self) -> list[ReadableLogRecord]:
        return list(self.exporter.get_finished_logs())

    def records(self) -> list[ReadableLogRecord]:
        """The plugin's log-based events (event_name mcp.tool.request_attempts), in order."""
        return [log for log in self.emitted() if log.log_record.event_name == t.RECORD_EVENT]


def attributes_of(log: ReadableLogRecord) -> dict[str, Any]:
    return dict(log.log_record.attributes or {})
