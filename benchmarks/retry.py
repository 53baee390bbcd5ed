"""3. The retry path: how exactly a Retry-After is honoured, and how fast a cancelled call stops.

The server runs in this process here (its POST log's `at` is this process's monotonic clock; the
waits measured are a second or more, so sharing the GIL does not matter). Declaration:
app-authorized, `search` repeated on throttle.

- Retry-After: the server answers the first POST of a call 429 with `Retry-After: 1` (or 2); the
  gap between that POST and the repeat, both as the server received them, over the requested wait.
  The gap also holds the 429's way back and the repeat's way out (a few ms on loopback).
- Cancel: the server answers 429 with a long Retry-After; the caller gives up with
  anyio.move_on_after(0.5) while the plugin waits. Measured: from the deadline to the call
  returning to the caller, then whether any further POST of that request arrives after the
  Retry-After has passed (it must not). Both protocol eras (the legacy one does not abort the POST).
"""

from __future__ import annotations

import socket

import anyio
from mcp import Client
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from benchmarks._common import Section, declared, section_main
from harness.faults import Throttle
from harness.server import ServerHandle, running_server
from otel_mcp_replay import McpReplayInstrumentor
from otel_mcp_replay import telemetry as t

TOLERANCE = 0.05


def run(quick: bool) -> Section:
    return anyio.run(_run, quick)


async def _run(quick: bool) -> Section:
    section = Section("3. Retry path (Retry-After honoured; a cancel stops the series)")
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    plugin = McpReplayInstrumentor()
    with running_server("streamable") as server:
        _no_delay(server)
        plugin.instrument(tracer_provider=provider, servers=declared(server.url))
        try:
            await _retry_after(section, server, exporter, repeats=1 if quick else 3)
            await _cancel(section, server, retry_after=1 if quick else 3, repeats=1 if quick else 2)
        finally:
            plugin.uninstrument()
    return section


def _no_delay(server: ServerHandle) -> None:
    # See benchmarks/_server.py: without it each response waits ~40 ms for a delayed ACK.
    for userver in server._uvicorn.servers:
        for listening in userver.sockets:
            listening.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


async def _retry_after(
    section: Section, server: ServerHandle, exporter: InMemorySpanExporter, repeats: int
) -> None:
    async with Client(server.url) as client:
        await client.call_tool("search", {"query": "warm-up"})
        for seconds in (1, 2):
            ratios: list[float] = []
            recorded: list[int] = []
            for _ in range(repeats):
                server.counters.reset()
                exporter.clear()
                server.faults.add("search", Throttle(str(seconds)))
                await client.call_tool("search", {"query": "q"})
                posts = [p for p in server.counters.post_log() if p.tool == "search"]
                if len(posts) != 2:
                    raise RuntimeError("expected a 429 and one repeat")
                ratios.append((posts[1].at - posts[0].at) / seconds)
                recorded.extend(_recorded_waits(exporter))
            section.add(
                f"Retry-After: {seconds} -> gap between POSTs / requested ({repeats} calls)",
                " ".join(f"{r:.4f}" for r in ratios) + f" (recorded wait_ms {sorted(set(recorded))})",
                f"1.00..{1 + TOLERANCE:.2f}",
                all(1.0 <= r <= 1 + TOLERANCE for r in ratios),
            )


def _recorded_waits(exporter: InMemorySpanExporter) -> list[int]:
    waits: list[int] = []
    for span in exporter.get_finished_spans():
        for event in span.events:
            if event.name == t.RECORD_EVENT:
                column = (event.attributes or {}).get(t.ATTEMPTS_WAIT_MS, ())
                waits.extend(w for w in column if type(w) is int and w)  # type: ignore[union-attr]
    return waits


async def _cancel(section: Section, server: ServerHandle, retry_after: int, repeats: int) -> None:
    for mode in ("legacy", "2026-07-28"):
        async with Client(server.url, mode=mode) as client:
            await client.call_tool("search", {"query": "warm-up"})
            stops: list[float] = []
            extra_posts = 0
            for _ in range(repeats):
                server.counters.reset()
                server.faults.add("search", Throttle(str(retry_after)))
                with anyio.move_on_after(0.5) as scope:
                    await client.call_tool("search", {"query": "q"})
                stops.append((anyio.current_time() - scope.deadline) * 1000)
                if not scope.cancelled_caught:
                    raise RuntimeError("the call was not cancelled")
                await anyio.sleep(retry_after + 0.5)  # past the Retry-After: a live series would resend now
                request_ids = {p.request_id for p in server.counters.post_log() if p.tool == "search"}
                extra_posts += sum(server.counters.posts(rid) - 1 for rid in request_ids if rid is not None)
            section.add(
                f"cancel during a {retry_after} s wait ({mode}): deadline -> call returns",
                " ".join(f"{s:.1f}" for s in stops) + " ms",
                "prompt (< 50 ms)",
                max(stops) < 50,
            )
            section.add(
                f"cancel during the wait ({mode}): POSTs after the cancel",
                str(extra_posts),
                "0",
                extra_posts == 0,
            )


if __name__ == "__main__":
    raise SystemExit(section_main(run))
