"""The test command's stages (scripts/stages.sh): a failing stage never stops the ones after it.

Scripts made here source the real library and run stages that pass, fail half-way, or are
skipped, directly and from a script of stages run as one stage (as scripts/test runs
scripts/test-lines); each run's summary, closing line and exit status are checked. scripts/test
and scripts/test-lines themselves are checked to run their steps as stages and end with the summary.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STAGES = ROOT / "scripts" / "stages.sh"
TIMEOUT_S = 60  # a guard against a hang only


def _script(path: Path, body: str) -> Path:
    path.write_text(f"#!/usr/bin/env bash\nset -euo pipefail\n. {STAGES}\n{body}\nfinish\n", encoding="utf-8")
    path.chmod(0o755)
    return path


def _run(script: Path, **more: str) -> subprocess.CompletedProcess[str]:
    # Not inside the stage that runs this suite (./scripts/test's pytest): a run of its own.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STAGES_", "SIDE_BY_SIDE"))} | more
    return subprocess.run(
        [str(script)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
        cwd=script.parent,
        env=env,
    )


def _summary(out: str) -> list[tuple[str, str]]:
    """(result, name) of each row of the summary."""
    rows = out[out.index("=== summary") :].splitlines()[1:]
    parsed = [re.fullmatch(r"  (\S+)\s+\d+s  (.+)", row) for row in rows]
    return [(m[1], m[2]) for m in parsed if m]


def test_a_failing_stage_does_not_stop_the_next_and_the_run_fails(tmp_path: Path) -> None:
    ran = tmp_path / "ran"
    script = _script(
        tmp_path / "main",
        f"""
half() {{ echo first >>{ran}; false; echo never >>{ran}; }}
stage half-way half
stage after bash -c 'echo after >>{ran}'
skip left-out "OFF=1"
""",
    )
    done = _run(script)
    assert done.returncode == 1
    # The stage stopped at its own failure (set -e inside it), and the next stage still ran.
    assert ran.read_text().split() == ["first", "after"]
    assert _summary(done.stdout) == [("FAIL", "half-way"), ("pass", "after"), ("skip", "left-out (OFF=1)")]
    assert done.stdout.rstrip().endswith("stages: 1 passed, 1 failed, 1 skipped")
    assert "half-way FAILED (exit 1); the next stages still run" in done.stderr


FAILING_TESTS = """
import pytest

def test_passes():
    pass

def test_fails():
    assert 1 + 1 == 3, "the sum is wrong"

@pytest.fixture
def broken():
    raise RuntimeError("the fixture broke")

def test_breaks(broken):
    pass
"""


def test_a_failing_pytest_stage_names_its_failed_tests_at_the_end(tmp_path: Path) -> None:
    # The end of a long run's output (what a reader of CI sees first) names each failed test under its
    # stage's row, by this suite's own hook (tests/conftest.py, loaded here as a plugin); a passing
    # test and a passing stage add nothing.
    (tmp_path / "test_three.py").write_text(FAILING_TESTS, encoding="utf-8")
    pytest = f"{sys.executable} -m pytest -q -p no:cacheprovider -p tests.conftest --rootdir {tmp_path}"
    body = f"""
cd {ROOT}
stage tests {pytest} {tmp_path / "test_three.py"}
stage passing {pytest} {tmp_path / "test_three.py"} -k passes
"""
    done = _run(_script(tmp_path / "main", body))
    assert done.returncode == 1, done.stderr
    assert _summary(done.stdout) == [("FAIL", "tests"), ("pass", "passing")]
    summary = done.stdout[done.stdout.index("=== summary") :].splitlines()
    assert summary[2:4] == [
        " " * 20 + "test_three.py::test_fails: AssertionError: the sum is wrong",
        " " * 20 + "test_three.py::test_breaks: RuntimeError: the fixture broke",
    ]
    assert summary[4].startswith("  pass ")


def test_all_passing_exits_zero(tmp_path: Path) -> None:
    done = _run(_script(tmp_path / "main", "stage one true\nstage two true"))
    assert done.returncode == 0, done.stderr
    assert _summary(done.stdout) == [("pass", "one"), ("pass", "two")]
    assert done.stdout.rstrip().endswith("stages: 2 passed, 0 failed, 0 skipped")


def test_a_script_of_stages_adds_them_to_its_callers_summary(tmp_path: Path) -> None:
    _script(tmp_path / "lines", "stage a false\nstage b true")
    done = _run(_script(tmp_path / "main", "stage before false\nstage lines ./lines\nstage last true"))
    assert done.returncode == 1
    # One summary: the caller's earlier failure is not the nested script's, nor counted twice.
    assert done.stdout.count("=== summary") == 1
    assert _summary(done.stdout) == [
        ("FAIL", "before"),
        ("FAIL", "lines: a"),
        ("pass", "lines: b"),
        ("(failed)", "lines: its stages above"),
        ("pass", "last"),
    ]
    assert done.stdout.rstrip().endswith("stages: 2 passed, 2 failed, 0 skipped")


def test_a_nested_script_that_breaks_outside_its_stages_fails_its_stage(tmp_path: Path) -> None:
    _script(tmp_path / "lines", "stage a true\nfalse")
    done = _run(_script(tmp_path / "main", "stage lines ./lines"))
    assert done.returncode == 1
    assert _summary(done.stdout) == [("pass", "lines: a"), ("FAIL", "lines (outside its stages)")]


def test_the_test_scripts_run_their_steps_as_stages() -> None:
    # A step is a script, a linter or an environment's suite; each must be the argument of `stage`,
    # never a command of its own, which under set -e would end the run at its first failure.
    step = re.compile(r"^\s*(\./scripts/|\.venv/bin/(ruff|mypy)|(line|otel|framework|on_python) )", re.M)
    for name, least in (("test", 8), ("test-lines", 8), ("test-beside", 4), ("test-pythons", 2)):
        text = (ROOT / "scripts" / name).read_text(encoding="utf-8")
        assert ". scripts/stages.sh" in text, name
        assert text.rstrip().endswith("\nfinish"), name
        assert step.search(text) is None, f"scripts/{name}: a step outside a stage: {step.search(text)}"
        assert len(re.findall(r"^\s*stage ", text, re.M)) >= least, name


# Each chain signals, then waits (bounded) for the other's signal: both pass only if they ran at once.
RENDEZVOUS = """
meet() {{
  touch "{dir}/$1"
  for _ in $(seq 300); do [ -e "{dir}/$2" ] && return 0; sleep 0.1; done
  return 1
}}
left() {{ stage left-meets meet left right; stage left-fails false; stage lines ./lines; }}
right() {{ stage right-meets meet right left; skip right-off "OFF=1"; }}
side_by_side left right
stage after true
"""


def test_chains_side_by_side_run_at_once_and_keep_their_own_summaries(tmp_path: Path) -> None:
    _script(tmp_path / "lines", "stage a true\nstage b false")
    done = _run(_script(tmp_path / "main", RENDEZVOUS.format(dir=tmp_path)))
    assert done.returncode == 1
    # A chain's rows stay together, in the order given; a nested script in a chain is still read off
    # its own log, though the other chain's stages ended meanwhile.
    assert _summary(done.stdout) == [
        ("pass", "left-meets"),
        ("FAIL", "left-fails"),
        ("pass", "lines: a"),
        ("FAIL", "lines: b"),
        ("(failed)", "lines: its stages above"),
        ("pass", "right-meets"),
        ("skip", "right-off (OFF=1)"),
        ("pass", "after"),
    ]
    assert done.stdout.rstrip().endswith("stages: 4 passed, 2 failed, 1 skipped")
    # Each chain's output is printed whole, the first given first.
    assert done.stdout.index("=== stage left-meets") < done.stdout.index("=== stage right-meets")
    assert done.stdout.index("=== stage left-fails") < done.stdout.index("=== stage right-meets")


def test_side_by_side_off_runs_the_chains_in_turn(tmp_path: Path) -> None:
    chains = "one() { stage one true; }\ntwo() { stage two false; }\nside_by_side one two"
    done = _run(_script(tmp_path / "main", chains), SIDE_BY_SIDE="0")
    assert done.returncode == 1
    assert _summary(done.stdout) == [("pass", "one"), ("FAIL", "two")]
    assert "=== side by side" not in done.stdout


def test_a_chain_that_breaks_outside_its_stages_fails_the_run(tmp_path: Path) -> None:
    chains = "one() { stage one true; }\nbroken() { exit 3; }\nside_by_side one broken"
    done = _run(_script(tmp_path / "main", chains))
    assert done.returncode == 1
    assert ("FAIL", "broken (outside its stages, exit 3)") in _summary(done.stdout)
    assert ("pass", "one") in _summary(done.stdout)


def test_a_python_the_machine_lacks_fails_its_stages_saying_so() -> None:
    # scripts/test-pythons itself, asked for a Python no machine has: each of its stages fails, named,
    # before any environment is built, and says which Python is missing; nothing is skipped.
    done = _run(ROOT / "scripts" / "test-pythons", PYTHONS="3.99", PYTHONS_1X="3.99")
    assert done.returncode == 1
    assert _summary(done.stdout) == [("FAIL", "Python 3.99, mcp 2.3.0"), ("FAIL", "Python 3.99, mcp 1.30.0")]
    assert done.stderr.count("no Python 3.99 on this machine") == 2
    assert not list(ROOT.glob(".venv-py-3.99-*"))


ENVIRONMENTS = ROOT / "scripts" / "environments.sh"


def _environment(root: Path, name: str, python: str) -> None:
    """root/NAME/bin/python: `python` run as that environment's interpreter (what it holds is
    python's own)."""
    bin_dir = root / name / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").write_text(f'#!/bin/sh\nexec "{python}" "$@"\n', encoding="utf-8")
    (bin_dir / "python").chmod(0o755)


def _same_as_main(root: Path, name: str) -> bool:
    done = subprocess.run(
        ["bash", "-c", f'. "{ENVIRONMENTS}"; same_as_main "$1"', "-", name],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
        cwd=root,
    )
    return done.returncode == 0


def test_an_environment_is_the_main_ones_only_when_the_main_holds_all_it_holds(tmp_path: Path) -> None:
    # What lets scripts/test-lines leave the newest OpenTelemetry end's suites to the main suite:
    # .venv-NAME holds nothing (Python included) that .venv does not hold at the same version.
    # This suite's environment holds the project and its test extra; the base interpreter holds
    # little of that, and none of it at another version.
    this, base = sys.executable, getattr(sys, "_base_executable", sys.executable)
    assert this != base  # the suite runs in a virtual environment, as every stage does
    _environment(tmp_path, ".venv", this)
    _environment(tmp_path, ".venv-same", this)
    _environment(tmp_path, ".venv-broken", "/nonexistent/python")
    main = tmp_path / "less"
    _environment(main, ".venv", base)
    _environment(main, ".venv-more", this)
    assert _same_as_main(tmp_path, "same")
    assert not _same_as_main(main, "more")  # it holds what the main one lacks
    assert not _same_as_main(tmp_path, "broken")  # unreadable: never the same
    assert not _same_as_main(tmp_path, "missing")
