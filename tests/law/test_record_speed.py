"""The record allow-list on full-size records: as strict as on small ones, and its rows read in C.

tests/law/test_record.py mostly checks records of a few rows, which the validator reads cell by cell;
a record of more rows is checked column by column in C (gc.get_referents, then the cells' exact
classes, then their values). These tests put every kind of bad cell at every kind of position of a
full 100-row record, and count the Python work of a full record (tests/growth.py: never a clock):
no more than a 9-row one's. The timed figures are the benchmark's (benchmarks/redaction.py).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from benchmarks._common import clean_record
from tests.support.growth import work_of
from tests.support.records import build_record

from otel_mcp_replay import telemetry as t
from otel_mcp_replay.record import AttemptRow, call_record, record_refusal, validate_record

ROWS = t.MAX_RECORD_ROWS


def full_record(size: int = ROWS) -> dict[str, Any]:
    rows = [
        AttemptRow(429, "throttle", "unknown", "first" if i == 0 else "app", 1000 + i) for i in range(size)
    ]
    rows[-1] = AttemptRow(200, "", "applied", "app", 0)
    return clean_record(rows)


class StrSub(str):
    __slots__ = ()


class IntSub(int):
    __slots__ = ()


class Tripwire:
    """Records every method looked up on it: the validator must never call one."""

    calls: list[str] = []

    def __getattribute__(self, name: str) -> Any:
        Tripwire.calls.append(name)
        return object.__getattribute__(self, name)


class LoudMeta(type):
    """A metaclass whose hash and equality record that they ran: comparing or hashing a cell's
    class must not call them either."""

    def __hash__(cls) -> int:
        Tripwire.calls.append("meta.__hash__")
        return 1

    def __eq__(cls, other: object) -> bool:
        Tripwire.calls.append("meta.__eq__")
        return True


class LoudStr(str, metaclass=LoudMeta):
    def __hash__(self) -> int:
        Tripwire.calls.append("str.__hash__")
        return str.__hash__(self)

    def __eq__(self, other: object) -> bool:
        Tripwire.calls.append("str.__eq__")
        return str.__eq__(self, other)


class LoudInt(int, metaclass=LoudMeta):
    def __hash__(self) -> int:
        Tripwire.calls.append("int.__hash__")
        return int.__hash__(self)

    def __eq__(self, other: object) -> bool:
        Tripwire.calls.append("int.__eq__")
        return int.__eq__(self, other)


BAD_CELLS: dict[str, list[Any]] = {
    t.ATTEMPTS_STATUS: [
        -1, 1, 99, 1000, True, False, 429.0, 0.0, complex(429), Decimal(429), "429", None,
        IntSub(429), LoudInt(429), Tripwire(), (429,), b"429",
    ],
    t.ATTEMPTS_FAILURE: ["boom", "Throttle", None, 0, b"network", StrSub("network"), LoudStr("network"),
                         Tripwire(), ("network",)],
    t.ATTEMPTS_EFFECT: ["", "maybe", StrSub("unknown"), LoudStr("unknown"), b"unknown", Tripwire()],
    t.ATTEMPTS_PERMISSION: ["model", "", StrSub("app"), LoudStr("app"), Tripwire()],
    t.ATTEMPTS_WAIT_MS: [
        -1, True, False, 1.5, 0.0, 2**63, 2**64, -(2**63), IntSub(5), LoudInt(5), Decimal(5), "5", None,
        Tripwire(), (),
    ],
}  # fmt: skip


# Short columns are checked cell by cell, long ones (more than 8 cells) in passes over all of them.
SIZES_AND_POSITIONS = [(1, 0), (8, 0), (8, 7), (9, 0), (9, 4), (9, 8)] + [
    (ROWS, position) for position in (0, 1, ROWS // 2, ROWS - 2, ROWS - 1)
]


@pytest.mark.parametrize(("size", "position"), SIZES_AND_POSITIONS)
@pytest.mark.parametrize(("key", "bad"), [(k, v) for k, vs in BAD_CELLS.items() for v in vs])
def test_a_bad_cell_anywhere_in_a_record_of_any_size_refuses_it_and_runs_nothing(
    key: str, bad: Any, size: int, position: int
) -> None:
    Tripwire.calls.clear()
    record = full_record(size)
    cells = list(record[key])
    cells[position] = bad
    record[key] = tuple(cells)
    assert validate_record(record) is None
    assert record_refusal(record) == key
    record[key] = cells  # a list column is read the same way
    assert validate_record(record) is None
    assert Tripwire.calls == []


@pytest.mark.parametrize("rows", [0, 1, 7, 8, 9, 10, 64, ROWS])
def test_records_of_every_size_pass_and_come_back_equal(rows: int) -> None:
    listed = [AttemptRow(0 if i % 3 else 503, "network", "unknown", "app", i) for i in range(rows)]
    record = build_record(
        policy="compatibility",
        sent=rows,
        effect="unknown",
        verdict="failed",
        may_have_run=False,
        endpoint="http://127.0.0.1:8080",
        tool="search",
        request_id="abc",
        rows=listed,
    )
    assert validate_record(record) == record
    assert (
        validate_record({k: list(v) if k in t.RECORD_COLUMN_KEYS else v for k, v in record.items()}) == record
    )
    assert record[t.ATTEMPTS_WAIT_MS] == tuple(range(rows))


def test_the_edges_of_the_int_ranges_pass() -> None:
    record = full_record()
    record[t.ATTEMPTS_WAIT_MS] = (0, 2**63 - 1) * (ROWS // 2)
    record[t.ATTEMPTS_STATUS] = (0, 100, 999, 599) * (ROWS // 4)
    assert validate_record(record) == record


def test_a_record_past_the_row_limit_is_refused_whole() -> None:
    record = full_record()
    for key in t.RECORD_COLUMN_KEYS:
        record[key] = (*record[key], record[key][-1])
    assert validate_record(record) is None


def test_a_full_record_is_validated_and_built_in_no_more_python_work_than_a_short_one() -> None:
    """Past 8 rows a column is read in C: the Python work does not grow with the rows."""
    shortest_long = 9  # the fewest rows read column by column
    record, short_record = full_record(), full_record(shortest_long)
    assert validate_record(record) is not None and validate_record(short_record) is not None
    full, short = work_of(lambda: validate_record(record)), work_of(lambda: validate_record(short_record))
    assert 0 < full <= 1.1 * short, (short, full)
    rows = [AttemptRow(429, "throttle", "unknown", "app", 5)] * ROWS
    # The plugin's own build (call_record) does not grow with the rows either.
    full = work_of(lambda: call_record(**_build_args(rows)))
    short = work_of(lambda: call_record(**_build_args(rows[:shortest_long])))
    assert 0 < full <= 1.1 * short, (short, full)


def _build_args(rows: list[AttemptRow]) -> dict[str, Any]:
    return {
        "policy": "app-authorized",
        "sent": len(rows),
        "effect": "unknown",
        "verdict": "failed",
        "may_have_run": True,
        "endpoint": "billing",
        "tool": "search",
        "request_id": "7",
        "rows": rows,
        "call_round": 1,
    }
