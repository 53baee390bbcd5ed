"""Where a call's record is filed: its span's event, a log-based event, or both (the `record` setting).

The rule: a record is never lost to configuration. `span_event` (the default) files it as the call
span's event, as ever, through `record.Vouches.file`, with nothing in between. `log` files ONE log
record per record through the global LoggerProvider (OTEP 4430: events are logs): scope
`otel_mcp_replay` with the package's version, `event_name` `mcp.tool.request_attempts`, the call
span's trace and span ids (emitted in its context), severity INFO (WARN when it may have run), no
body, and the record's attributes, the very allow-listed record the span event holds; `both` files
both. Where no SDK LoggerProvider is the global one (the API's proxy or no-op), or the OpenTelemetry
installed cannot name an event (`event_name`), the record stays a span event and one WARNING per
`instrument()` says why. A record filed as a log record is vouched for to the redaction, as its span
event is.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

from opentelemetry import trace
from opentelemetry._logs import Logger, LogRecord, SeverityNumber, get_logger_provider
from opentelemetry.util.types import AttributeValue

from otel_mcp_replay import telemetry as t
from otel_mcp_replay.record import Vouches
from otel_mcp_replay.settings import BOTH, SPAN_EVENT
from otel_mcp_replay.version import __version__

_logger = logging.getLogger(__name__)

# What a record that may have run is logged at (the call failed with UnknownEffectError), else INFO.
_SEVERITY: Final = {False: SeverityNumber.INFO, True: SeverityNumber.WARN}
# OpenTelemetry 1.x's API LogRecord takes `event_name` from the release that gave events to logs.
_NAMES_EVENTS: Final = "event_name" in inspect.signature(LogRecord.__init__).parameters

FileRecord = Callable[[Any, Mapping[str, AttributeValue]], None]


def record_filing(place: str, vouches: Vouches) -> FileRecord:
    """How one `instrument()`'s calls file their records (`place`: the `record` setting): the span
    event's own filing for `span_event`, so the default pays for nothing here."""
    if place == SPAN_EVENT:
        return vouches.file
    return LogFiling(place == BOTH, vouches).file


class LogFiling:
    """Files each record as a log-based event (and as its span's event too, `with_span_event`), or,
    while that cannot be, as its span's event alone, said once."""

    __slots__ = ("_logger", "_provider", "_told", "vouches", "with_span_event")

    def __init__(self, with_span_event: bool, vouches: Vouches) -> None:
        self.with_span_event, self.vouches = with_span_event, vouches
        self._provider: object = None  # the global LoggerProvider last seen, and its logger
        self._logger: Logger | None = None
        self._told = False

    def file(self, span: Any, record: Mapping[str, AttributeValue]) -> None:
        """File `record`, call_record's, of the call whose span is `span`."""
        logger = self._logger_now()
        if logger is None or self.with_span_event:
            self.vouches.file(span, record)
        if logger is None:
            return
        severity = _SEVERITY[record[t.MAY_HAVE_RUN] is True]
        filed = _FiledLogRecord(
            self.vouches,
            record,
            timestamp=time.time_ns(),
            context=trace.set_span_in_context(span),  # the call span's trace and span ids
            severity_number=severity,
            severity_text=severity.name,
            attributes=record,
            event_name=t.RECORD_EVENT,
        )
        logger.emit(filed)

    def _logger_now(self) -> Logger | None:
        """The logger of the global LoggerProvider when it is the SDK's (it may be set after
        `instrument()`), else None, said once."""
        provider = get_logger_provider()
        if provider is self._provider:
            return self._logger
        from opentelemetry.sdk._logs import LoggerProvider as SdkLoggerProvider

        self._provider, self._logger = provider, None
        if not _NAMES_EVENTS:
            self._tell("the opentelemetry-api installed has no event_name on its log records")
        elif not isinstance(provider, SdkLoggerProvider):
            self._tell("no SDK LoggerProvider is set as the global one")
        else:
            self._logger = provider.get_logger(t.INSTRUMENTATION_NAME, __version__)
        return self._logger

    def _tell(self, why: str) -> None:
        if not self._told:
            self._told = True
            _logger.warning(
                "otel-mcp-replay: the record setting asks for log records, but %s: each call's "
                "request_attempts record stays a span event",
                why,
            )


class _FiledLogRecord(LogRecord):
    """The log record of a filed record, vouched for as the SDK stores its attributes: the SDK's
    ReadWriteLogRecord replaces them with its own bounded copy as it is made, before any processor
    sees it, so a redaction wrapper, even one running inside `emit`, reads back a vouched record."""

    def __init__(self, vouches: Vouches, built: Mapping[str, AttributeValue], **fields: Any) -> None:
        self._vouches, self._built = vouches, built
        super().__init__(**fields)

    @property  # type: ignore[override]
    def attributes(self) -> Any:
        return self._stored

    @attributes.setter
    def attributes(self, stored: Any) -> None:
        self._stored = stored
        if stored is not self._built and self._vouches.active:  # the SDK's copy of it, read back
            self._vouches.vouch_log(stored, self._built)
