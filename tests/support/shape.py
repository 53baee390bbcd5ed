"""The shape of the call's core read from its source (AST), for the packaging tests: a class's
fields, a module's entry points (tests/packaging/test_call_shape.py says what each counts), what a
statement assigns to."""

from __future__ import annotations

import ast

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


def assigned_targets(node: ast.AST) -> list[ast.expr]:
    """What an assignment (`=`, `+=`, annotated) assigns to, tuples, lists and starred targets unpacked."""
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
        for target in assigned_targets(node)
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
            for target in assigned_targets(node)
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
