"""The opcode benchmark (benchmarks/opcodes.py) counts what it says: the plugin's own frames only
where the plugin runs, and every counted call a call the server executed.

Its figure is read across commits (issue 23), so what it counts must not drift silently: a moved
package would make "the plugin's own opcodes" zero, a call that failed would be counted as cheap.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from benchmarks._common import declared
from benchmarks.opcodes import opcodes_per_call
from mcp import Client
from tests.support.bench import run_benchmark


@pytest.mark.anyio
async def test_the_count_sees_the_plugin_s_own_frames_only_in_its_arm(server: Any, instrument: Any) -> None:
    async with Client(server.url) as client:
        plain = await opcodes_per_call(client, 3, settle=1)
        assert server.counters.executions("search") == 4
        instrument(servers=declared(server.url))
        plugin = await opcodes_per_call(client, 3, settle=1)
    assert server.counters.executions("search") == 8  # each counted call ran once on the server
    assert plain.total > 0
    assert plain.own == 0  # no otel_mcp_replay frame runs with the plugin off
    assert plugin.own > 0
    # The plugin adds at least its own opcodes (and the SDK calls it makes besides).
    assert plugin.total > plain.total + plugin.own


def figure(text: str) -> float:
    return float(text.replace(",", ""))


def test_the_profile_by_function_sums_to_the_arm_s_own_count() -> None:
    """`--by-function` splits the both arm's own opcodes by the function that ran them: its rows add
    up to the own count of the run they come from, which counts what benchmark 9 counts of the same
    arm, and they name the plugin's functions."""
    out = run_benchmark("opcodes", "--by-function", "both", timeout=110)
    counts = re.search(
        r"own opcodes per call \(otel_mcp_replay frames\), the arm's count; this run's: "
        r"([\d,.]+); ([\d,.]+)",
        out,
    )
    summed = re.search(r"own opcodes per call, summed by function: ([\d,.]+)", out)
    assert counts is not None and summed is not None, out[:2000]
    arm, own = counts.group(1), counts.group(2)
    assert figure(own) > 0
    # Two runs agree exactly on an idle machine; under load a read can take one more suspension,
    # a few opcodes of the coroutines it resumes: the two counts are held to the same thing, not to
    # the same load.
    assert figure(own) == pytest.approx(figure(arm), rel=0.01)
    table = out[out.index("## opcodes per call by function") : out.index("## plugin frames entered")]
    rows = re.findall(
        r"^ *([\d,.]+) +[\d.]+% +([\d.]+) +([\d.]+)  (otel_mcp_replay[\w.]*):(\S+)$", table, re.M
    )
    assert rows, table
    # Per call over 20 calls: two decimals are exact, so the rows add up to the count to the hundredth.
    assert sum(figure(row[0]) for row in rows) == pytest.approx(figure(own), abs=1e-6)
    assert figure(summed.group(1)) == figure(own)
    functions = {(row[3], row[4]) for row in rows}
    assert len(functions) == len(rows)  # one row a function
    called = {(row[3], row[4]) for row in rows if figure(row[1]) >= 1}  # frames entered per call
    assert any(module == "otel_mcp_replay.call" for module, _ in functions), sorted(functions)
    assert any(module == "otel_mcp_replay.call" for module, _ in called)
