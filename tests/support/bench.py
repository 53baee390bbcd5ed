"""A benchmark run as the tests read it: `python -m benchmarks.<name> ARGS` from the repo's root, in a
process of its own (a process that ran other tests first could run their leftovers' finalizers
inside what the benchmark counts)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def run_benchmark(name: str, *args: str, timeout: float) -> str:
    """Its standard output; the run must succeed (its error's tail is the assertion's message)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{name}", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout
