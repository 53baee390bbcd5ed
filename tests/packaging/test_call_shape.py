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

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "otel_mcp_replay"
MAX_TOOLCALL_FIELDS = 24
MAX_ATTEMPT_ENTRY_POINTS = 5

_Function = ast.FunctionDef | ast.AsyncFunctionDef
_PROPERTIES = {"property", "cached_property"}
_NOT_FIELDS = _PROPERTIES | {"classmethod", "staticmethod"}


def _name_of(node: ast.expr) -> str:
    """The last name of a decorator or a callee: `property`, `functools.cached_property`, `x.setter`."""
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def _decorators(function: _Function) -> set[str]:
    return {_name_of(decorator) for decorator in function.decorator_list}


def _is_property(function: _Function) -> bool:
    names = _decorators(function)
    return bool(names & _PROPERTIES) or bool(names & {"setter", "getter", "deleter"})


def _class(tree: ast.Module, name: str) -> ast.ClassDef:
    found = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == name]
    assert found, f"no class {name}"
    return found[0]


def _targets(node: ast.AST) -> list[ast.expr]:
    """What an assignment statement assigns to, tuples and lists unpacked."""
    if isinstance(node, ast.Assign):
        pending = list(node.targets)
    elif isinstance(node, ast.AnnAssign | ast.AugAssign):
        pending = [node.target]
    else:
        return []
    targets: list[ast.expr] = []
    while pending:
        target = pending.pop()
        if isinstance(target, ast.Tuple | ast.List):
            pending.extend(target.elts)
        elif isinstance(target, ast.Starred):
            pending.append(target.value)
        else:
            targets.append(target)
    return targets


def _self_fields(method: _Function) -> set[str]:
    """The attributes a method assigns on its instance (a classmethod's, on its class)."""
    parameters = method.args.posonlyargs + method.args.args
    if "staticmethod" in _decorators(method) or not parameters:
        return set()
    this = parameters[0].arg
    return {
        target.attr
        for node in ast.walk(method)
        for target in _targets(node)
        if isinstance(target, ast.Attribute)
        and isinstance(target.value, ast.Name)
        and target.value.id == this
    }


def class_fields(source: str, name: str) -> set[str]:
    """The distinct attribute names of class `name` in `source` (this module's docstring says which)."""
    fields: set[str] = set()
    for node in _class(ast.parse(source), name).body:
        if isinstance(node, _Function):
            fields |= _self_fields(node)  # its name is no field, what it assigns is
            continue
        value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
        if value is not None and _name_of(value) in _NOT_FIELDS:
            continue  # `x = property(...)` and the like: no field
        fields |= {
            target.id
            for target in _targets(node)
            if isinstance(target, ast.Name) and not (target.id.startswith("__") and target.id.endswith("__"))
        }
    return fields


def _is_protocol(node: ast.ClassDef) -> bool:
    return any(
        _name_of(base.value if isinstance(base, ast.Subscript) else base) == "Protocol" for base in node.bases
    )


def entry_points(source: str) -> set[str]:
    """The public functions and methods of `source` (this module's docstring says which)."""
    found: set[str] = set()
    for node in ast.parse(source).body:
        if isinstance(node, _Function):
            found.add(node.name)
        elif isinstance(node, ast.ClassDef) and not _is_protocol(node):
            found |= {
                f"{node.name}.{method.name}"
                for method in node.body
                if isinstance(method, _Function) and not _is_property(method)
            }
    return {name for name in found if not name.rpartition(".")[2].startswith("_")}


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
