"""One truth for one fault in both protocol eras (issue 34): the same permission, the same failure
word, the same early end, whether the session speaks the legacy era (its answers streamed as SSE
events) or 2026-07-28 (answered with one JSON body), and on both mcp lines (scripts/test-lines runs
this file on 1.30, which speaks the legacy era only). Against the SDK's own server on loopback,
faults injected at the ASGI level, executions counted on the server.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from tests.support.calls import declared
from tests.support.telemetry import Telemetry, attempt_spans, records, the_record

from harness.client import Client, McpError
from harness.faults import DropMidBody, Status
from harness.server import ServerHandle
from otel_mcp_replay import UnknownEffectError
from otel_mcp_replay import telemetry as t

pytestmark = pytest.mark.anyio

KEYED = {"deduplicates": {"argument": "idempotency_key"}}
CHARGE = {"charge": {"changes": True, "on": ["network"]}}


async def test_a_keyed_call_cut_mid_answer_is_repeated_as_the_law_permits(
    server: ServerHandle, telemetry: Telemetry, instrument: Any, mode: str
) -> None:
    """The tool names `network` and the call carries its key: the law permits the repeat, in the
    legacy era too, where the answer is an event stream the SDK would have been reading."""
    instrument(servers=declared(server, CHARGE, **KEYED))
    server.faults.add("charge", DropMidBody())  # the tool ran; its answer is cut half-way
    async with Client(server.url, mode=mode) as client:
        with anyio.fail_after(20):
            result = await client.call_tool("charge", {"amount": 5, "idempotency_key": "k-5"})
    assert "charged 5" in result.content[0].text
    assert server.counters.tool_posts("charge") == 2  # repeated once ...
    assert server.counters.executions("charge") == 1  # ... and charged once: the key held
    assert server.counters.deduplicated("charge") == 1
    record = the_record(telemetry)
    assert (record[t.SENT], record[t.VERDICT]) == (2, "completed")
    assert record[t.ATTEMPTS_FAILURE] == ("network", "")
    assert record[t.ATTEMPTS_PERMISSION] == ("first", "app")


async def test_a_call_without_its_key_cut_mid_answer_says_why_it_is_not_repeated(
    server: ServerHandle, telemetry: Telemetry, instrument: Any, mode: str
) -> None:
    instrument(servers=declared(server, CHARGE, **KEYED))
    server.faults.add("charge", DropMidBody())
    async with Client(server.url, mode=mode) as client:
        with anyio.fail_after(20), pytest.raises(UnknownEffectError):
            await client.call_tool("charge", {"amount": 5})
    assert server.counters.tool_posts("charge") == 1 == server.counters.executions("charge")
    record = the_record(telemetry)
    assert (record[t.SENT], record[t.EFFECT], record[t.ATTEMPTS_FAILURE]) == (1, "unknown", ("network",))
    (attempt,) = attempt_spans(telemetry)
    assert (attempt.attributes or {})[t.DECLINED] == "changes-without-key"


async def test_a_callers_read_timeout_is_one_failure_word_in_both_eras(
    server: ServerHandle, telemetry: Telemetry, instrument: Any, mode: str
) -> None:
    """The caller gave up: no failure below the SDK, so never `network`, whether or not the
    response's headers had come; the law's `error`, and so never repeated."""
    instrument(servers=declared(server, {"slow": {"on": ["network"]}}))
    async with Client(server.url, mode=mode) as client:
        with anyio.fail_after(20), pytest.raises(McpError) as raised:
            await client.call_tool("slow", {"seconds": 1.0}, read_timeout_seconds=0.3)
    assert type(raised.value) is McpError  # the caller's own timeout, as the SDK raises it
    assert server.counters.wait_until(lambda c: c.executions("slow") == 1)
    record = the_record(telemetry)
    assert (record[t.SENT], record[t.EFFECT], record[t.ATTEMPTS_FAILURE]) == (1, "unknown", ("error",))
    (attempt,) = attempt_spans(telemetry)
    assert (attempt.attributes or {})[t.DECLINED] == "not-retryable"
    assert server.counters.tool_posts("slow") == 1


async def test_a_json_answer_to_another_id_ends_the_call_at_once(
    server: ServerHandle, telemetry: Telemetry, instrument: Any, mode: str
) -> None:
    """A whole 200 JSON body that does not answer the call's id: its answer will never come. Under
    app-authorized the call ends now with UnknownEffectError on both lines (no read timeout set:
    the SDK alone would wait for ever; the clock below only guards that hang)."""
    instrument(servers=declared(server, {"search": {"on": ["network"]}}))
    stray = {"jsonrpc": "2.0", "id": 999_999, "result": {"content": []}}
    server.faults.add("search", Status(200, body=stray, headers={"content-type": "application/json"}))
    async with Client(server.url, mode=mode) as client:
        with anyio.fail_after(20), pytest.raises(UnknownEffectError):
            await client.call_tool("search", {"query": "q"})
        after = await client.call_tool("search", {"query": "again"})  # the session lives on
    assert "again" in after.content[0].text
    assert server.counters.tool_posts("search") == 2
    assert server.counters.executions("search") == 1  # the stray answer was the fault's, not the tool's
    first = records(telemetry)[0]
    assert (first[t.SENT], first[t.EFFECT], first[t.MAY_HAVE_RUN]) == (1, "unknown", True)
    assert (first[t.ATTEMPTS_STATUS], first[t.ATTEMPTS_FAILURE]) == ((200,), ("error",))
