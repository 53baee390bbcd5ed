"""The two wrappers that put redaction in front of a log record processor or a log record exporter.

The rule: the wrapped processor or exporter is handed a log record only after the spans' rule engine
(rules.RedactionRules) has looked at it: its attributes as a span's (the user's keys and values,
sensitive keys, URLs, session ids hashed, other instrumentations' content masked, the task ids seen),
its body's text through the text rules, a structured body's or attribute's strings alike (read to a
bounded depth and size: past it, masked whole; bytes, which no text rule can read, masked), and a
record with `event_name` `mcp.tool.request_attempts` allow-listed (record.py) or refused whole, a
body included. It is handed a redacted copy, or the very same record when no rule changed anything;
a record whose redaction fails is dropped, never passed on raw. `vouches`, `task_ids` and
`on_refused` as for the span wrappers (wrappers.py); the plugin's own log records are vouched for
(record.Vouches.vouch_log), so they are not checked cell by cell again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, cast

from opentelemetry._logs import LogRecord
from opentelemetry.sdk._logs import (
    LogRecordLimits,
    LogRecordProcessor,
    ReadableLogRecord,
    ReadWriteLogRecord,
)
from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult
from opentelemetry.sdk.resources import Resource

from otel_mcp_replay import telemetry as t
from otel_mcp_replay.record import Vouches
from otel_mcp_replay.redaction.rules import RedactionRules, without_task_ids
from otel_mcp_replay.redaction.task_ids import TaskIds
from otel_mcp_replay.redaction.text import MASK
from otel_mcp_replay.redaction.wrappers import Wrapper

# A structured value (a body, an attribute's map or list) is read this deep and this far, no
# further: past either bound it is masked whole, never passed on unread.
MAX_DEPTH: Final = 8
MAX_VALUES: Final = 4096

_SCALARS: Final = (str, int, float, bool, type(None))
AnyLogRecord = ReadableLogRecord | ReadWriteLogRecord


class RedactedLogRecord(LogRecord):
    """A copy of an API log record (every field its SDK gave it), its attributes, body and event
    name redacted. A record already redacted keeps its session hashes (hashing twice breaks
    correlation)."""

    def __init__(self, original: LogRecord, attributes: Any, body: Any, event_name: str | None) -> None:
        # Not LogRecord.__init__: that reads the current context; this is the original, field for field.
        self.__dict__.update(vars(original))
        self.attributes, self.body, self.event_name = attributes, body, event_name


def redact_log(
    rules: RedactionRules, log: AnyLogRecord, vouches: Vouches | None, task_ids: TaskIds | None
) -> tuple[AnyLogRecord, int]:
    """`log` redacted (itself when no rule changed anything), and how many records were refused."""
    record = log.log_record
    hash_sessions = not isinstance(record, RedactedLogRecord)
    if record.event_name == t.RECORD_EVENT:
        found = None if record.body is not None else rules.record(record.attributes, vouched_in(vouches))
        if found is None:  # refused whole: an event of that name with no values at all
            return _copy(log, RedactedLogRecord(record, {}, None, t.RECORD_REFUSED_EVENT)), 1
        if not found[1]:
            return log, 0
        return _copy(log, RedactedLogRecord(record, found[0], None, record.event_name)), 0
    attributes = _attributes(rules, record.attributes, hash_sessions, task_ids)
    body = _Reading(rules, task_ids, hash_sessions).value(None, record.body, 0)
    if attributes is None and body is record.body:
        return log, 0
    new_attributes = record.attributes if attributes is None else attributes
    return _copy(log, RedactedLogRecord(record, new_attributes, body, record.event_name)), 0


def vouched_in(vouches: Vouches | None) -> Callable[[object], dict[str, Any] | None] | None:
    return None if vouches is None else vouches.log_record


def _attributes(
    rules: RedactionRules, attributes: Any, hash_sessions: bool, task_ids: TaskIds | None
) -> dict[str, Any] | None:
    """A redacted copy of a log record's attributes, or None when no rule changed any of them."""
    if not attributes:
        return None
    structured = {key for key, value in attributes.items() if not _flat(value)}
    if not structured:  # a span's kind of attributes: the engine in one pass
        new = rules.attributes(attributes, hash_sessions)
    else:
        reading = _Reading(rules, task_ids, hash_sessions)
        new = {key: reading.value(key, value, 0) for key, value in attributes.items()}
        if new == dict(attributes):
            new = None
    if task_ids:
        new = without_task_ids(task_ids, attributes if new is None else new) or new
    return new


def _flat(value: object) -> bool:
    """A value a span attribute may hold: a scalar, or a sequence of scalars."""
    if isinstance(value, _SCALARS):
        return True
    return isinstance(value, (tuple, list)) and all(isinstance(item, _SCALARS) for item in value)


class _Reading:
    """One structured value read (a body, or a log record's attributes holding maps), within the
    bounds: each string under a key through that key's rules, else the text rules."""

    def __init__(self, rules: RedactionRules, task_ids: TaskIds | None, hash_sessions: bool) -> None:
        self.rules, self.task_ids, self.hash_sessions = rules, task_ids, hash_sessions
        self.left = MAX_VALUES

    def value(self, key: str | None, value: Any, depth: int) -> Any:
        """`value` (under `key`; None: a body's, free text) redacted: itself when unchanged."""
        self.left -= 1
        if self.left < 0 or depth > MAX_DEPTH:
            return MASK
        if isinstance(value, (bytes, bytearray)):
            return MASK  # no text rule can read it
        if isinstance(value, Mapping):
            if key is not None and self._masks(key):
                return MASK
            return {k: self.value(k, v, depth + 1) if type(k) is str else MASK for k, v in value.items()}
        if isinstance(value, (tuple, list)):
            if key is not None and not all(isinstance(item, _SCALARS) for item in value) and self._masks(key):
                return MASK
            items = [self.value(key, item, depth + 1) for item in value]
            unchanged = all(a is b for a, b in zip(items, value, strict=True))
            return value if unchanged else tuple(items) if isinstance(value, tuple) else items
        return self._scalar(key, value)

    def _scalar(self, key: str | None, value: Any) -> Any:
        if key is None:
            new = self.rules.text(value) if isinstance(value, str) else value
        else:
            found = self.rules.attributes({key: value}, self.hash_sessions)
            new = value if found is None else found[key]
        if self.task_ids and isinstance(new, str):
            new = self.task_ids.masked(new)
        return new

    def _masks(self, key: str) -> bool:
        """The rules mask whatever `key` holds (a sensitive key's map or list is masked whole)."""
        found = self.rules.attributes({key: ""}, self.hash_sessions)
        return found is not None and found[key] == MASK


def _copy(log: AnyLogRecord, record: RedactedLogRecord) -> AnyLogRecord:
    """`log` holding `record`, of `log`'s own kind: its attributes bounded by its limits as the SDK
    bounds them, and the count of those the SDK dropped kept."""
    dropped, scope = log.dropped_attributes, log.instrumentation_scope
    resource = log.resource if log.resource is not None else Resource.create({})  # as the SDK's processors
    limits = log.limits if log.limits is not None else LogRecordLimits()
    writable = ReadWriteLogRecord(record, resource, scope, limits)
    if dropped:
        cast(Any, record.attributes).dropped += dropped
    if isinstance(log, ReadWriteLogRecord):
        return writable
    return ReadableLogRecord(record, resource, scope, log.limits)


class _LogWrapper(Wrapper):
    """What both log wrappers share: what they redact, and how (redact_log)."""

    what = "log record"

    def _applier(self) -> Callable[[Any, Vouches | None, TaskIds | None], tuple[Any, int]]:
        rules = self.rules
        return lambda log, vouches, task_ids: redact_log(rules, log, vouches, task_ids)


class RedactingLogRecordProcessor(_LogWrapper, LogRecordProcessor):
    """`RedactingLogRecordProcessor(inner, rules=None, *, vouches=None, task_ids=None,
    on_refused=None)`: a LogRecordProcessor that hands `inner` a redacted copy of each log record
    emitted (`rules` None: the environment's, as RedactingSpanProcessor reads them).

    Redaction runs in `on_emit`, on the thread that emits: behind a BatchLogRecordProcessor, prefer
    `BatchLogRecordProcessor(RedactingLogRecordExporter(exporter))`, which redacts on the export
    thread. `vouches`, `task_ids` and `on_refused` as the span wrappers take them (wrappers.py);
    `refused_count` counts the refused records.
    """

    def on_emit(self, log_record: ReadWriteLogRecord) -> None:
        redacted = self._redact(log_record)
        if redacted is not None:
            self.inner.on_emit(redacted)


class RedactingLogRecordExporter(_LogWrapper, LogRecordExporter):
    """`RedactingLogRecordExporter(inner, ...)`: a LogRecordExporter that hands `inner` a redacted
    copy of each log record it is given (the arguments of RedactingLogRecordProcessor)."""

    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        redacted = [out for out in map(self._redact, batch) if out is not None]
        if not redacted and batch:
            return LogRecordExportResult.SUCCESS  # all dropped: nothing left to send
        result: LogRecordExportResult = self.inner.export(redacted)
        return result
