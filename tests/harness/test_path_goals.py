"""Issue 44's goals for the path of one call, as benchmark 10 (`benchmarks/path.py`) measures it: a
tools/call on mcp 2.x (streamable HTTP, app-authorized) that the server refuses once with a 429
(`Retry-After: 0`) and then answers. Counted by real calls (a resumed coroutine is none): at most
45 hops between plugin modules, no module entered from two plugin modules within one attempt, and
no call back into a module already on the stack. The definitions are benchmarks/path.py's. The
profile runs in a process of its own, as the benchmark does: in one that ran other tests first, a
finalizer of their leftovers (a vouched span let go) can run inside the profiled call.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from typing import Any

import pytest
from benchmarks.path import ATTEMPT_OPENER

LOOP = "patches.series"  # the module whose loop opens a tool call's attempts
WIRE = "patches.wire"  # the module that tells what an attempt's exchange sent and got


ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def path() -> dict[str, Any]:
    """The profile's figures, run once for the module's tests (`python -m benchmarks.path`, which
    fails unless the tool ran once after its 429): it measures, it changes nothing."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks.path"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    out = run.stdout
    figures: dict[str, Any] = json.loads(out[out.index("{") :])
    return figures


def test_the_profiled_call_ran_after_its_429(path: dict[str, Any]) -> None:
    # The warm-up call's execution and the profiled call's one, after its 429 (which runs no tool).
    assert path["executions"] == 2


def test_the_path_holds_the_attempts(path: dict[str, Any]) -> None:
    """The goals below cannot pass on a path that missed the call: it went through the loop, the
    attempt and the wire, and both attempts each reached the wire."""
    assert {LOOP, ATTEMPT_OPENER[0], WIRE} <= set(path["call_path"]), path["call_path"]
    segments = path["attempt_segments"]
    assert len(segments) >= 2, segments
    assert all(WIRE in segment["call_path"] for segment in segments), segments


def test_at_most_45_hops(path: dict[str, Any]) -> None:
    # The number, not the benchmark's constant: a goal is not loosened by editing one file.
    assert path["hops"] == len(path["call_path"]) - 1
    assert path["hops"] <= 45, " -> ".join(path["call_path"])


def test_no_module_entered_twice_within_an_attempt(path: dict[str, Any]) -> None:
    assert path["entered_twice"] == [], "\n".join(path["entered_twice"])


def test_no_call_back_into_a_module_on_the_stack(path: dict[str, Any]) -> None:
    assert path["callbacks"] == 0, path["calls"]


DOCS = ("docs/architecture.md", "benchmarks/README.md")
MARK = "<!-- measured-path -->"


def printed_path(text: str) -> str:
    """The path a doc prints: the backquoted line after its mark."""
    after = text.split(MARK, 1)[1].strip().splitlines()[0]
    return after.strip().strip("`")


@pytest.mark.parametrize("doc", DOCS)
def test_the_docs_print_the_measured_path(path: dict[str, Any], doc: str) -> None:
    text = (ROOT / doc).read_text(encoding="utf-8")
    assert MARK in text, f"{doc} prints no measured path"
    assert printed_path(text) == " -> ".join(path["call_path"])


def test_a_printed_path_is_read() -> None:
    # The reader itself can fail: it reads the line after the mark, without its quotes.
    assert printed_path(f"x\n{MARK}\n`a -> b`\n\nmore") == "a -> b"
