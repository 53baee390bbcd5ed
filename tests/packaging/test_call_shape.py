"""Issue 44's shape of the call's core, read from the source (AST), not by importing it.

- `ToolCall` (src/otel_mcp_replay/call.py) has at most 24 fields: the distinct attribute names of the
  class, that is, its class-level assignments and annotations that are not methods, properties or
  classmethods (dunder names such as `__slots__` are not fields), and every `self.NAME = ...`,
  `self.A, self.B = ...`, `self.NAME: T = ...` and `self.NAME += ...` in its methods, a property's
  setter and a classmethod's `cls.NAME = ...` too (so no state hides there), nested functions
  included (`self` is a method's first parameter, whatever its name).
- The attempt (src/otel_mcp_replay/attempt.py) has at most 5 entry points: its public functions
  (no leading underscore, not dunder) defined at module level or as methods of its module-level
  classes. A property is state, not an entry point, and a Protocol class's members are what the
  attempt asks of others: both are left out. Functions nested in functions are no entry points.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.shape import class_fields, entry_points

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "otel_mcp_replay"
MAX_TOOLCALL_FIELDS = 24
MAX_ATTEMPT_ENTRY_POINTS = 5


def _source(module: str) -> str:
    return (PACKAGE / module).read_text(encoding="utf-8")


def test_toolcall_has_at_most_24_fields() -> None:
    fields = class_fields(_source("call.py"), "ToolCall")
    assert len(fields) <= MAX_TOOLCALL_FIELDS, f"{len(fields)} fields: {sorted(fields)}"


def test_the_attempt_has_at_most_5_entry_points() -> None:
    found = entry_points(_source("attempt.py"))
    assert len(found) <= MAX_ATTEMPT_ENTRY_POINTS, f"{len(found)} entry points: {sorted(found)}"


def test_the_field_count_counts() -> None:
    """A count of 0 would pass the goal: the counter finds each kind of field, and no method."""
    source = """
import functools

class ToolCall:
    __slots__ = ()
    request_id: object = None
    tool: str
    attempts = 0
    of = classmethod(lambda cls: cls)
    size = property(lambda self: 0)

    def __init__(self, tool: str) -> None:
        self.tool = tool
        self.span, (self.context, *self.rows) = None, (None,)

    @property
    def state(self) -> int:
        return self.attempts

    @state.setter
    def state(self, value: int) -> None:
        self.hidden = value

    @functools.cached_property
    def cached(self) -> int:
        return 1

    @classmethod
    def made(cls) -> None:
        cls.shared = 1

    def bind(self) -> None:
        self.attempts += 1
        self.route: str | None = None

        def later() -> None:
            self.later = True
"""
    assert class_fields(source, "ToolCall") == {
        "request_id",
        "tool",
        "attempts",
        "span",
        "context",
        "rows",
        "route",
        "later",
        "hidden",
        "shared",
    }
    three = "class ToolCall:\n    a = 1\n    b: int\n    def f(self):\n        self.c = 2\n"
    assert class_fields(three, "ToolCall") == {"a", "b", "c"}


def test_the_entry_point_count_counts() -> None:
    """A count of 0 would pass the goal: the counter finds module functions and methods."""
    source = """
from typing import Protocol

class AttemptsCall(Protocol):
    def wait(self) -> None: ...

def open_attempt() -> None: ...
def _span_of() -> None: ...

class Attempt:
    def __aenter__(self) -> None: ...
    @property
    def state(self) -> int: ...
    def decided(self) -> None:
        def inner() -> None: ...
    def _done(self) -> None: ...
"""
    assert entry_points(source) == {"open_attempt", "Attempt.decided"}


# Issue 55: one call's state is its ToolCall's, its request's ledger's and its span's fields.
MAX_CALL_STATE_FIELDS = 30
CALL_STATE = (("call.py", "ToolCall"), ("ledger.py", "RequestReplay"), ("call_span.py", "CallSpan"))


def test_one_call_holds_at_most_30_fields_of_state() -> None:
    counts = {name: len(class_fields(_source(module), name)) for module, name in CALL_STATE}
    assert all(counts.values()), counts  # each class is found and counted
    assert sum(counts.values()) <= MAX_CALL_STATE_FIELDS, counts
