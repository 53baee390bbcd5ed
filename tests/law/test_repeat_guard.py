"""The repeat guard: a changing call without its key, identical to one that failed with its effect
unknown moments ago, is refused before anything is sent; the app repeats it only on purpose."""

from __future__ import annotations

import logging
import secrets
import sys
import tracemalloc
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from tests.support.calls import declared
from tests.support.telemetry import Telemetry, records

from harness.faults import DropAfterExecution, Throttle
from harness.server import ServerHandle
from otel_mcp_replay import RepeatRefusedError, UnknownEffectError, repeat_confirmed
from otel_mcp_replay import telemetry as t
from otel_mcp_replay.guard import ENTRY_BYTES, MEMORY_BYTES, RepeatGuard
from otel_mcp_replay.guard_store import CLEARED

pytestmark = pytest.mark.anyio

EMAIL = {"to": "ada@example.com", "body": "hello"}


GUARDED = {"send_email": {"changes": True, "on": ["network"]}, "charge": {"changes": True, "on": ["network"]}}
KEYED = {"argument": "idempotency_key"}


def call_spans(telemetry: Telemetry) -> list[Any]:
    return [
        s
        for s in telemetry.spans()
        if s.name.startswith(t.CALL_SPAN_PREFIX)
        and s.instrumentation_scope is not None
        and s.instrumentation_scope.name == t.INSTRUMENTATION_NAME
    ]


async def test_a_retry_layer_repeating_a_call_that_may_have_run_is_refused_before_sending(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    instrument(servers=declared(server, GUARDED, deduplicates=KEYED))
    server.faults.add("send_email", DropAfterExecution())
    async with Client(server.url) as client:
        with anyio.fail_after(10), pytest.raises(UnknownEffectError):
            await client.call_tool("send_email", EMAIL)
        with anyio.fail_after(10), pytest.raises(RepeatRefusedError) as refused:
            await client.call_tool("send_email", dict(EMAIL))  # a new call, identical
        assert refused.value.__cause__ is None
        assert "send_email" in str(refused.value) and "ada@" not in str(refused.value)
        assert server.counters.executions("send_email") == 1  # ran once: the repeat never left
        assert server.counters.tool_posts("send_email") == 1
        # Another message is another call: it goes.
        assert (await client.call_tool("send_email", {**EMAIL, "body": "other"})).is_error is False
    first, second, third = records(telemetry)
    assert (first[t.MAY_HAVE_RUN], first[t.EFFECT]) == (True, "unknown")
    assert (second[t.VERDICT], second[t.SENT], second[t.EFFECT]) == ("failed", 0, "none")
    assert third[t.VERDICT] == "completed"
    declined = [(s.attributes or {}).get(t.DECLINED) for s in call_spans(telemetry)]
    assert declined == [None, "repeat-of-unknown", None]


async def test_the_app_repeats_on_purpose_inside_repeat_confirmed(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    instrument(servers=declared(server, GUARDED, deduplicates=KEYED))
    server.faults.add("send_email", DropAfterExecution())
    async with Client(server.url) as client:
        with anyio.fail_after(10), pytest.raises(UnknownEffectError):
            await client.call_tool("send_email", EMAIL)
        with repeat_confirmed():
            assert (await client.call_tool("send_email", EMAIL)).is_error is False
        # Completed: nothing is left to check, so the same call goes again.
        assert (await client.call_tool("send_email", EMAIL)).is_error is False
    assert server.counters.executions("send_email") == 3


async def test_a_call_carrying_its_key_is_never_held_back(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    """The key protects it: the server deduplicates, so the guard stays out of the way."""
    instrument(servers=declared(server, GUARDED, deduplicates=KEYED))
    server.faults.add("charge", DropAfterExecution())
    server.faults.add("charge", DropAfterExecution())
    server.faults.add("charge", DropAfterExecution())
    args = {"amount": 5, "idempotency_key": "order-1"}
    async with Client(server.url) as client:
        with anyio.fail_after(20), pytest.raises(UnknownEffectError):
            await client.call_tool("charge", args)  # three attempts, all cut
        assert (await client.call_tool("charge", args)).is_error is False
    assert server.counters.executions("charge") == 1


async def test_a_refusal_received_is_an_answer_and_arms_nothing(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    """A 429 (not repeated for a changing tool without its key) is an answer, yet its effect is
    unknown: under either policy the same call is then held back until the app checks."""
    instrument(servers=declared(server, GUARDED, "compatibility", deduplicates=KEYED))
    server.faults.add("send_email", Throttle("0"))
    async with Client(server.url) as client:
        with anyio.fail_after(10), pytest.raises(MCPError):  # the SDK's own error, under compatibility
            await client.call_tool("send_email", EMAIL)
        with anyio.fail_after(10), pytest.raises(RepeatRefusedError):
            await client.call_tool("send_email", EMAIL)
    assert server.counters.tool_posts("send_email") == 1


def test_the_guard_remembers_a_keyed_hash_for_its_window_and_at_most_its_bound(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [100.0]
    forgotten: list[int] = []
    guard = RepeatGuard(
        10.0, max_bytes=2 * ENTRY_BYTES, clock=lambda: now[0], forgot=lambda: forgotten.append(1)
    )
    a = guard.fingerprint("http://h/mcp", "send_email", EMAIL)
    b = guard.fingerprint("http://h/mcp", "send_email", {"body": "hello", "to": "ada@example.com"})
    assert a is not None and a == b and len(a) == 32  # key order does not matter; a hash, not text
    assert b"ada" not in a
    assert RepeatGuard(10.0).fingerprint("http://h/mcp", "send_email", EMAIL) != a  # keyed per guard
    guard.remember(a)
    assert guard.refuses(a)
    now[0] += 10.0
    assert not guard.refuses(a) and len(guard) == 0  # the window passed
    c = guard.fingerprint("http://h/mcp", "x", 1)
    d = guard.fingerprint("http://h/mcp", "y", 2)
    e = guard.fingerprint("http://h/mcp", "z", 3)
    assert c is not None and d is not None and e is not None
    guard.remember(a)
    now[0] += 10.0  # a's window passed: making room for it forgets nothing
    guard.remember(c)
    guard.remember(d)
    assert forgotten == [] and not caplog.records
    with caplog.at_level(logging.WARNING, "otel_mcp_replay"):
        guard.remember(e)  # c is still in its window: forgotten, counted and said
        guard.remember(a)  # and d: counted, said once
    assert len(guard) == 2 and not guard.refuses(c) and not guard.refuses(d) and guard.refuses(e)
    assert forgotten == [1, 1]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and t.METRIC_GUARD_FORGOTTEN in warnings[0]
    assert guard.fingerprint("http://h/mcp", "x", object()) is None  # not JSON data: not guarded
    with repeat_confirmed():
        assert not guard.refuses(e)
    assert guard.refuses(e)


def test_every_call_armed_in_the_window_is_refused_far_past_a_few_thousand() -> None:
    """The process that armed a call refuses it for its whole window, however many it armed (here
    20,000, five times what it once remembered): the store may lose any of them."""
    forgotten: list[int] = []
    guard = RepeatGuard(600.0, forgot=lambda: forgotten.append(1))
    armed = [guard.fingerprint("http://h/mcp", "charge", {"amount": n}) for n in range(20_000)]
    for fingerprint in armed:
        assert fingerprint is not None
        guard.remember(fingerprint)
    assert all(guard.refuses(f) for f in armed if f is not None)
    assert len(guard) == 20_000 and forgotten == []
    assert MEMORY_BYTES // ENTRY_BYTES > 40_000  # the default bound, in calls


def test_an_entry_takes_no_more_than_the_bound_counts_it() -> None:
    """ENTRY_BYTES is what the byte bound counts per call: measured on the fullest entry (its hash,
    its expiry, and the clear's token its arm replaced in the store)."""
    guard = RepeatGuard(600.0)
    prints = [guard.fingerprint("http://h/mcp", "charge", {"amount": n}) for n in range(20_000)]
    tokens = [CLEARED + secrets.token_hex(16) for _ in prints]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for fingerprint, token in zip(prints, tokens, strict=True):
            assert fingerprint is not None
            guard.remember(fingerprint)
            guard._shared[fingerprint] = token  # what a taken arm replaced: a clear's token
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    # The tokens and hashes were made before: add what they take, as an entry holds them.
    held = sum(sys.getsizeof(token) for token in tokens) + sum(sys.getsizeof(p) for p in prints)
    assert (grown + held) / len(prints) <= ENTRY_BYTES
