"""The `mcp.tool.request_attempts` record and its allow-list.

The rule: the record is the allow-list and nothing else. Its keys are telemetry.RECORD_KEYS (and a
task-backed call's RECORD_TASK_KEYS, both or neither); each
holds a number, a bool, one of this library's own words, the endpoint's declared label or bare
origin, the tool's name or the request id. Anything else in a record (a key nobody listed, a word
outside its set, a URL with a path, ragged columns, a value of an unexpected type) refuses it
whole: it is never trimmed into something it did not say. Values are read as data: only exact
built-in types are accepted, so no method a filing carries ever runs. A record of a call this
library ran (`call_record`) holds its own typed words: at build only what came from outside is
checked. The records this library filed are vouched for (`Vouches`), so the redaction need not
check them again.
"""

from __future__ import annotations

import re
import struct
import weakref
from collections.abc import Callable, Mapping, Sequence
from gc import get_referents as _referents
from itertools import repeat
from operator import countOf, is_
from typing import Any, Final, Literal, NamedTuple, cast

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.metrics import Counter, Meter
from opentelemetry.util.types import AttributeValue

from otel_mcp_replay import telemetry as t
from otel_mcp_replay.declaration import LABEL
from otel_mcp_replay.endpoints import ORIGIN
from otel_mcp_replay.telemetry import AttemptPermission, CallVerdict, Effect, FailureKind, Policy, TaskStatus

# OTLP carries int64: a larger int would fail the export of the whole batch, not just this record.
_INT64_MAX: Final = 2**63 - 1
# A tool name or request id longer than this is not a name: refuse rather than carry it.
MAX_TEXT_LEN: Final = 256

_WORDS_FAILURE: Final = frozenset(("", *t.FAILURES))
_WORDS_EFFECT: Final = frozenset(t.EFFECTS)
_WORDS_PERMISSION: Final = frozenset(t.ATTEMPT_PERMISSIONS)


class AttemptRow(NamedTuple):
    """One HTTP attempt of a `tools/call`, as its record lists it.

    A named tuple (immutable) so that call_record turns rows into columns with one transpose in C.
    """

    status: int  # 0 when no response came
    failure: FailureKind | Literal[""]  # "" when a JSON-RPC result came back, else a failure kind
    effect: Effect
    permission: AttemptPermission
    wait_ms: int  # the wait before the NEXT attempt (0 if none)


_NO_ROWS: Final[tuple[tuple[object, ...], ...]] = ((),) * 5


class RecordRefused(ValueError):
    """A record outside the allow-list. The message names the key, never a value."""

    def __init__(self, field: str) -> None:
        super().__init__(f"request_attempts record refused at {field}")
        self.field = field


def refused_records_counter(meter: Meter) -> Counter:
    """The counter of records refused whole, on `meter`: one definition for the calls that refuse
    their own record (runtime.Instruments) and the redaction wrappers that refuse one."""
    return meter.create_counter(
        t.METRIC_RECORDS_REFUSED,
        unit="{record}",
        description="request_attempts records refused whole by the allow-list",
    )


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


# -- the columns ----------------------------------------------------------------------------------
# A short column is checked cell by cell, type first. A long one in a few passes in C over all its
# cells: that no cell is an object of a Python class (so nothing below can call into one), that
# every cell is exactly of the column's type, then the values. The statuses, which the plugin's own
# record checks on every call, always in two passes in C: fewer opcodes than a loop even over one.

_STATUSES: Final = frozenset((0, *range(100, 1000)))  # 0: no response; else a three-digit status
_UINT64: Final[dict[int, struct.Struct]] = {}  # by row count (at most MAX_RECORD_ROWS entries)
_FEW: Final = 8  # columns up to this long are checked cell by cell


def _exactly(kind: type, cells: tuple[object, ...]) -> bool:
    """Every cell is exactly `kind` (no subclass), found without running any code a cell carries.

    gc.get_referents(*cells) is empty only when no cell is an object of a class written in Python
    (such an object refers to its class) and none is a container. Only then are the cells' classes
    compared with `kind`: classes written in C, compared by the interpreter without a call into them.
    """
    return not _referents(*cells) and countOf(map(type, cells), kind) == len(cells)


def _statuses(cells: tuple[object, ...]) -> bool:
    """Exact ints, each 0 or 100..999: the cells' classes compared by identity (no class's code
    runs), then only exact ints hashed."""
    return all(map(is_, map(type, cells), repeat(int))) and _STATUSES.issuperset(cells)


def _counts(cells: tuple[object, ...]) -> bool:
    """Exact ints in 0..2**63-1 (OTLP's int64)."""
    if len(cells) <= _FEW:
        for cell in cells:  # noqa: SIM110 (a loop: no generator to set up for a few cells)
            if not _count(cell):
                return False
        return True
    if not _exactly(int, cells):
        return False
    packer = _UINT64.get(len(cells))
    if packer is None:
        packer = _UINT64[len(cells)] = struct.Struct(f"<{len(cells)}Q")
    try:
        packed = packer.pack(*cells)  # exact ints only by now; refuses one below 0 or past 2**64-1
    except struct.error:
        return False
    # Each little-endian uint64's top byte is below 0x80 exactly when the int fits int64.
    return packed[7::8].isascii()


class _Words:
    """Exact str cells, each in `words` (types first: only exact str is hashed and compared)."""

    __slots__ = ("words",)

    def __init__(self, words: frozenset[str]) -> None:
        self.words = words

    def __call__(self, cells: tuple[object, ...]) -> bool:
        if len(cells) <= _FEW:
            for cell in cells:  # noqa: SIM110 (a loop: no generator to set up for a few cells)
                if type(cell) is not str or cell not in self.words:
                    return False
            return True
        return _exactly(str, cells) and self.words.issuperset(cells)


_COLUMN_CHECKS: Final[tuple[tuple[str, Callable[[tuple[object, ...]], bool]], ...]] = (
    (t.ATTEMPTS_STATUS, _statuses),
    (t.ATTEMPTS_FAILURE, _Words(_WORDS_FAILURE)),
    (t.ATTEMPTS_EFFECT, _Words(_WORDS_EFFECT)),
    (t.ATTEMPTS_PERMISSION, _Words(_WORDS_PERMISSION)),
    (t.ATTEMPTS_WAIT_MS, _counts),
)
_POLICY_WORDS: Final = frozenset(t.POLICIES)
_VERDICT_WORDS: Final = frozenset(t.VERDICTS)
_KNOWN_KEYS: Final = frozenset(t.RECORD_KEYS + t.RECORD_TASK_KEYS)
_TASK_STATUS_WORDS: Final = frozenset(t.TASK_STATUSES)
# A task's keyed hash: the prefix and 16 lowercase hex digits (tasks.hashed_task_id), never the id.
_TASK_HASH: Final = re.compile(r"h:[0-9a-f]{16}")
_MISSING: Final = object()  # what a missing key reads as: every check below refuses it


def _given(raw: object) -> dict[object, object] | None:
    """A private copy of the record's pairs, read as data, or None for a mapping this module will
    not call into."""
    # A plain dict is copied by the interpreter itself. BoundedAttributes is OpenTelemetry's own
    # class (an event's attributes), checked by exact type, so its copy() is library code. Any other
    # mapping, a MappingProxyType included (it may wrap any mapping), could run the filer's code.
    if type(raw) is BoundedAttributes:
        copied = raw.copy()
        return copied if type(copied) is dict else None
    if type(raw) is not dict:
        return None
    return dict.copy(raw)


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


def _refused(key: str, given: dict[object, object]) -> RecordRefused:
    return RecordRefused(key if key in given else f"{key} (missing)")


def _read(raw: object) -> dict[str, AttributeValue]:
    given = _given(raw)
    if given is None:
        raise RecordRefused("the record (not a plain dict)")
    # Every key exactly str (compared by the interpreter, no key's code runs), then hashed: known.
    if not all(map(is_, map(type, given), repeat(str))) or not _KNOWN_KEYS.issuperset(given):
        raise RecordRefused("an unknown key")
    get = given.get
    record = _checked(given, *[get(key, _MISSING) for key in t.RECORD_KEYS])
    task, status = get(t.TASK, _MISSING), get(t.TASK_STATUS, _MISSING)
    if task is _MISSING and status is _MISSING:
        return record
    # A task-backed call's pair, both or neither: its task's hash and a status of SEP-2663's.
    if type(task) is not str or not _TASK_HASH.fullmatch(task):
        raise _refused(t.TASK, given)
    if type(status) is not str or status not in _TASK_STATUS_WORDS:
        raise _refused(t.TASK_STATUS, given)
    record[t.TASK], record[t.TASK_STATUS] = task, status
    return record


def _checked(given: dict[object, object], *values: object) -> dict[str, AttributeValue]:
    """The record of `values` (in telemetry.RECORD_KEYS' order) as a fresh dict, every value checked;
    `given` is the mapping they were read from."""
    (policy, sent, effect, verdict, may_have_run, endpoint, omitted, tool, request_id, call_round) = values[
        :10
    ]
    # The scalars, in the allow-list's order: the first one at fault (or missing) names the refusal.
    if type(policy) is not str or policy not in _POLICY_WORDS:
        raise _refused(t.POLICY, given)
    if not _count(sent):
        raise _refused(t.SENT, given)
    if type(effect) is not str or effect not in _WORDS_EFFECT:
        raise _refused(t.EFFECT, given)
    if type(verdict) is not str or verdict not in _VERDICT_WORDS:
        raise _refused(t.VERDICT, given)
    if type(may_have_run) is not bool:
        raise _refused(t.MAY_HAVE_RUN, given)
    if not is_endpoint(endpoint):
        raise _refused(t.ENDPOINT, given)
    if not _count(omitted):
        raise _refused(t.OMITTED, given)
    if not is_sane_text(tool):
        raise _refused(t.GEN_AI_TOOL_NAME, given)
    if not is_sane_text(request_id, allow_empty=False):
        raise _refused(t.JSONRPC_REQUEST_ID, given)
    if not _count(call_round) or not call_round:  # 1 for the first round: never 0
        raise _refused(t.ROUND, given)
    # The columns, in order: a plain tuple or list each, all of one length, every cell checked.
    columns: list[tuple[object, ...]] = []
    rows = -1
    for (key, check), column in zip(_COLUMN_CHECKS, values[10:], strict=True):
        if type(column) is not tuple and type(column) is not list:
            raise _refused(key, given)
        cells = tuple(column)  # exact tuple or list: the interpreter iterates it, no filer code runs
        if rows == -1:
            rows = len(cells)
        if len(cells) != rows:
            raise RecordRefused(f"{key} (ragged columns)")
        if rows > t.MAX_RECORD_ROWS:
            raise RecordRefused(f"{key} (more than {t.MAX_RECORD_ROWS} rows)")
        if rows and not check(cells):
            raise RecordRefused(key)
        columns.append(cells)
    # A fresh dict in the allow-list's order, holding only what was checked above.
    record = dict(zip(t.RECORD_KEYS, (*values[:10], *columns), strict=True))
    return cast("dict[str, AttributeValue]", record)  # exact str, int and bool, or tuples of them


def call_record(
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
    call_round: int,
    task: tuple[str, TaskStatus] | None = None,
) -> dict[str, AttributeValue]:
    """The record of a call this library ran itself (call.py).

    At most telemetry.MAX_RECORD_ROWS rows are listed: the FIRST ones and the LAST one (the last
    attempt decides what the caller saw, so it is never dropped). The attempts between are counted
    in `mcp.replay.omitted`; they are the ones just before the last row. `call_round` is the round
    of a multi-round call (SEP-2322) the record is of: 1 for the first, and for every other call.

    Its words are this library's own, typed at their source (telemetry's Literals, `law.classify`'s
    outcomes, the policy's waits) and its counts its own; so only what came from outside is checked
    here: the tool's name (the app's), the request id (the request's), the endpoint (a URL's origin or
    the declaration's label) and each status (the server's). `task`: a task-backed call's (SEP-2663)
    task, as its keyed hash, and the last status seen of it. What passes is a record the full
    allow-list accepts (tests/law/test_record.py proves it over every word). Raises RecordRefused
    (a ValueError naming the key, never a value) for an outside value the allow-list refuses: the
    caller files nothing rather than a trimmed record."""
    if not is_sane_text(tool):
        raise RecordRefused(t.GEN_AI_TOOL_NAME)
    if not is_sane_text(request_id, allow_empty=False):
        raise RecordRefused(t.JSONRPC_REQUEST_ID)
    if not is_endpoint(endpoint):
        raise RecordRefused(t.ENDPOINT)
    omitted = 0
    if len(rows) > t.MAX_RECORD_ROWS:  # the first ones listed, and the last
        omitted = len(rows) - t.MAX_RECORD_ROWS
        rows = [*rows[: t.MAX_RECORD_ROWS - 1], rows[-1]]
    if not all(map(is_, map(type, rows), repeat(AttemptRow))):
        raise RecordRefused("rows (not AttemptRow)")
    # Rows to columns with one transpose in C (each row is exactly our own named tuple).
    columns = tuple(zip(*rows, strict=True)) or _NO_ROWS
    if rows and not _statuses(columns[0]):
        raise RecordRefused(t.ATTEMPTS_STATUS)
    scalars = (policy, sent, effect, verdict, may_have_run, endpoint, omitted, tool, request_id, call_round)
    # In the allow-list's order: exact str, int and bool, or tuples of them.
    record: dict[str, Any] = dict(zip(t.RECORD_KEYS, (*scalars, *columns), strict=True))
    if task is not None:  # a task-backed call's: its task's keyed hash (ours), the status seen
        record[t.TASK], record[t.TASK_STATUS] = task
    return record


_WeakAttributes = weakref.ReferenceType[BoundedAttributes]


class Vouches:
    """The records this library filed, as the SDK stored them.

    call_record's record passed the allow-list at build. Once the SDK has stored it on an event,
    in a BoundedAttributes it made immutable, it cannot change: the redaction may read it back
    without checking its cells again (a full record's 500 cells cost more than the rest of a span's
    redaction). Only the very object vouched for is trusted: the weak reference proves that the id
    still names it. Any other record, whoever wrote it, is checked whole. A record filed as a log
    record (filing.py) is vouched for too; its attributes stay writable, so it is trusted only while
    it still holds what was filed.
    """

    __slots__ = ("_by_id", "_logs_by_id", "active")

    def __init__(self) -> None:
        self._by_id: dict[int, weakref.ReferenceType[BoundedAttributes]] = {}
        # A log record's attributes stay writable (the SDK's ReadWriteLogRecord): each is kept with
        # the record it must still hold when read back.
        self._logs_by_id: dict[int, tuple[_WeakAttributes, Mapping[str, object]]] = {}
        # Vouching starts when a redaction wrapper that reads these vouches is built (`read`): with
        # no redaction in the process, nobody reads a vouch, so filing a record does not pay for one.
        self.active = False

    def read(self) -> Vouches:
        """These vouches, for a redaction wrapper being built: from now on every record filed here is
        vouched for."""
        self.active = True
        return self

    def vouch(self, stored: object, built: Mapping[str, object]) -> bool:
        """Vouch for `stored`, an event's attributes as the SDK stored call_record's `built`, when
        it holds exactly `built` (the SDK cuts values past its length limit and drops keys past its
        count limit: such a record is left to the whole check, which refuses it). For
        `file` only, right after it added `built`, unchanged, to the call's span."""
        if type(stored) is not BoundedAttributes or stored.copy() != built:
            return False  # exact built-in values on both sides: the comparison runs no filer code
        key, by_id = id(stored), self._by_id

        def forget(_ref: weakref.ReferenceType[BoundedAttributes]) -> None:
            by_id.pop(key, None)  # runs when `stored` dies, before its id can name anything else

        by_id[key] = weakref.ref(stored, forget)
        return True

    def file(self, span: Any, record: Mapping[str, AttributeValue]) -> None:
        """Add call_record's `record` to the call's span, vouched for as the SDK stored it."""
        span.add_event(t.RECORD_EVENT, record)
        if self.active:
            events = getattr(span, "events", None)  # an SDK span's; a non-recording one has none
            if events:
                self.vouch(events[-1].attributes, record)

    def record(self, raw: object) -> dict[str, AttributeValue] | None:
        """A fresh copy of `raw` when it is a record this library vouched for, else None."""
        ref = self._by_id.get(id(raw))
        if ref is None or ref() is not raw:
            return None
        return cast("BoundedAttributes", raw).copy()  # type: ignore[return-value]

    def vouch_log(self, stored: object, built: Mapping[str, object]) -> bool:
        """Vouch for `stored`, a log record's attributes as the SDK stored call_record's `built`
        (filing.py, right after it emitted them), when it holds exactly `built`. A log record's
        attributes stay writable: `log_record` reads them back only while they still hold `built`."""
        if type(stored) is not BoundedAttributes or stored.copy() != built:
            return False
        key, by_id = id(stored), self._logs_by_id

        def forget(_ref: _WeakAttributes) -> None:
            by_id.pop(key, None)

        by_id[key] = (weakref.ref(stored, forget), built)
        return True

    def log_record(self, raw: object) -> dict[str, AttributeValue] | None:
        """A fresh copy of `raw`, a log record's attributes, when it is a record this library vouched
        for and still holds what it was vouched for as, else None (a processor wrote to it since: the
        whole check reads it)."""
        found = self._logs_by_id.get(id(raw))
        if found is None or found[0]() is not raw:
            return None
        copied = cast("BoundedAttributes", raw).copy()
        return copied if copied == found[1] else None  # type: ignore[return-value]

    def __len__(self) -> int:
        return len(self._by_id) + len(self._logs_by_id)
