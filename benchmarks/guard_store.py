"""8. The repeat guard's shared store: what a guarded call pays for it, and that others pay nothing.

The MCP server runs in its own process (benchmarks/_server.py), Redis in its own (harness/
redis_server.py, on 127.0.0.1, persisting nothing). One `mcp.Client` serves four arms in
interleaved blocks, switched with instrument()/uninstrument() as a user would:
- `charge` (declared `changes: true`, called without its key: a call the guard could refuse),
  with the in-process guard, then with the guard shared through Redis (GET before sending, SET
  of a fresh clear after it completed: two round trips to the store);
- `search` (declared, not changing: the guard never looks at it), without and with the store named.
Each figure is the call's latency, p50 and p99 over every sample of its arm; "added" is the store
arm's minus the in-process arm's, of the same tool. Redis counts the commands it ran in each
`search` block: they must be 0 (the store is not touched), whatever the latencies say.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from mcp import Client
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from benchmarks._common import NoopExporter, Section, percentile, section_main, server_process
from harness.redis_server import RedisServer
from otel_mcp_replay import McpReplayInstrumentor

SECRET = "the benchmark's shared secret, 32+ bytes"
ARMS = ("charge, in-process", "charge, store", "search, no store", "search, store named")


def _declared(url: str) -> dict[str, Any]:
    tools = {"search": {"on": ["throttle", "network"]}, "charge": {"changes": True}}
    return {url: {"policy": "app-authorized", "label": "bench", "tools": tools}}


def run(quick: bool) -> Section:
    return anyio.run(_run, quick)


async def _run(quick: bool) -> Section:
    section = Section("8. Repeat guard's shared store (Redis): added latency of a guarded call")
    blocks, per_block = (3, 20) if quick else (12, 100)
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(NoopExporter()))
    meter_provider = MeterProvider([InMemoryMetricReader()])
    plugin = McpReplayInstrumentor()
    samples: dict[str, list[float]] = {arm: [] for arm in ARMS}
    search_commands: list[int] = []
    guarded_commands: list[int] = []
    with RedisServer() as redis, server_process() as url:
        settings: dict[str, dict[str, Any]] = {
            "in-process": {},
            "store": {"repeat_guard_store": redis.url, "repeat_guard_secret": SECRET},
        }
        async with Client(url) as client:

            async def charge() -> object:
                return await client.call_tool("charge", {"amount": 1})

            async def search() -> object:
                return await client.call_tool("search", {"query": "q"})

            arms: list[tuple[str, str, Callable[[], Awaitable[object]]]] = [
                ("charge, in-process", "in-process", charge),
                ("charge, store", "store", charge),
                ("search, no store", "in-process", search),
                ("search, store named", "store", search),
            ]
            for block in range(blocks):
                order = arms if block % 2 == 0 else arms[::-1]  # interleaved: drift falls on every arm
                for arm, setting, call in order:
                    plugin.instrument(
                        tracer_provider=provider,
                        meter_provider=meter_provider,
                        servers=_declared(url),
                        **settings[setting],
                    )
                    try:
                        for _ in range(5):  # warm: a new runtime's first store connection
                            await call()
                        counted = arm in ("search, store named", "charge, store")
                        if counted:
                            redis.command("CONFIG", "RESETSTAT")
                        for _ in range(per_block):
                            started = time.perf_counter()
                            await call()
                            samples[arm].append((time.perf_counter() - started) * 1e6)
                        if counted:
                            ran = redis.command_calls()
                            commands = sum(ran.values()) - ran.get("config|resetstat", 0)
                            (search_commands if arm.startswith("search") else guarded_commands).append(
                                commands
                            )
                    finally:
                        plugin.uninstrument()

    def p(arm: str, q: float) -> float:
        return percentile(samples[arm], q)

    for arm in ARMS:
        section.add(f"{arm}: latency p50 / p99", f"{p(arm, 50) / 1000:.2f} / {p(arm, 99) / 1000:.2f} ms")
    for q in (50, 99):
        added = p("charge, store", q) - p("charge, in-process", q)
        section.add(f"guarded call (`charge`), added by the store, p{q}", f"{added / 1000:+.2f} ms")
    for q in (50, 99):
        added = p("search, store named", q) - p("search, no store", q)
        section.add(f"unguarded call (`search`), store named vs not, p{q}", f"{added / 1000:+.2f} ms")
    section.add(
        "store commands per guarded call (GET, then SET of its clear)",
        f"{sum(guarded_commands) / (len(guarded_commands) * per_block):.2f}",
    )
    touched = sum(search_commands)
    section.add(
        "store commands run during the unguarded calls (Redis INFO commandstats)",
        f"{touched} over {len(search_commands) * per_block} calls",
        "0",
        touched == 0,
    )
    section.notes.append(
        f"{blocks} interleaved blocks of {per_block} calls per arm on one mcp.Client (streamable HTTP on "
        "127.0.0.1); the store arm's guarded call makes two Redis round trips (GET before sending, "
        "SET of a fresh clear after it completed), each bounded by "
        "OTEL_PYTHON_MCP_REPLAY_REPEAT_GUARD_STORE_TIMEOUT_MS."
    )
    return section


if __name__ == "__main__":
    raise SystemExit(section_main(run))
