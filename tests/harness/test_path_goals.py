"""Issue 55's goals for the path of one call, as benchmark 10 (`benchmarks/path.py`) measures it: a
tools/call on mcp 2.x (app-authorized) that the server refuses once with a 429 (`Retry-After: 0`)
and then answers, in each of its four eras: its answer one JSON body (2026-07-28) or an event
stream (legacy), the legacy SSE transport, and a task-backed call (SEP-2663, polled to its end).
Counted by real calls (a resumed coroutine is none): at most 32 hops between plugin modules, no call
back into a module already on the stack, the law entered only by the policy within an attempt
(every decision asked once: the wire reads the request's, it asks none), no module entered from two
plugin modules within one attempt, and the tasks module entered by a task-backed call only. Where an
era does not meet a goal yet, the test says what the measure finds: a strict expected failure, so
that meeting it is noticed. The
definitions are benchmarks/path.py's. The profile runs in a process of its own, as the benchmark
does: in one that ran other tests first, a finalizer of their leftovers (a vouched span let go) can
run inside the profiled call. The task era needs fastmcp-tasks: it runs in the tasks environment
(scripts/test-lines), and is skipped where fastmcp-tasks is not installed.
"""

from __future__ import annotations

import json
from importlib.util import find_spec
from typing import Any

import pytest
from benchmarks.path import ATTEMPT_OPENER, ERAS, as_one
from tests.support.bench import ROOT, run_benchmark

LOOP = "patches.series"  # the module whose loop opens a tool call's attempts
WIRE = "patches.wire"  # the module that tells what an attempt's exchange sent and got


# The eras that do not meet a goal yet, with what the measure finds: a task-backed call is three
# exchanges (the 429, the creating request's 200, the poll), each entering the attempt, the wire,
# the evidence and the HTTP conventions, and its task's creation and its poll its own seams. Merging
# modules does not reach the goal: were the evidence the wire's, the HTTP conventions the attempt's,
# the policy the law's and the task ids tasks.py's (`--as-one`), it would still be 38.
MORE_HOPS = {"task": "42 hops: three exchanges, each through attempt, wire, evidence, conventions"}


@pytest.fixture(scope="module", params=sorted(ERAS))
def era(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    if name == "task" and find_spec("fastmcp_tasks") is None:
        pytest.skip("the task era needs fastmcp-tasks (the tasks environment, scripts/test-lines)")
    return name


def expect_failure(request: pytest.FixtureRequest, gaps: dict[str, str], era: str) -> None:
    """A goal `era` does not meet yet: its test must fail (strict), and says what it finds."""
    if era in gaps:
        request.applymarker(pytest.mark.xfail(strict=True, reason=f"{era}: {gaps[era]}"))


@pytest.fixture(scope="module")
def path(era: str) -> dict[str, Any]:
    """The profile's figures in `era`, run once for the module's tests (`python -m benchmarks.path
    ERA`, which fails unless the tool ran once after its 429): it measures, it changes nothing."""
    out = run_benchmark("path", era, timeout=120)
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


def test_the_hops_are_counted(path: dict[str, Any]) -> None:
    assert path["hops"] == len(path["call_path"]) - 1


def test_at_most_32_hops(path: dict[str, Any], era: str, request: pytest.FixtureRequest) -> None:
    # The number, not the benchmark's constant: a goal is not loosened by editing one file.
    expect_failure(request, MORE_HOPS, era)
    assert path["hops"] <= 32, " -> ".join(path["call_path"])


def test_no_module_entered_twice_within_an_attempt(path: dict[str, Any]) -> None:
    assert path["entered_twice"] == [], "\n".join(path["entered_twice"])


def test_only_a_task_backed_call_enters_the_tasks_module(path: dict[str, Any], era: str) -> None:
    assert ("tasks" in path["call_path"]) == (era == "task"), " -> ".join(path["call_path"])


def test_the_law_is_asked_only_by_the_policy_within_an_attempt(path: dict[str, Any]) -> None:
    """Every decision asked once: the law's word on a network failure is asked as the request is
    read (law.permit_on_network), and the wire reads it; within an attempt only the policy asks."""
    segments = path["attempt_segments"]
    assert any("law" in segment["entered"] for segment in segments), segments  # the 429's decision
    for segment in segments:
        assert set(segment["entered"].get("law", ["policy"])) == {"policy"}, segment


def test_no_call_back_into_a_module_on_the_stack(path: dict[str, Any]) -> None:
    assert path["callbacks"] == 0, path["calls"]


DOCS = ("docs/architecture.md", "benchmarks/README.md")
MARK = "<!-- measured-path -->"  # the JSON answer's path
MARKS = {era: MARK if era == "json" else f"<!-- measured-path: {era} -->" for era in ERAS}


def printed_path(text: str, mark: str = MARK) -> str:
    """The path a doc prints: the backquoted line after its mark."""
    after = text.split(mark, 1)[1].strip().splitlines()[0]
    return after.strip().strip("`")


@pytest.mark.parametrize("doc", DOCS)
def test_the_docs_print_the_measured_path(path: dict[str, Any], era: str, doc: str) -> None:
    text = (ROOT / doc).read_text(encoding="utf-8")
    mark = MARKS[era]
    assert mark in text, f"{doc} prints no measured path for {era}"
    assert printed_path(text, mark) == " -> ".join(path["call_path"])


def test_a_printed_path_is_read() -> None:
    # The reader itself can fail: it reads the line after the mark, without its quotes.
    assert printed_path(f"x\n{MARK}\n`a -> b`\n\nmore") == "a -> b"
    stream = MARKS["stream"]
    assert printed_path(f"{MARK}\n`a -> b`\n{stream}\n`c -> d`", stream) == "c -> d"


def test_modules_weighed_as_one_collapse_only_where_entered_one_after_the_other() -> None:
    # `--as-one`: a merge weighed before it is made. Two modules entered one after the other lose the
    # hop between them; merged modules apart lose none; a module not named stays as it is.
    path = ["series", "attempt", "wire", "evidence", "conventions", "attempt", "evidence", "series"]
    assert as_one(path, {"evidence": "wire"}) == [
        "series", "attempt", "wire", "conventions", "attempt", "wire", "series",
    ]  # fmt: skip
    assert as_one(path, {"evidence": "series"}) == [
        "series", "attempt", "wire", "series", "conventions", "attempt", "series",
    ]  # fmt: skip
    assert as_one(path, {"conventions": "attempt", "evidence": "wire"}) == [
        "series", "attempt", "wire", "attempt", "wire", "series",
    ]  # fmt: skip
    assert as_one(path, {}) == path
