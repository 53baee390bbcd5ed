"""The repeat guard: a changing call without its key, identical to one that failed with its effect
unknown moments ago, is refused before anything is sent; the app repeats it only on purpose."""

from __future__ import annotations

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
from otel_mcp_replay.guard import RepeatGuard

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


def test_the_guard_remembers_a_keyed_hash_for_its_window_and_at_most_its_capacity() -> None:
    now = [100.0]
    guard = RepeatGuard(10.0, capacity=2, clock=lambda: now[0])
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
    assert c is not None and d is not None
    guard.remember(a)
    guard.remember(c)
    guard.remember(d)
    assert len(guard) == 2 and not guard.refuses(a)  # the oldest forgotten first
    assert guard.fingerprint("http://h/mcp", "x", object()) is None  # not JSON data: not guarded
    with repeat_confirmed():
        assert not guard.refuses(c)
    assert guard.refuses(c)
