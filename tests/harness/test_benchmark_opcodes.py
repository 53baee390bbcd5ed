"""The opcode benchmark (benchmarks/opcodes.py) counts what it says: the plugin's own frames only
where the plugin runs, and every counted call a call the server executed.

Its figure is read across commits (issue 23), so what it counts must not drift silently: a moved
package would make "the plugin's own opcodes" zero, a call that failed would be counted as cheap.
"""

from __future__ import annotations

from typing import Any

import pytest
from benchmarks._common import declared
from benchmarks.opcodes import opcodes_per_call
from mcp import Client

pytestmark = pytest.mark.anyio


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
