"""The `mcp.tool.request_attempts` record and its allow-list.

The rule: the record is the allow-list and nothing else. Its keys are telemetry.RECORD_KEYS; each
holds a number, a bool, one of this library's own words, the endpoint's declared label or bare
origin, the tool's name or the request id. Anything else in a record (a key nobody listed, a word
outside its set, a URL with a path, ragged columns, a value of an unexpected type) refuses it
whole: it is never trimmed into something it did not say. Values are read as data: only exact
built-in types are accepted, so no method a filing carries ever runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, cast

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.util.types import AttributeValue

from otel_mcp_replay import telemetry as t
from otel_mcp_replay.declaration import LABEL, ORIGIN, Policy
from otel_mcp_replay.law import CallVerdict, Effect

# OTLP carries int64: a larger int would fail the export of the whole batch, not just this record.
_INT64_MAX: Final = 2**63 - 1
# A tool name or request id longer than this is not a name: refuse rather than carry it.
MAX_TEXT_LEN: Final = 256

_WORDS_FAILURE: Final = frozenset(("", *t.FAILURES))
_WORDS_EFFECT: Final = frozenset(t.EFFECTS)
_WORDS_PERMISSION: Final = frozenset(t.ATTEMPT_PERMISSIONS)


@dataclass(frozen=True, slots=True)
class AttemptRow:
    """One HTTP attempt of a `tools/call`, as its record lists it."""

    status: int  # 0 when no response came
    failure: str  # "" when a JSON-RPC result came back, else a failure kind
    effect: Effect
    permission: str  # "first" | "app" | "compatibility" | "adapter"
    wait_ms: int  # the wait before the NEXT attempt (0 if none)


class RecordRefused(ValueError):
    """A record outside the allow-list. The message names the key, never a value."""

    def __init__(self, field: str) -> None:
        super().__init__(f"request_attempts record refused at {field}")
        self.field = field


def is_endpoint(value: object) -> bool:
    """A declared label `[A-Za-z0-9._-]{1,64}`, or a bare origin `scheme://host:port`."""
    if type(value) is not str:
        return False
    if LABEL.fullmatch(value):
        return True
    origin = ORIGIN.fullmatch(value)
    return origin is not None and 1 <= int(origin.group(1)) <= 65535


def is_sane_text(value: object, *, allow_empty: bool = True) -> bool:
    """An exact str of at most MAX_TEXT_LEN printable characters (str.isprintable)."""
    if type(value) is not str or len(value) > MAX_TEXT_LEN or (not value and not allow_empty):
        return False
    # isprintable refuses control characters (they split log lines), format ones (bidi overrides
    # disguise text), lone surrogates (they cannot be encoded for export) and separators but space.
    return value.isprintable()


def _count(value: object) -> bool:
    return type(value) is int and 0 <= value <= _INT64_MAX


def _status(value: object) -> bool:
    return type(value) is int and (value == 0 or 100 <= value <= 999)


def _word_in(words: frozenset[str]) -> Callable[[object], bool]:
    return lambda value: type(value) is str and value in words


_SCALARS: Final[dict[str, Callable[[object], bool]]] = {
    t.POLICY: _word_in(frozenset(t.POLICIES)),
    t.SENT: _count,
    t.EFFECT: _word_in(_WORDS_EFFECT),
    t.VERDICT: _word_in(frozenset(t.VERDICTS)),
    t.MAY_HAVE_RUN: lambda value: type(value) is bool,
    t.ENDPOINT: is_endpoint,
    t.OMITTED: _count,
    t.GEN_AI_TOOL_NAME: is_sane_text,
    t.JSONRPC_REQUEST_ID: lambda value: is_sane_text(value, allow_empty=False),
}
_COLUMNS: Final[dict[str, Callable[[object], bool]]] = {
    t.ATTEMPTS_STATUS: _status,
    t.ATTEMPTS_FAILURE: _word_in(_WORDS_FAILURE),
    t.ATTEMPTS_EFFECT: _word_in(_WORDS_EFFECT),
    t.ATTEMPTS_PERMISSION: _word_in(_WORDS_PERMISSION),
    t.ATTEMPTS_WAIT_MS: _count,
}


def _items(raw: object) -> list[tuple[object, object]] | None:
    """The record's pairs, read as data, or None for a mapping this module will not call into."""
    # A plain dict is read by the interpreter itself. BoundedAttributes is OpenTelemetry's own
    # class (an event's attributes), checked by exact type, so its copy() is library code. Any other
    # mapping, a MappingProxyType included (it may wrap any mapping), could run the filer's code.
    if type(raw) is BoundedAttributes:
        raw = raw.copy()
    if type(raw) is not dict:
        return None
    return list(dict.items(raw))


def record_refusal(raw: object) -> str | None:
    """Why `raw` is not a record (the key at fault, never a value), or None when it is one."""
    try:
        _read(raw)
    except RecordRefused as refused:
        return refused.field
    return None


def validate_record(raw: object) -> dict[str, AttributeValue] | None:
    """`raw` rebuilt as a fresh plain dict with tuple columns, or None when anything is outside the list."""
    try:
        return _read(raw)
    except RecordRefused:
        return None


def _read(raw: object) -> dict[str, AttributeValue]:
    items = _items(raw)
    if items is None:
        raise RecordRefused("the record (not a plain dict)")
    given: dict[str, object] = {}
    for key, value in items:
        if type(key) is not str or (key not in _SCALARS and key not in _COLUMNS):
            raise RecordRefused("an unknown key")
        given[key] = value
    out: dict[str, AttributeValue] = {}
    for key, check in _SCALARS.items():
        if key not in given:
            raise RecordRefused(f"{key} (missing)")
        value = given[key]
        if not check(value):
            raise RecordRefused(key)
        out[key] = cast(AttributeValue, value)  # checked above: an exact str, int or bool
    rows = -1
    for key, check in _COLUMNS.items():
        if key not in given:
            raise RecordRefused(f"{key} (missing)")
        column = given[key]
        if type(column) is not tuple and type(column) is not list:
            raise RecordRefused(key)
        cells = tuple(column)  # exact tuple or list: the interpreter iterates it, no filer code runs
        if rows == -1:
            rows = len(cells)
        if len(cells) != rows:
            raise RecordRefused(f"{key} (ragged columns)")
        if len(cells) > t.MAX_RECORD_ROWS:
            raise RecordRefused(f"{key} (more than {t.MAX_RECORD_ROWS} rows)")
        if not all(check(cell) for cell in cells):
            raise RecordRefused(key)
        out[key] = cast(AttributeValue, cells)  # checked above: exact str or int cells
    return out


def build_record(
    *,
    policy: Policy,
    sent: int,
    effect: Effect,
    verdict: CallVerdict,
    may_have_run: bool,
    endpoint: str,
    tool: str,
    request_id: str,
    rows: Sequence[AttemptRow],
) -> dict[str, AttributeValue]:
    """The record of one `tools/call`, allow-listed at build.

    At most telemetry.MAX_RECORD_ROWS rows are listed: the FIRST ones and the LAST one (the last
    attempt decides what the caller saw, so it is never dropped). The attempts between are counted
    in `mcp.replay.omitted`; they are the ones just before the last row.

    Raises RecordRefused (a ValueError naming the key, never a value) when any argument is outside
    the allow-list: the caller files nothing rather than a trimmed record.
    """
    listed = list(rows)
    omitted = 0
    if len(listed) > t.MAX_RECORD_ROWS:
        omitted = len(listed) - t.MAX_RECORD_ROWS
        listed = listed[: t.MAX_RECORD_ROWS - 1] + listed[-1:]
    for row in listed:
        if type(row) is not AttemptRow:
            raise RecordRefused("rows (not AttemptRow)")
    record: dict[str, object] = {
        t.POLICY: policy,
        t.SENT: sent,
        t.EFFECT: effect,
        t.VERDICT: verdict,
        t.MAY_HAVE_RUN: may_have_run,
        t.ENDPOINT: endpoint,
        t.OMITTED: omitted,
        t.GEN_AI_TOOL_NAME: tool,
        t.JSONRPC_REQUEST_ID: request_id,
        t.ATTEMPTS_STATUS: tuple(row.status for row in listed),
        t.ATTEMPTS_FAILURE: tuple(row.failure for row in listed),
        t.ATTEMPTS_EFFECT: tuple(row.effect for row in listed),
        t.ATTEMPTS_PERMISSION: tuple(row.permission for row in listed),
        t.ATTEMPTS_WAIT_MS: tuple(row.wait_ms for row in listed),
    }
    return _read(record)
