"""Every Python the package claims is proven, and nothing version-specific in src/ goes untested.

scripts/test-pythons runs the suites on the oldest and the newest Python (PYTHONS); the main
environment's suite runs on the machine's python3 (MAIN_PYTHON). The classifiers name exactly
those versions, the oldest is requires-python's floor, and the README's install line says them.
VERSION_SPOTS lists each place of src/ that reads the running Python's version or a name only some
versions have, with the test that runs it; a spot found and not listed (or listed and gone) fails,
as does a listed test that the stages on the oldest and newest Python do not run. This file runs
in those stages too.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "src"
SCRIPT = (ROOT / "scripts" / "test-pythons").read_text(encoding="utf-8")
# scripts/test's python3 on the CI machine (pyenv's global): the main suite's Python.
MAIN_PYTHON = "3.11"

# What only some Pythons have, or what tells them apart.
VERSION_MODULES = {"tomllib", "tomli", "exceptiongroup", "typing_extensions", "taskgroup"}
VERSION_NAMES = {
    "version_info",
    "hexversion",
    "_is_gil_enabled",
    "ExceptionGroup",
    "BaseExceptionGroup",
    "TaskGroup",
    "StrEnum",
    "Self",
    "LiteralString",
    "TypeVarTuple",
    "Unpack",
    "override",
}
# (module under src/, what it reads): the test that runs it, in the stages of scripts/test-pythons.
_CONFIG_FILE_TEST = "tests/law/test_config.py::test_a_toml_config_file_is_read_by_the_running_pythons_parser"
VERSION_SPOTS = {
    ("otel_mcp_replay/config.py", "version_info"): _CONFIG_FILE_TEST,
    ("otel_mcp_replay/config.py", "import tomllib"): _CONFIG_FILE_TEST,
    ("otel_mcp_replay/config.py", "import tomli"): _CONFIG_FILE_TEST,
}


def _spots_of(tree: ast.AST) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
            found |= {alias.name for alias in node.names if alias.name in VERSION_NAMES}
        else:
            names = []
        found |= {f"import {name}" for name in names if name.split(".")[0] in VERSION_MODULES}
        if isinstance(node, ast.Attribute) and node.attr in VERSION_NAMES:
            found.add(node.attr)
        elif isinstance(node, ast.Name) and node.id in VERSION_NAMES:
            found.add(node.id)
        elif type(node).__name__ == "TryStar":  # except*: Python 3.11 and later only
            found.add("except*")
    return found


def version_spots() -> set[tuple[str, str]]:
    """Each (module, what) of src/ that is version-specific."""
    return {
        (path.relative_to(SOURCE).as_posix(), what)
        for path in sorted(SOURCE.rglob("*.py"))
        for what in _spots_of(ast.parse(path.read_text(encoding="utf-8")))
    }


def _array(name: str) -> list[str]:
    found = re.search(rf"^{name}=\((.*?)\)$", SCRIPT, re.M | re.S)
    assert found, f"scripts/test-pythons: no {name}"
    return found[1].split()


def _pythons() -> list[str]:
    found = re.search(r"^PYTHONS=\$\{PYTHONS:-([\d. ]+)\}$", SCRIPT, re.M)
    assert found, "scripts/test-pythons: no PYTHONS default"
    return found[1].split()


def _pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _classified() -> list[str]:
    prefix = "Programming Language :: Python :: "
    named = [c.removeprefix(prefix) for c in _pyproject()["project"]["classifiers"] if c.startswith(prefix)]
    return [v for v in named if re.fullmatch(r"3\.\d+", v)]


def _minor(version: str) -> tuple[int, int]:
    major, minor = version.split(".")
    return int(major), int(minor)


def test_every_version_specific_spot_of_src_is_listed_with_its_test() -> None:
    assert version_spots() == set(VERSION_SPOTS), (
        "a version-specific spot of src/ was added or removed: list it in VERSION_SPOTS with the "
        "test that runs it on the version it is for"
    )


def test_each_spots_test_runs_on_the_oldest_and_newest_python() -> None:
    suites = set(_array("PYTHON_SUITES_ANY_LINE")) | set(_array("PYTHON_SUITES_EACH_LINE"))
    for spot, test in VERSION_SPOTS.items():
        file, name = test.split("::")
        assert file in suites, f"{spot}: {file} is not run by scripts/test-pythons"
        text = (ROOT / file).read_text(encoding="utf-8")
        assert re.search(rf"^(async )?def {name}\(", text, re.M), f"{spot}: no test {test}"


def test_every_suite_the_stages_name_exists() -> None:
    for file in _array("PYTHON_SUITES_ANY_LINE") + _array("PYTHON_SUITES_EACH_LINE"):
        assert (ROOT / file).is_file(), file


def test_the_oldest_python_proven_is_the_floor_the_package_declares() -> None:
    floor = re.fullmatch(r">=\s*(3\.\d+)", _pyproject()["project"]["requires-python"])
    assert floor, "requires-python is not a plain floor"
    assert min(_pythons(), key=_minor) == floor[1]


def test_the_classifiers_and_the_readme_name_the_versions_proven() -> None:
    proven = sorted({*_pythons(), MAIN_PYTHON}, key=_minor)
    assert _classified() == proven
    # Every version between the oldest and the newest is proven: the README names the range.
    assert [_minor(v)[1] for v in proven] == list(range(_minor(proven[0])[1], _minor(proven[-1])[1] + 1))
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"Python {proven[0]} to {proven[-1]}" in readme
