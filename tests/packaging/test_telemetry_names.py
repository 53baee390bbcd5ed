"""The names the code defines are docs/contract.md's, letter for letter, in both directions.

- Every name the code defines is in the contract: the string constants (and the words of the tuple
  constants) of `otel_mcp_replay.telemetry` and `otel_mcp_replay.environment_variables`, and the
  package's `__all__`.
- Every name in the contract is in the code, or in NOT_YET_EMITTED below: the names the contract
  promises that the code does not define yet. That list is committed and can only shrink: a name in
  it that the code now defines fails the test (take it out), and so does a name the contract no
  longer has.

How the contract's tables are read (docs/contract.md states the same): in a table whose first
column is headed `variable`, `key` or `name`, the backticked entries of that column are names; in a
column headed `values`, the backticked entries are the words a key or field may hold. Prose and any
other column are free text. A missing docs/contract.md fails every test here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import otel_mcp_replay
from otel_mcp_replay import environment_variables as ev
from otel_mcp_replay import telemetry as t

CONTRACT = Path(__file__).resolve().parents[2] / "docs" / "contract.md"
NAME_COLUMNS = {"variable", "key", "name"}
WORDS_COLUMN = "values"

# Promised by docs/contract.md, not defined by the code yet: the repeat guard, being built (its
# variable, its error, its context manager, and the word it writes on the call span). When the code
# defines one, this test fails until it is removed here; nothing is added here that the contract
# does not name.
NOT_YET_EMITTED: set[str] = set()

# The keys and declaration fields whose words the code spells in one tuple: the contract lists
# exactly those words for each (across all its tables), less what is not emitted yet.
WORDS_OF: dict[str, tuple[str, ...]] = {
    t.POLICY: t.POLICIES,
    t.FAILURE: t.FAILURES,
    t.EFFECT: t.EFFECTS,
    t.PERMISSION_BY: t.PERMISSIONS_BY,
    t.PERMISSION_ASSUMES: t.ASSUMPTIONS,
    t.DECLINED: (*t.DECLINED_REASONS, *t.CALL_DECLINED_REASONS),  # an attempt's, and the call's
    t.VERDICT: t.VERDICTS,
    t.ATTEMPTS_FAILURE: t.FAILURES,
    t.ATTEMPTS_EFFECT: t.EFFECTS,
    t.ATTEMPTS_PERMISSION: t.ATTEMPT_PERMISSIONS,
    "policy": t.POLICIES,
    "tools.<name>.on": t.DECLARABLE_KINDS,
    "adapter": t.ADAPTERS,
}


@dataclass
class Table:
    heading: str  # the last heading above it
    header: list[str]
    rows: list[list[str]] = field(default_factory=list)

    def column(self, index: int) -> list[str]:
        return [row[index] for row in self.rows if index < len(row)]


def _ticked(cells: Iterable[str]) -> list[str]:
    return [name for cell in cells for name in re.findall(r"`([^`]+)`", cell)]


@cache
def contract_tables() -> tuple[Table, ...]:
    assert CONTRACT.is_file(), f"{CONTRACT} is missing: the names the code defines are checked against it"
    tables: list[Table] = []
    heading, current, fenced = "", None, False
    for line in CONTRACT.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced, current = not fenced, None
        elif fenced:
            continue
        elif line.startswith("#"):
            heading, current = line.lstrip("#").strip(), None
        elif line.startswith("|"):
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if current is None:
                current = Table(heading, [cell.lower() for cell in cells])
                tables.append(current)
            elif not set("".join(cells)) <= set("-: "):  # not the separator row
                current.rows.append(cells)
        else:
            current = None
    return tuple(tables)


def contract_names() -> set[str]:
    """The names (first columns headed variable, key, name) and words (values columns)."""
    names: set[str] = set()
    for table in contract_tables():
        if table.header[0] in NAME_COLUMNS:
            names.update(_ticked(table.column(0)))
        if WORDS_COLUMN in table.header:
            names.update(_ticked(table.column(table.header.index(WORDS_COLUMN))))
    return names


def contract_words() -> dict[str, set[str]]:
    """For each key or field in a table with a values column: its words, over all such tables."""
    words: dict[str, set[str]] = {}
    for table in contract_tables():
        if WORDS_COLUMN in table.header:
            at = table.header.index(WORDS_COLUMN)
            for row in table.rows:
                for name in _ticked(row[:1]):
                    words.setdefault(name, set()).update(_ticked(row[at : at + 1]))
    return words


def contract_keys(heading: str) -> list[str]:
    (table,) = [x for x in contract_tables() if x.heading == heading and x.header[0] == "key"]
    return _ticked(table.column(0))


def code_names() -> set[str]:
    names: set[str] = set()
    for module in (t, ev):
        for constant, value in vars(module).items():
            if not constant.isupper():
                continue
            if isinstance(value, str):
                names.add(value)
            elif isinstance(value, tuple):
                names.update(word for word in value if isinstance(word, str))
    names.update(otel_mcp_replay.__all__)
    return names


def test_the_contract_is_in_the_repository() -> None:
    assert CONTRACT.is_file(), f"{CONTRACT} is missing"
    assert contract_names() >= {t.RECORD_EVENT, ev.OTEL_PYTHON_MCP_REPLAY_SERVERS}


def test_record_allow_list_is_the_contracts() -> None:
    assert set(t.RECORD_KEYS) == {
        "mcp.replay.policy",
        "mcp.replay.sent",
        "mcp.replay.effect",
        "mcp.replay.verdict",
        "mcp.replay.may_have_run",
        "mcp.replay.endpoint",
        "mcp.replay.omitted",
        "gen_ai.tool.name",
        "jsonrpc.request.id",
        "mcp.replay.round",
        "mcp.replay.attempts.status",
        "mcp.replay.attempts.failure",
        "mcp.replay.attempts.effect",
        "mcp.replay.attempts.permission",
        "mcp.replay.attempts.wait_ms",
    }
    assert len(t.RECORD_KEYS) == len(set(t.RECORD_KEYS))
    assert t.RECORD_EVENT == "mcp.tool.request_attempts"
    assert t.RECORD_TASK_KEYS == ("mcp.replay.task", "mcp.replay.task.status")  # a task-backed call's
    documented = contract_keys("The record")
    assert sorted(documented) == sorted(t.RECORD_KEYS + t.RECORD_TASK_KEYS)


def test_attempt_span_keys_are_the_contracts() -> None:
    documented = contract_keys("Attempt span attributes")
    assert sorted(documented) == sorted(t.ATTEMPT_SPAN_KEYS)


def test_every_name_the_code_defines_is_in_the_contract() -> None:
    missing = code_names() - contract_names()
    assert not missing, f"defined by the code, not in docs/contract.md: {sorted(missing)}"


def test_every_name_in_the_contract_is_in_the_code_or_not_yet_emitted() -> None:
    unknown = contract_names() - code_names() - NOT_YET_EMITTED
    assert not unknown, f"in docs/contract.md, neither in the code nor in NOT_YET_EMITTED: {sorted(unknown)}"


def test_not_yet_emitted_shrinks_as_the_code_catches_up() -> None:
    arrived = NOT_YET_EMITTED & code_names()
    assert not arrived, f"the code defines these now: remove them from NOT_YET_EMITTED: {sorted(arrived)}"
    gone = NOT_YET_EMITTED - contract_names()
    assert not gone, f"no longer in docs/contract.md: remove them from NOT_YET_EMITTED: {sorted(gone)}"


def test_each_key_holds_exactly_the_contracts_words() -> None:
    documented = contract_words()
    for key, words in WORDS_OF.items():
        listed = documented.get(key, set()) - NOT_YET_EMITTED
        assert listed == set(words), f"{key}: docs/contract.md {sorted(listed)}, the code {sorted(words)}"
