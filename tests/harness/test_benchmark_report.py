"""Issue 55: the benchmark report prints the versions it measured, with the skeleton and the floor
beside the plugin, so a dependency's change is told apart from the plugin's.

Each section is run as `python -m benchmarks` runs it (a process of its own; the overhead section
with `--quick`: its figures are not read here, only what it prints beside them).
"""

from __future__ import annotations

import platform
import re
from importlib import metadata

import pytest
from tests.support.bench import run_benchmark

# Named here, not imported from the benchmarks: a version the report stopped printing fails here.
PEER = "opentelemetry-instrumentation-httpx"  # its HTTPX2ClientInstrumentor
MEASURED = ("mcp", "httpx2", "opentelemetry-api", "opentelemetry-sdk", PEER)
SECTIONS = {"opcodes": (), "overhead": ("--quick",)}
LEAST = ("plugin", "skeleton", "floor")


def installed(distribution: str) -> bool:
    try:
        metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return False
    return True


@pytest.fixture(scope="module", params=sorted(SECTIONS))
def report(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return run_benchmark(name, *SECTIONS[name], timeout=280)


@pytest.mark.timeout(300)
def test_the_versions_measured_are_printed_above_the_figures(report: str) -> None:
    line = next((line for line in report.splitlines() if line.startswith("Versions measured: ")), None)
    assert line is not None, report[:1000]
    assert report.index(line) < report.index("| metric |")  # at the top, before any figure
    wanted = [*MEASURED, *(["fastmcp"] if installed("fastmcp") else [])]
    for distribution in wanted:
        assert f"{distribution} {metadata.version(distribution)}" in line, distribution
    assert f"python {platform.python_version()} " in line
    assert f"{PEER} {metadata.version(PEER)} (the peer)" in line


@pytest.mark.timeout(300)
def test_the_skeleton_and_the_floor_stand_beside_the_plugin(report: str) -> None:
    rows = re.findall(r"^\| plugin, skeleton, floor: ([^|]+) \| ([^|]+) \|", report, re.M)
    assert len(rows) >= 2, report[:2000]  # a cost and a ratio to the peer's
    assert any("peer-added" in metric for metric, _ in rows), rows
    number = (
        r"(?:[+-]?[\d,.]+|n/a)"  # n/a: a quick run under load can have no round with the peer above plain
    )
    for metric, value in rows:
        figures = re.fullmatch(
            "; ".join(rf"{arm} {number}(?:, {number} us)?" for arm in LEAST), value.strip()
        )
        assert figures is not None, (metric, value)
    # Each also on lines of its own.
    for arm in ("skeleton", "floor"):
        assert re.search(rf"^\| (opcodes per call, )?{arm}[:;]", report, re.M), arm
