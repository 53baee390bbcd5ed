"""How a cost grows is counted, never timed: the same count on any machine, under any load.

`work_of(run)` counts what `run()` does in Python: every line run (each loop iteration among them)
and every call made, a call into C included (a C call counts once, whatever it scans inside: the
standard library's and RE2's scans are linear; what this guards is the plugin's own loops and
calls). `assert_linear` counts a run at a size and at twice the size: twice the input may cost at
most LINEAR_RATIO times the work (a linear cost doubles, a quadratic one quadruples). Counts are
exact, so the sizes are small; pytest's timeout stays only as a guard against a hang.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

LINEAR_RATIO = 2.5  # linear: 2 (less with a fixed set-up cost); quadratic: 4


def work_of(run: Callable[[], object], warm: bool = True) -> int:
    """Lines run plus calls made (Python and C) by `run()` on this thread. A first, uncounted run
    fills whatever caches the code keeps (compiled patterns, imports), so that a count is of the
    work itself and a repeat of it gives the same number."""
    if warm:
        run()
    count = 0

    def on_line(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal count
        count += 1
        return on_line

    def on_call(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal count
        if event == "c_call":
            count += 1

    tracer, profiler = sys.gettrace(), sys.getprofile()
    sys.settrace(on_line)  # each Python call's "call" event and then its lines
    sys.setprofile(on_call)  # calls into C, which the tracer does not see
    try:
        run()
    finally:
        sys.setprofile(profiler)
        sys.settrace(tracer)
    return count


def assert_linear(case: Callable[[int], Callable[[], object]], size: int) -> tuple[int, int]:
    """`case(n)` makes the run for input size n (the making is not counted); the two counts."""
    small = work_of(case(size))
    large = work_of(case(2 * size))
    assert small > 0, "nothing was counted: the run did no Python work at all"
    assert large <= LINEAR_RATIO * small, f"{small} steps for {size}, then {large} for twice that"
    return small, large
