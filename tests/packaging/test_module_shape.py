"""The package stays a house a maintainer can live in: no module of src/otel_mcp_replay over 450
lines, no function over 60, and no circle in its import graph (an import under TYPE_CHECKING, or
inside a function, is an edge all the same: the modules still need each other); and no test imports
conftest or another test (what tests share lives in tests/support)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "otel_mcp_replay"
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 60


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _sources() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _imports(tree: ast.Module, module: str, known: set[str]) -> set[str]:
    """The package's modules `module` imports: `from a.b import c` is `a.b.c` when that is a module.
    The package imports itself by absolute names only (a relative import fails the test)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{module}: a relative import"
            base = node.module or ""
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                found.add(candidate if candidate in known else base)
    return {name for name in found if name in known and name != module}


def _graph() -> dict[str, set[str]]:
    sources = _sources()
    known = set(sources)
    return {
        module: _imports(ast.parse(path.read_text(encoding="utf-8")), module, known)
        for module, path in sources.items()
    }


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph[node]):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return circles


def test_no_module_is_over_its_limit() -> None:
    long = {
        name: lines
        for name, path in _sources().items()
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}


def test_no_function_is_over_its_limit() -> None:
    long: dict[str, int] = {}
    for name, path in _sources().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                assert node.end_lineno is not None
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long[f"{name}.{node.name}"] = lines
    assert long == {}


def test_the_import_graph_has_no_circle() -> None:
    assert _circles(_graph()) == []


def test_the_graph_is_read_whole() -> None:
    # The checks above pass on a graph without edges: it must hold the package's known imports,
    # a type-only one among them (sse.py's HttpLibrary, under TYPE_CHECKING).
    graph = _graph()
    assert len(graph) >= 30
    assert "otel_mcp_replay.call" in graph["otel_mcp_replay.patches.http_send"]
    assert "otel_mcp_replay.patches.wire" in graph["otel_mcp_replay.patches.sse"]


def test_a_circle_is_found() -> None:
    # The finder itself can fail: a circle of two, and one of three beside a module outside it.
    graph = {"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"e"}, "e": {"c"}, "f": {"a"}}
    assert _circles(graph) == [["a", "b"], ["c", "d", "e"]]


TESTS = ROOT / "tests"


def _test_imports_of_tests(source: str) -> list[str]:
    """What a test file imports of conftest or of another test module (tests/support is for that)."""
    found: list[str] = []
    names: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names.append(node.module or "")
    for name in names:
        parts = name.split(".")
        a_test = "conftest" in parts or any(part.startswith("test_") for part in parts)
        if a_test or (parts[0] == "tests" and parts[1:2] != ["support"]):
            found.append(name)
    return found


def test_no_test_imports_conftest_or_another_test() -> None:
    offenders = {
        str(path.relative_to(ROOT)): found
        for path in sorted(TESTS.rglob("*.py"))
        if (found := _test_imports_of_tests(path.read_text(encoding="utf-8")))
    }
    assert offenders == {}


def test_an_import_of_a_test_is_found() -> None:
    source = "import conftest\nfrom tests.transport.test_transport import x\nfrom tests import helpers\n"
    assert _test_imports_of_tests(source) == ["conftest", "tests.transport.test_transport", "tests"]
    assert _test_imports_of_tests("from tests.support.telemetry import records\nimport pytest\n") == []


def test_the_wire_is_a_leaf() -> None:
    # Issue 44: the wire tells only what it is handed; it knows no attempt, no call and no loop (an
    # attempt owns its exchange and reads what the wire wrote).
    knows = _graph()["otel_mcp_replay.patches.wire"]
    path = {"attempt", "call", "call_span", "ledger", "rounds", "tasks", "patches.series", "patches.session"}
    assert knows & {f"otel_mcp_replay.{name}" for name in path | {"patches.http_send"}} == set()
    assert "otel_mcp_replay.evidence" in knows  # read whole: the classification it asks
