"""The request_attempts record: built only from the allow-list, and refused whole for anything else."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.attributes import BoundedAttributes
from tests.support.records import build_record

from otel_mcp_replay import telemetry as t
from otel_mcp_replay.record import (
    AttemptRow,
    RecordRefused,
    call_record,
    is_endpoint,
    record_refusal,
    validate_record,
)

COLUMN_KEYS = set(t.RECORD_COLUMN_KEYS)

rows_st = st.builds(
    AttemptRow,
    status=st.one_of(st.just(0), st.integers(100, 599)),
    failure=st.sampled_from(("", *t.FAILURES)),
    effect=st.sampled_from(t.EFFECTS),
    permission=st.sampled_from(t.ATTEMPT_PERMISSIONS),
    wait_ms=st.integers(0, 10**7),
)
labels = st.from_regex(r"\A[A-Za-z0-9._-]{1,64}\Z")
origins = st.builds(
    "{}://{}:{}".format,
    st.sampled_from(("http", "https")),
    st.one_of(st.from_regex(r"\A[a-z0-9-]{1,20}(\.[a-z0-9-]{1,20}){0,3}\Z"), st.just("[::1]")),
    st.integers(1, 65535),
)
tool_names = st.text(st.characters(codec="utf-8", categories=("L", "N", "P", "S")), max_size=64)
request_ids = st.text(st.characters(codec="utf-8", categories=("L", "N")), min_size=1, max_size=20)


@st.composite
def built_records(draw: st.DrawFn, max_rows: int = 12) -> dict[str, Any]:
    return build_record(
        policy=draw(st.sampled_from(t.POLICIES)),
        sent=draw(st.integers(0, 1000)),
        effect=draw(st.sampled_from(t.EFFECTS)),
        verdict=draw(st.sampled_from(t.VERDICTS)),
        may_have_run=draw(st.booleans()),
        endpoint=draw(st.one_of(labels, origins)),
        tool=draw(tool_names),
        request_id=draw(request_ids),
        rows=draw(st.lists(rows_st, max_size=max_rows)),
    )


def a_record(**override: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "policy": "app-authorized",
        "sent": 2,
        "effect": "unknown",
        "verdict": "failed",
        "may_have_run": True,
        "endpoint": "billing",
        "tool": "charge",
        "request_id": "7",
        "rows": [
            AttemptRow(429, "throttle", "unknown", "first", 200),
            AttemptRow(0, "network", "unknown", "app", 0),
        ],
    }
    fields.update(override)
    return build_record(**fields)


# --- every well-formed record passes unchanged ------------------------------------------------


@settings(max_examples=150)
@given(built_records())
def test_a_built_record_validates_to_an_equal_dict(record: dict[str, Any]) -> None:
    assert set(record) == set(t.RECORD_KEYS)
    again = validate_record(record)
    assert again == record
    assert again is not record
    assert record_refusal(record) is None


@settings(max_examples=50)
@given(built_records())
def test_list_columns_are_read_as_tuples(record: dict[str, Any]) -> None:
    as_lists = {k: list(v) if k in COLUMN_KEYS else v for k, v in record.items()}
    assert validate_record(as_lists) == record


@settings(max_examples=50)
@given(built_records())
def test_an_event_s_bounded_attributes_are_accepted(record: dict[str, Any]) -> None:
    assert validate_record(BoundedAttributes(attributes=record)) == record


def test_the_allow_list_is_telemetry_s_record_keys() -> None:
    assert tuple(a_record()) == t.RECORD_KEYS


# --- anything outside the allow-list refuses the record whole --------------------------------


class StrSub(str):
    pass


class IntSub(int):
    pass


class Tripwire:
    """A value whose every method records that it ran: the validator must never call it."""

    calls: list[str] = []

    def __getattribute__(self, name: str) -> Any:
        Tripwire.calls.append(name)
        return object.__getattribute__(self, name)


class CustomMapping(Mapping[str, Any]):
    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data

    def __getitem__(self, key: str) -> Any:
        Tripwire.calls.append("mapping.__getitem__")
        return self.data[key]

    def __iter__(self) -> Iterator[str]:
        Tripwire.calls.append("mapping.__iter__")
        return iter(self.data)

    def __len__(self) -> int:
        Tripwire.calls.append("mapping.__len__")
        return len(self.data)


class CustomSequence(Sequence[Any]):
    def __init__(self, data: Sequence[Any]) -> None:
        self.data = list(data)

    def __getitem__(self, i: Any) -> Any:
        Tripwire.calls.append("sequence.__getitem__")
        return self.data[i]

    def __len__(self) -> int:
        Tripwire.calls.append("sequence.__len__")
        return len(self.data)


class TupleSub(tuple):  # type: ignore[type-arg]
    def __iter__(self) -> Iterator[Any]:
        Tripwire.calls.append("tuple.__iter__")
        return super().__iter__()


class DictSub(dict):  # type: ignore[type-arg]
    def items(self) -> Any:
        Tripwire.calls.append("dict.items")
        return super().items()


BAD_SCALARS: dict[str, list[Any]] = {
    t.POLICY: ["strict", "Compatibility", StrSub("compatibility"), None, 1],
    t.SENT: [-1, True, 1.0, "2", IntSub(2), 2**63, None],
    t.EFFECT: ["maybe", "", StrSub("none"), 0],
    t.VERDICT: ["ok", StrSub("failed"), None],
    t.MAY_HAVE_RUN: [0, 1, "true", None],
    t.ENDPOINT: [
        "http://h:80/mcp",
        "http://h:80?x=1",
        "http://h:80#f",
        "http://user:pw@h:80",
        "http://h",
        "http://H:80",
        "http://h:0",
        "http://h:65536",
        "ftp://h:21",
        "bill ing",
        "x" * 65,
        "",
        StrSub("billing"),
        None,
    ],
    t.OMITTED: [-3, False, 0.5, IntSub(0)],
    t.GEN_AI_TOOL_NAME: ["a\nb", "a\x1bb", "\u202etxet", "x" * 257, StrSub("charge"), 3, None],
    t.JSONRPC_REQUEST_ID: ["", 7, "\x00", StrSub("7"), None],
}
BAD_CELLS: dict[str, list[Any]] = {
    t.ATTEMPTS_STATUS: [-1, 99, 1000, True, "429", IntSub(429), None, 429.0],
    t.ATTEMPTS_FAILURE: ["boom", "Throttle", None, StrSub("network"), 0],
    t.ATTEMPTS_EFFECT: ["", "maybe", StrSub("unknown")],
    t.ATTEMPTS_PERMISSION: ["model", "", StrSub("first")],
    t.ATTEMPTS_WAIT_MS: [-1, True, 1.5, 2**63, IntSub(5)],
}


def refused(raw: object) -> bool:
    return validate_record(raw) is None and record_refusal(raw) is not None


@pytest.mark.parametrize(("key", "bad"), [(k, v) for k, vs in BAD_SCALARS.items() for v in vs])
def test_a_scalar_outside_its_set_or_type_refuses_the_record(key: str, bad: Any) -> None:
    record = a_record()
    record[key] = bad
    assert refused(record)
    assert record_refusal(record) == key


@pytest.mark.parametrize(("key", "bad"), [(k, v) for k, vs in BAD_CELLS.items() for v in vs])
def test_a_cell_outside_its_set_or_type_refuses_the_record(key: str, bad: Any) -> None:
    record = a_record()
    record[key] = (record[key][0], bad)
    assert refused(record)


@pytest.mark.parametrize("key", t.RECORD_KEYS)
def test_a_missing_key_refuses_the_record(key: str) -> None:
    record = a_record()
    del record[key]
    assert refused(record)
    assert key in str(record_refusal(record))


@pytest.mark.parametrize(
    "key", ["url.full", "mcp.replay.arguments", "", "MCP.REPLAY.SENT", StrSub(t.SENT), 3]
)
def test_an_unknown_key_refuses_the_record(key: Any) -> None:
    record: dict[Any, Any] = a_record()
    if type(key) is StrSub:
        del record[t.SENT]
    record[key] = 1
    assert refused(record)


def test_ragged_columns_refuse_the_record() -> None:
    record = a_record()
    record[t.ATTEMPTS_WAIT_MS] = (0,)
    assert refused(record)
    assert "ragged" in str(record_refusal(record))


def test_more_than_the_row_limit_refuses_the_record() -> None:
    n = t.MAX_RECORD_ROWS + 1
    record = a_record()
    record.update(
        {
            t.ATTEMPTS_STATUS: (429,) * n,
            t.ATTEMPTS_FAILURE: ("throttle",) * n,
            t.ATTEMPTS_EFFECT: ("unknown",) * n,
            t.ATTEMPTS_PERMISSION: ("compatibility",) * n,
            t.ATTEMPTS_WAIT_MS: (0,) * n,
        }
    )
    assert refused(record)


@pytest.mark.parametrize("column", [{"a": 1}, "429", None, 429, frozenset({429}), b"\x01"])
def test_a_column_that_is_not_a_plain_tuple_or_list_refuses_the_record(column: Any) -> None:
    record = a_record()
    record[t.ATTEMPTS_STATUS] = column
    assert refused(record)


def test_custom_containers_are_refused_and_never_called() -> None:
    Tripwire.calls.clear()
    good = a_record()
    assert refused(CustomMapping(good))
    assert refused(DictSub(good))
    assert refused(MappingProxyType(good))
    for container in (CustomSequence, TupleSub):
        record = a_record()
        record[t.ATTEMPTS_STATUS] = container(record[t.ATTEMPTS_STATUS])
        assert refused(record)
    record = a_record()
    record[t.GEN_AI_TOOL_NAME] = Tripwire()
    assert refused(record)
    record = a_record()
    record[t.ATTEMPTS_WAIT_MS] = (Tripwire(), 0)
    assert refused(record)
    assert Tripwire.calls == []


@pytest.mark.parametrize("raw", [None, [], "record", 3, [(t.SENT, 1)]])
def test_what_is_not_a_mapping_is_refused(raw: object) -> None:
    assert refused(raw)


BAD_VALUES = st.one_of(
    st.none(),
    st.floats(allow_nan=False),
    st.text(max_size=5),
    st.integers(-(2**70), -1),
    st.integers(2**63, 2**70),
    st.builds(StrSub, st.sampled_from(("compatibility", "none", "billing", "first"))),
    st.builds(IntSub, st.integers(0, 10)),
    st.binary(max_size=3),
)


GOOD_CELL = {
    t.ATTEMPTS_STATUS: 0,
    t.ATTEMPTS_FAILURE: "",
    t.ATTEMPTS_EFFECT: "none",
    t.ATTEMPTS_PERMISSION: "first",
    t.ATTEMPTS_WAIT_MS: 0,
}


@st.composite
def spoiled_records(draw: st.DrawFn) -> dict[Any, Any]:
    """A well-formed record with exactly one thing outside the allow-list."""
    record: dict[Any, Any] = draw(built_records(max_rows=4))
    how = draw(st.sampled_from(("unknown-key", "drop-key", "scalar", "cell", "ragged")))
    if how == "unknown-key":
        record[draw(st.text(max_size=20).filter(lambda k: k not in t.RECORD_KEYS))] = draw(BAD_VALUES)
    elif how == "drop-key":
        del record[draw(st.sampled_from(t.RECORD_KEYS))]
    elif how == "scalar":
        key = draw(st.sampled_from(t.RECORD_SCALAR_KEYS))
        record[key] = draw(BAD_VALUES.filter(lambda v: not validate_scalar(key, v)))
    elif how == "cell":
        key = draw(st.sampled_from(t.RECORD_COLUMN_KEYS))
        rows = len(record[key])
        if rows == 0:
            record[key] = (draw(BAD_VALUES),)  # also ragged: refused either way
        else:
            i = draw(st.integers(0, rows - 1))
            bad = draw(BAD_VALUES.filter(lambda v: not validate_cell(key, v)))
            record[key] = (*record[key][:i], bad, *record[key][i + 1 :])
    else:  # one column a cell short or a well-formed cell long
        key = draw(st.sampled_from(t.RECORD_COLUMN_KEYS))
        if record[key] and draw(st.booleans()):
            record[key] = record[key][:-1]
        else:
            record[key] = (*record[key], GOOD_CELL[key])
    return record


def validate_scalar(key: str, value: Any) -> bool:
    """Whether `value` is well-formed at `key`: by substitution into a known-good record."""
    record = a_record()
    record[key] = value
    return validate_record(record) is not None


def validate_cell(key: str, value: Any) -> bool:
    record = a_record()
    record[key] = (value, record[key][1])
    return validate_record(record) is not None


@settings(max_examples=300)
@given(spoiled_records())
def test_any_record_with_anything_outside_the_allow_list_is_refused_whole(record: dict[Any, Any]) -> None:
    assert validate_record(record) is None
    assert record_refusal(record) is not None


# --- the endpoint: a label or a bare origin ---------------------------------------------------


@pytest.mark.parametrize(
    "endpoint",
    ["billing", "a", "A.b-c_9", "x" * 64, "http://h:80", "https://api.example.com:443", "http://[::1]:8080"],
)
def test_an_endpoint_is_a_label_or_a_bare_origin(endpoint: str) -> None:
    assert is_endpoint(endpoint)


# --- building ----------------------------------------------------------------------------------


def test_rows_past_the_limit_keep_the_first_ones_and_the_last_and_count_the_rest() -> None:
    rows = [AttemptRow(429, "throttle", "unknown", "first" if i == 0 else "app", i) for i in range(150)]
    record = a_record(rows=rows, sent=150)
    assert record[t.OMITTED] == 50
    waits = record[t.ATTEMPTS_WAIT_MS]
    assert len(waits) == t.MAX_RECORD_ROWS
    assert waits == (*range(99), 149)
    assert validate_record(record) == record


def test_exactly_the_row_limit_omits_nothing() -> None:
    rows = [AttemptRow(0, "network", "unknown", "app", 0)] * t.MAX_RECORD_ROWS
    record = a_record(rows=rows)
    assert record[t.OMITTED] == 0
    assert len(record[t.ATTEMPTS_STATUS]) == t.MAX_RECORD_ROWS


def test_a_record_with_no_rows_is_well_formed() -> None:
    record = a_record(rows=[], sent=0, effect="none", may_have_run=False)
    assert record[t.ATTEMPTS_STATUS] == ()
    assert validate_record(record) == record


CANARY = "CANARY-7f3a"


@pytest.mark.parametrize(
    ("field", "key"),
    [
        ("endpoint", t.ENDPOINT),
        ("tool", t.GEN_AI_TOOL_NAME),
        ("policy", t.POLICY),
        ("effect", t.EFFECT),
        ("verdict", t.VERDICT),
    ],
)
def test_build_refuses_a_value_outside_the_list_naming_the_key_not_the_value(field: str, key: str) -> None:
    bad = f"https://u:{CANARY}@h/{CANARY}" if field == "endpoint" else f"{CANARY}\n"
    with pytest.raises(RecordRefused) as caught:
        a_record(**{field: bad})
    assert caught.value.field == key
    assert key in str(caught.value)
    assert CANARY not in f"{caught.value} {caught.value.args!r} {caught.value!r}"
    assert caught.value.__cause__ is None
    assert caught.value.__context__ is None


def test_build_refuses_a_row_outside_the_list() -> None:
    with pytest.raises(RecordRefused) as caught:
        a_record(rows=[AttemptRow(429, "throttle", "unknown", CANARY, 0)])  # type: ignore[arg-type]
    assert caught.value.field == t.ATTEMPTS_PERMISSION
    assert CANARY not in repr(caught.value)
    with pytest.raises(RecordRefused):
        a_record(rows=[(429, "throttle", "unknown", "first", 0)])


# --- the record of a call the plugin ran: only what came from outside is checked at build ------


@st.composite
def call_record_arguments(draw: st.DrawFn) -> dict[str, Any]:
    """Every argument call.py can give call_record: each word any of its typed words, each count a
    count, and the outside values (tool, request id, endpoint, statuses) any that pass."""
    return {
        "policy": draw(st.sampled_from(t.POLICIES)),
        "sent": draw(st.integers(0, 2**63 - 1)),
        "effect": draw(st.sampled_from(t.EFFECTS)),
        "verdict": draw(st.sampled_from(t.VERDICTS)),
        "may_have_run": draw(st.booleans()),
        "endpoint": draw(st.one_of(labels, origins)),
        "tool": draw(tool_names),
        "request_id": draw(request_ids),
        "rows": draw(st.lists(rows_st, max_size=t.MAX_RECORD_ROWS + 3)),
        "call_round": draw(st.integers(1, 2**63 - 1)),
    }


@settings(max_examples=300)
@given(call_record_arguments())
def test_every_record_the_plugin_builds_passes_the_full_allow_list(arguments: dict[str, Any]) -> None:
    record = call_record(**arguments)
    assert validate_record(record) == record
    assert record_refusal(record) is None
    assert record == build_record(**arguments)  # the same record, checked whole


def test_the_plugin_s_row_words_are_every_word_of_the_allow_list() -> None:
    # call_record trusts its rows' words because call.py writes them from these typed sets: the
    # strategy above draws from exactly the sets the allow-list accepts.
    assert set(AttemptRow.__annotations__) == {"status", "failure", "effect", "permission", "wait_ms"}
    for failure in ("", *t.FAILURES):
        for effect in t.EFFECTS:
            for permission in t.ATTEMPT_PERMISSIONS:
                row = AttemptRow(200, failure, effect, permission, 0)
                assert validate_record(call_record(**{**CALL, "rows": [row]})) is not None


CALL: dict[str, Any] = {
    "policy": "app-authorized",
    "sent": 1,
    "effect": "applied",
    "verdict": "completed",
    "may_have_run": False,
    "endpoint": "billing",
    "tool": "charge",
    "request_id": "7",
    "rows": [AttemptRow(200, "", "applied", "first", 0)],
    "call_round": 1,
}


@pytest.mark.parametrize(
    ("field", "bad", "key"),
    [
        ("tool", f"{CANARY}\n", t.GEN_AI_TOOL_NAME),
        ("tool", "x" * 257, t.GEN_AI_TOOL_NAME),
        ("request_id", "", t.JSONRPC_REQUEST_ID),
        ("request_id", f"{CANARY}\u202e", t.JSONRPC_REQUEST_ID),
        ("endpoint", f"https://u:{CANARY}@h/{CANARY}", t.ENDPOINT),
        ("rows", [AttemptRow(1000, "", "applied", "first", 0)], t.ATTEMPTS_STATUS),
        ("rows", [AttemptRow(99, "", "applied", "first", 0)], t.ATTEMPTS_STATUS),
        ("rows", [(200, "", "applied", "first", 0)], "rows (not AttemptRow)"),
    ],
)
def test_the_plugin_s_record_refuses_an_outside_value_naming_the_key_not_the_value(
    field: str, bad: Any, key: str
) -> None:
    with pytest.raises(RecordRefused) as caught:
        call_record(**{**CALL, field: bad})
    assert caught.value.field == key
    assert CANARY not in f"{caught.value} {caught.value.args!r} {caught.value!r}"


# --- a task-backed call's pair (SEP-2663) ---------------------------------------------------------


@pytest.mark.parametrize("status", t.TASK_STATUSES)
def test_a_task_backed_calls_record_holds_its_tasks_hash_and_status(status: str) -> None:
    record = a_record(task=("h:0123456789abcdef", status))
    assert set(record) == set(t.RECORD_KEYS + t.RECORD_TASK_KEYS)
    assert validate_record(record) == record


@pytest.mark.parametrize(
    ("key", "bad"),
    [
        (t.TASK, "raw-task-id-0123456789"),  # never the id itself
        (t.TASK, "h:0123456789ABCDEF"),
        (t.TASK, "h:0123"),
        (t.TASK, 7),
        (t.TASK_STATUS, "done"),
        (t.TASK_STATUS, None),
    ],
)
def test_a_task_value_outside_its_form_refuses_the_record(key: str, bad: Any) -> None:
    record = a_record(task=("h:0123456789abcdef", "completed"))
    record[key] = bad
    assert validate_record(record) is None
    assert record_refusal(record) == key


@pytest.mark.parametrize("key", t.RECORD_TASK_KEYS)
def test_half_of_the_task_pair_refuses_the_record(key: str) -> None:
    record = a_record(task=("h:0123456789abcdef", "completed"))
    del record[key]
    assert validate_record(record) is None
