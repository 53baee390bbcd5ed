"""Records built as the plugin builds them, then checked whole by the allow-list."""

from __future__ import annotations

from typing import Any

from otel_mcp_replay.record import AttemptRow, RecordRefused, call_record, record_refusal


def build_record(*, call_round: int = 1, **arguments: Any) -> dict[str, Any]:
    """The record `record.call_record` builds from `arguments`, checked whole as the redaction checks
    a record nobody vouched for: RecordRefused (naming the key at fault) for anything outside the
    allow-list, a word or count included (call_record trusts the plugin's own typed words)."""
    record = call_record(call_round=call_round, **arguments)
    refusal = record_refusal(record)
    if refusal is not None:
        raise RecordRefused(refusal)
    return record


def full_record(rows: int = 100, **overrides: Any) -> dict[str, Any]:
    """A record of `rows` throttled attempts (a full one by default), any field overridden."""
    listed = [AttemptRow(429, "throttle", "none", "app" if i else "first", 100) for i in range(rows)]
    fields: dict[str, Any] = {
        "policy": "app-authorized",
        "sent": rows,
        "effect": "none",
        "verdict": "failed",
        "may_have_run": False,
        "endpoint": "billing",
        "tool": "search",
        "request_id": "7",
        "rows": listed,
    }
    fields.update(overrides)
    return build_record(**fields)
