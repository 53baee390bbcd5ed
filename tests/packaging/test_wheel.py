"""The wheel a user installs holds the plugin's modules and nothing else.

No harness (`harness/`: the demo, the fault-injecting server, the proxy, the OTLP receiver), no
tests, no benchmarks, and no plugin module importing what only they need (uvicorn,
opentelemetry-proto, pytest, ...). Two checks of that one rule:

- from pyproject's hatch configuration and the source tree: hatch packs `src/otel_mcp_replay` and
  nothing else, so its files are the wheel's. Needs no build tool: it runs everywhere.
- from a wheel built in process by hatchling (the build backend; the `test` extra installs it):
  offline, well under a second. Skipped, with that reason, only where hatchling is not installed.
  It also checks that the first check predicts the built wheel's files exactly.
"""

from __future__ import annotations

import re
import sys
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "otel_mcp_replay"
SOURCE = ROOT / "src" / PACKAGE
# The modules a plugin cannot do without: a wheel missing them is broken, not clean.
CORE = {f"{PACKAGE}/{name}" for name in ("__init__.py", "instrumentor.py", "telemetry.py", "py.typed")}
# Path parts that are never plugin code.
NOT_PLUGIN = {"demo", "harness", "tests", "test", "testing", "benchmarks", "examples", "scripts"}
# What only the harness and the tests import; a plugin module importing one of them is test code.
TEST_ONLY_IMPORT = re.compile(
    r"^\s*(?:from|import)\s+(harness|uvicorn|starlette|opentelemetry\.proto|pytest|hypothesis|rotel)\b",
    re.MULTILINE,
)


def assert_plugin_only(names: Iterable[str], read: Callable[[str], str]) -> None:
    """Every name is a plugin module (or the wheel's metadata); none is, or imports, test code."""
    names = list(names)
    assert set(names) >= CORE, f"plugin modules missing: {sorted(CORE - set(names))}"
    for name in names:
        path = PurePosixPath(name)
        if path.parts[0].startswith(f"{PACKAGE}-") and path.parts[0].endswith(".dist-info"):
            continue
        assert path.parts[0] == PACKAGE, f"outside {PACKAGE}/: {name}"
        test_code = any(p in NOT_PLUGIN or p.startswith("test_") or p == "conftest.py" for p in path.parts)
        assert not test_code, f"not plugin code: {name}"
        assert path.suffix == ".py" or path.name == "py.typed", f"not a plugin module: {name}"
        if path.suffix == ".py":
            found = TEST_ONLY_IMPORT.search(read(name))
            assert found is None, f"{name} imports {found.group(1) if found else ''}: test code"


def files_in_source_tree() -> set[str]:
    """The wheel's file names as hatch makes them from `packages = ["src/otel_mcp_replay"]`."""
    return {
        f"{PACKAGE}/{path.relative_to(SOURCE).as_posix()}"
        for path in SOURCE.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }


def test_the_wheel_configuration_packs_only_the_plugin_package() -> None:
    pyproject: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())
    build = pyproject["tool"]["hatch"]["build"]
    # Anything else (include, exclude, force-include, only-include, sources, artifacts, hooks, ...)
    # changes what hatch packs: then this check no longer predicts the wheel, so update it with it.
    assert set(build) == {"targets"}, f"global hatch build options: {sorted(set(build) - {'targets'})}"
    assert build["targets"]["wheel"] == {"packages": [f"src/{PACKAGE}"]}
    assert_plugin_only(sorted(files_in_source_tree()), lambda name: (SOURCE.parent / name).read_text())


def test_the_built_wheel_holds_only_the_plugin(tmp_path: Path) -> None:
    wheel_builder = pytest.importorskip(
        "hatchling.builders.wheel", reason="hatchling (in the test extra) builds the wheel"
    )
    (built,) = wheel_builder.WheelBuilder(str(ROOT)).build(directory=str(tmp_path), versions=["standard"])
    with zipfile.ZipFile(built) as wheel:
        names = wheel.namelist()
        assert_plugin_only(names, lambda name: wheel.read(name).decode())
    assert {name for name in names if name.startswith(f"{PACKAGE}/")} == files_in_source_tree()


@pytest.mark.parametrize("extra", ["", "[instruments]"])
def test_installing_the_wheel_keeps_the_apps_mcp(tmp_path: Path, extra: str) -> None:
    """pip, asked to install the built wheel (alone, and with its `instruments` extra) into this
    environment, would install nothing of mcp: whichever line the app has (this test runs on mcp 2.3
    and, in scripts/test-lines, next to LangChain's adapters on mcp 1.30) stays as it is."""
    import json
    import subprocess
    from importlib.metadata import version

    wheel_builder = pytest.importorskip(
        "hatchling.builders.wheel", reason="hatchling (in the test extra) builds the wheel"
    )
    (built,) = wheel_builder.WheelBuilder(str(ROOT)).build(directory=str(tmp_path), versions=["standard"])
    report = tmp_path / "report.json"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--quiet",
            "--report",
            str(report),
            built + extra,
        ],
        check=True,
        timeout=300,
    )
    installs = {
        item["metadata"]["name"].lower(): item["metadata"]["version"]
        for item in json.loads(report.read_text())["install"]
    }
    assert "mcp" not in installs, f"pip would change mcp {version('mcp')} to {installs.get('mcp')}"
    assert "otel-mcp-replay" in installs  # the report is of this wheel's install
