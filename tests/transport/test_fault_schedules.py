"""The reliability suite's fault schedules: what the plugin promises, under randomized faults.

Randomized fault schedules over the real server and a real TCP proxy (the rig:
tests/support/schedules.py), across both policies and the protocol eras the installed mcp line
speaks (harness/client.py ERAS), tools with and without `changes` and keys. Ground truth is the
server's (POSTs and executions per request id); the invariants are checked for every call. The
rest of the suite: test_exporter_down.py (the OTLP exporter refusing or hanging),
test_instrument_cycles.py (100 instrument/uninstrument cycles while calls run); fuzzed
declarations and environment values: test_fuzz_config.py.

Both mcp lines run it (scripts/test-lines: 1.30). Where the SDKs differ, the suite says so once:
what tears a session down (REFUSAL_TEARS_DOWN: on 1.x any 4xx/5xx the SDK is handed), and the
error class, client and HTTP library (harness/client.py). The invariants on the plugin are the same.

Seeds: every schedule is drawn from one seed, printed by the test (shown with a failure) and
written into every violation. `OTEL_MCP_REPLAY_RELIABILITY_SEED=<int>` replays a run. The quick
run (CI) uses a fixed seed; `--long` (at least 2,000 calls) draws a fresh one unless told.
"""

from __future__ import annotations

from typing import Any

import pytest
from tests.support.schedules import schedules_keep_every_invariant
from tests.support.telemetry import Telemetry

pytestmark = pytest.mark.anyio


async def test_randomized_fault_schedules_keep_every_invariant(telemetry: Telemetry, instrument: Any) -> None:
    """Quick size (CI): ~240 calls, every policy, era, tool and fault kind; a fixed seed."""
    await schedules_keep_every_invariant(telemetry, instrument, long_run=False)


@pytest.mark.timeout(1800)
async def test_randomized_fault_schedules_long_run(
    telemetry: Telemetry, instrument: Any, request: pytest.FixtureRequest
) -> None:
    """`--long`: at least 2,000 calls from a fresh seed (or OTEL_MCP_REPLAY_RELIABILITY_SEED)."""
    if not request.config.getoption("--long"):
        pytest.skip("the long reliability run needs --long")
    await schedules_keep_every_invariant(telemetry, instrument, long_run=True)
