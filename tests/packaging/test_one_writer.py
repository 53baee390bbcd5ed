"""Issue 55: one writer per fact of a request's ledger (ledger.RequestReplay), and one ending.

Read from the source (AST), not by importing it:
- every assignment (`=`, `+=`, an annotated one) to a ledger fact, `<...>.ledger.FACT` or
  `ledger.FACT` (a ledger read into a local), is in one module only, the attempt's: the request's
  attempts write what HTTP showed, the call only reads it;
- the call's end is built in one place: the record (`call_record`), the `Ending` it and the span are
  read from, and the calls metric (`calls.add`) are each made at exactly one site of the package.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from tests.support.shape import assigned_targets, class_fields

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "otel_mcp_replay"
WRITER = "attempt.py"


def ledger_facts() -> set[str]:
    return class_fields((PACKAGE / "ledger.py").read_text(encoding="utf-8"), "RequestReplay")


def _is_ledger(node: ast.expr) -> bool:
    """`ledger`, or anything's `.ledger`."""
    return (isinstance(node, ast.Name) and node.id == "ledger") or (
        isinstance(node, ast.Attribute) and node.attr == "ledger"
    )


def ledger_writers(sources: dict[str, str], facts: set[str]) -> dict[str, set[str]]:
    """Each ledger fact, and the modules that assign to it."""
    writers: dict[str, set[str]] = defaultdict(set)
    for module, source in sources.items():
        for node in ast.walk(ast.parse(source)):
            for target in assigned_targets(node):
                if isinstance(target, ast.Attribute) and target.attr in facts and _is_ledger(target.value):
                    writers[target.attr].add(module)
    return writers


def _sources() -> dict[str, str]:
    return {
        str(path.relative_to(PACKAGE)): path.read_text(encoding="utf-8") for path in PACKAGE.rglob("*.py")
    }


def test_each_ledger_fact_has_one_writer_the_attempt() -> None:
    facts = ledger_facts()
    writers = ledger_writers(_sources(), facts)
    assert set(writers) <= facts
    assert {fact: modules for fact, modules in writers.items() if modules != {WRITER}} == {}
    # Every fact is written (a fact no one writes is no fact): its one writer is the attempt.
    assert set(writers) == facts, sorted(facts - set(writers))


def test_a_second_writer_is_found() -> None:
    """The check can fail: a call that writes a fact, through any of the ledger's names, is found."""
    planted = {
        "attempt.py": "def f(owner):\n    ledger = owner.ledger\n    ledger.sent += 1\n",
        "call.py": "def g(self):\n    self.ledger.answer = 'result'\n    x.ledger.rows, y = (), 1\n",
    }
    writers = ledger_writers(planted, {"sent", "answer", "rows", "delivered"})
    assert writers == {"sent": {"attempt.py"}, "answer": {"call.py"}, "rows": {"call.py"}}


def _call_sites(sources: dict[str, str], name: str) -> list[str]:
    """The modules' calls of `name` (a function, or any object's method of that name)."""
    sites = []
    for module, source in sources.items():
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Call):
                func = node.func
                called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
                if called == name:
                    sites.append(module)
    return sites


def test_the_end_is_built_in_one_place() -> None:
    """The record, the ending the span's outcome is written from, and the calls metric: each made at
    one site (call.ToolCall.ended builds the record and the `Ending`; call_span.CallSpan.end writes
    the outcome and counts the call)."""
    sources = _sources()
    assert _call_sites(sources, "call_record") == ["call.py"]
    assert _call_sites(sources, "Ending") == ["call.py"]
    calls_metric = [
        module
        for module, source in sources.items()
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Attribute)
        and node.attr == "add"
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "calls"
    ]
    assert calls_metric == ["call_span.py"]


def test_tasks_are_one_module() -> None:
    """A task-backed call's behaviour is tasks.py's: the call and its span know a task only as what
    they read of it (call.Task), and only the seams that route a task's news import the module."""
    sources = _sources()
    importers = sorted(
        module
        for module, source in sources.items()
        for node in ast.walk(ast.parse(source))
        if (isinstance(node, ast.ImportFrom) and node.module == "otel_mcp_replay.tasks")
        or (
            isinstance(node, ast.ImportFrom)
            and node.module == "otel_mcp_replay"
            and any(alias.name == "tasks" for alias in node.names)
        )
    )
    assert importers == ["patches/http_send.py", "patches/series.py", "patches/session.py"]
