"""The names in telemetry.py are CONTRACT.md's, letter for letter."""

from __future__ import annotations

import re
from pathlib import Path

from otel_mcp_replay import telemetry as t

CONTRACT = Path(__file__).resolve().parents[2] / "shared" / "CONTRACT.md"


def test_record_allow_list_is_the_contracts() -> None:
    assert set(t.RECORD_KEYS) == {
        "mcp.replay.policy",
        "mcp.replay.sent",
        "mcp.replay.effect",
        "mcp.replay.verdict",
        "mcp.replay.may_have_run",
        "mcp.replay.endpoint",
        "mcp.replay.omitted",
        "gen_ai.tool.name",
        "jsonrpc.request.id",
        "mcp.replay.attempts.status",
        "mcp.replay.attempts.failure",
        "mcp.replay.attempts.effect",
        "mcp.replay.attempts.permission",
        "mcp.replay.attempts.wait_ms",
    }
    assert len(t.RECORD_KEYS) == len(set(t.RECORD_KEYS))
    assert t.RECORD_EVENT == "mcp.tool.request_attempts"


def test_every_attempt_key_is_named_in_the_contract() -> None:
    if not CONTRACT.exists():  # a clone without shared/ beside it: the literal check above still ran
        return
    text = CONTRACT.read_text()
    named = set(re.findall(r"`([a-z_.]+\.[a-z_.]+)`", text))
    for key in (*t.ATTEMPT_SPAN_KEYS, *t.RECORD_KEYS):
        assert key in named, key
