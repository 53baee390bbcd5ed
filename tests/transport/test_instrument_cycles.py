"""A hundred instrument()/uninstrument() cycles while calls run: no crash, no leftover patch, and
every call's outcome one the SDK or the plugin would give."""

from __future__ import annotations

import random
import sys
from typing import Any

import anyio
import mcp.client.sse
import mcp.client.stdio
import mcp.client.streamable_http
import pytest
from mcp import ClientSession
from tests.support.calls import leaves
from tests.support.leaks import no_leaks
from tests.support.schedules import REFUSAL_TEARDOWN_ERRORS, REFUSAL_TEARS_DOWN, seed_for
from tests.support.telemetry import Telemetry, records

from harness.client import Client, McpError, http, is_error
from harness.faults import (
    Fault,
    Status,
    Throttle,
)
from harness.sdk import LINE
from harness.server import ServerHandle
from otel_mcp_replay import McpReplayInstrumentor

if sys.version_info < (3, 11):  # pragma: no cover - Python 3.10
    from exceptiongroup import BaseExceptionGroup


pytestmark = pytest.mark.anyio

# The originals, taken at import (collection), before any test instruments anything: every function
# the plugin wraps on the installed line (instrumentor._seams), and the transports' entry points.
ORIGINALS: dict[str, tuple[object, str, object]] = {
    f"{http.__name__}.AsyncClient.send": (http.AsyncClient, "send", http.AsyncClient.send),
    "ClientSession.call_tool": (ClientSession, "call_tool", ClientSession.call_tool),
    "mcp.client.sse.sse_client": (mcp.client.sse, "sse_client", mcp.client.sse.sse_client),
    "mcp.client.stdio.stdio_client": (mcp.client.stdio, "stdio_client", mcp.client.stdio.stdio_client),
}
if LINE == 2:
    import mcp.client.client

    ORIGINALS["mcp.client.client.stdio_client"] = (
        mcp.client.client,
        "stdio_client",
        getattr(mcp.client.client, "stdio_client"),  # noqa: B009 - not in its __all__
    )
    from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher

    ORIGINALS["JSONRPCDispatcher.notify"] = (JSONRPCDispatcher, "notify", JSONRPCDispatcher.notify)
else:  # 1.x: the call is carried to the task that POSTs it (patches/carrier.py)
    ORIGINALS["ClientSession.__init__"] = (ClientSession, "__init__", ClientSession.__init__)
    _transport = mcp.client.streamable_http.StreamableHTTPTransport
    ORIGINALS["StreamableHTTPTransport.post_writer"] = (_transport, "post_writer", _transport.post_writer)


async def run_cycles(server: ServerHandle, telemetry: Telemetry, mode: str, cycles: int) -> dict[str, int]:
    """Calls run all along in a task group on one Client (search, and send_email: a changes tool
    without a key; the server refusing some with 429 or 503) while the main task turns the plugin
    on and off `cycles` times. Any exception but an MCPError fails; the outcomes are returned.

    mcp 1.x tears a session down under all its calls when it is handed a refusal (REFUSAL_TEARS_DOWN):
    there each worker calls on a Client of its own, opened again after such a teardown (counted as
    `torn-down`), so that a refusal costs one call, as its McpError does on 2.x."""
    seed = seed_for(long_run=False)
    rng = random.Random(seed)
    print(f"instrument cycles: seed {seed}")
    faults: list[Fault | None] = [None, None, Throttle("0"), Status(503)]
    server.faults.set_rule(lambda ctx: rng.choice(faults) if ctx.method == "tools/call" else None)
    servers = {
        server.url: {
            "policy": "app-authorized",
            "tools": {"search": {"on": ["throttle"]}, "send_email": {"changes": True, "on": ["throttle"]}},
        }
    }
    instrumentor = McpReplayInstrumentor()
    outcomes: dict[str, int] = {}
    async with no_leaks(f"instrument cycles, seed {seed}"), Client(server.url, mode=mode) as client:
        stop = anyio.Event()

        async def worker(w: int) -> None:
            i = 0

            async def calls(on: Any) -> None:
                nonlocal i
                while not stop.is_set():
                    i += 1
                    tool, arguments = "search", {"query": f"w{w}-{i}"}
                    if i % 3 == 0:
                        tool, arguments = "send_email", {"to": f"w{w}-{i}@example.test", "body": "x"}
                    try:
                        result = await on.call_tool(tool, arguments)
                        outcome = "tool-error" if is_error(result) else "ok"
                    except McpError as exc:  # the faults' own errors; anything else fails the test
                        outcome = type(exc).__name__
                    outcomes[outcome] = outcomes.get(outcome, 0) + 1

            if not REFUSAL_TEARS_DOWN:
                await calls(client)
                return
            while not stop.is_set():
                try:
                    async with Client(server.url, mode=mode) as own:
                        await calls(own)
                except BaseExceptionGroup as group:
                    if not all(isinstance(e, REFUSAL_TEARDOWN_ERRORS) for e in leaves(group)):
                        raise
                    outcomes["torn-down"] = outcomes.get("torn-down", 0) + 1

        try:
            async with anyio.create_task_group() as tg:
                for w in range(6):
                    tg.start_soon(worker, w)
                try:
                    for _ in range(cycles):
                        instrumentor.instrument(
                            tracer_provider=telemetry.tracer_provider,
                            meter_provider=telemetry.meter_provider,
                            servers=servers,
                        )
                        await anyio.sleep(rng.uniform(0, 0.012))
                        instrumentor.uninstrument()
                        await anyio.sleep(rng.uniform(0, 0.006))
                finally:
                    stop.set()
        finally:
            if instrumentor.is_instrumented_by_opentelemetry:
                instrumentor.uninstrument()

        for name, (owner, attr, original) in ORIGINALS.items():
            assert getattr(owner, attr) is original, f"{name} is still patched"
        assert McpReplayInstrumentor().runtime is None
        server.faults.clear()
        telemetry.exporter.clear()
        result = await client.call_tool("search", {"query": "after"})
        assert not is_error(result)
        assert records(telemetry) == []  # off means off: nothing recorded
    print(f"instrument cycles ({mode}): outcomes {outcomes}")
    return outcomes


def changes_tool_posts(server: ServerHandle, tool: str) -> dict[tuple[str | None, str], int]:
    """POSTs per (session, request id) of `tool`'s calls (request ids are unique on one Client)."""
    counts: dict[tuple[str | None, str], int] = {}
    for post in server.counters.post_log():
        if post.tool == tool and post.request_id is not None:
            key = (post.session_id, post.request_id)
            counts[key] = counts.get(key, 0) + 1
    return counts


async def test_a_hundred_instrument_uninstrument_cycles_while_calls_run(
    server: ServerHandle, telemetry: Telemetry, mode: str
) -> None:
    """No crash and no exception but the faults' MCPErrors while the plugin is turned on and off
    100 times under running calls; afterwards every patched function is its original (`is`), the
    plugin holds no runtime, and calls still work and record nothing."""
    outcomes = await run_cycles(server, telemetry, mode, 100)
    assert outcomes.get("ok", 0) > 20, outcomes
    # mcp 1.x: a refusal the SDK is handed tears the session down instead of raising McpError.
    assert set(outcomes) <= {"ok", "torn-down" if REFUSAL_TEARS_DOWN else McpError.__name__}, outcomes
    # The guard held whatever the plugin's state when a call began and when it was sent (a call
    # begun while it was off and sent once it was on included).
    sent = changes_tool_posts(server, "send_email")
    assert len(sent) > 20, sent
    assert max(sent.values()) == 1, {rid: n for rid, n in sent.items() if n > 1}
