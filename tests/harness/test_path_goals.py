"""Issue 44's goals for the path of one call, as benchmark 10 (`benchmarks/path.py`) measures it: a
tools/call on mcp 2.x (streamable HTTP, app-authorized) that the server refuses once with a 429
(`Retry-After: 0`) and then answers, in both eras: its answer one JSON body (2026-07-28) or an event
stream (legacy). Counted by real calls (a resumed coroutine is none): at most 45 hops between plugin
modules, no call back into a module already on the stack, the law entered only by the policy within
an attempt (every decision asked once: the wire reads the request's, it asks none), and for the JSON
answer no module entered from two plugin modules within one attempt (with an event stream the attempt
is told by the loop and by its stream, and the outcome's evidence read by the wire and the
attempt: issue 55 goes on there). The definitions are benchmarks/path.py's. The
profile runs in a process of its own, as the benchmark does: in one that ran other tests first, a
finalizer of their leftovers (a vouched span let go) can run inside the profiled call.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from benchmarks.path import ATTEMPT_OPENER, ERAS
from tests.support.bench import ROOT, run_benchmark

LOOP = "patches.series"  # the module whose loop opens a tool call's attempts
WIRE = "patches.wire"  # the module that tells what an attempt's exchange sent and got


@pytest.fixture(scope="module", params=sorted(ERAS))
def era(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


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


def test_at_most_45_hops(path: dict[str, Any]) -> None:
    # The number, not the benchmark's constant: a goal is not loosened by editing one file.
    assert path["hops"] == len(path["call_path"]) - 1
    assert path["hops"] <= 45, " -> ".join(path["call_path"])


def test_no_module_entered_twice_within_an_attempt(path: dict[str, Any], era: str) -> None:
    if era == "stream":
        pytest.skip("with an event stream the attempt and evidence are entered from two modules still")
    assert path["entered_twice"] == [], "\n".join(path["entered_twice"])


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
MARKS = {"json": MARK, "stream": "<!-- measured-path: stream -->"}


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
