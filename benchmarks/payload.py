"""Payload size: what the plugin adds to a tools/call at 1 KB, 100 KB and 1 MB of argument, beside
the peer's (opentelemetry-instrumentation-httpx's HTTPX2ClientInstrumentor), and memory over 20,000
calls.

The law reads a request's id, tool and key and its answer's id and kind; none of that grows with
the payload, so neither may its price: the plugin-added CPU per call at 1 MB is held to at most 2x
that at 1 KB. Set-up: the demo server in its own process on 127.0.0.1; `search` with a `query` of
the size (its answer echoes the query, so the answer is as big); in each protocol era one
`mcp.Client` serves every arm;
the arms (plain, peer, plugin) alternate in blocks at each size, switched by instrument() /
uninstrument(). CPU is this process's (every thread) over a block, divided by its calls; added =
arm - plain of the same round; the median over the rounds. Then 20,000 calls at 1 KB with the plugin
on: RSS after a warm-up and after the run, each after the span queue is flushed and gc.collect().
"""

from __future__ import annotations

import gc
import time

import anyio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from opentelemetry import trace
from opentelemetry.instrumentation.httpx import HTTPX2ClientInstrumentor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from benchmarks._common import NoopExporter, Section, declared, median, rss_kib, section_main, server_process
from otel_mcp_replay import McpReplayInstrumentor

SIZES = (("1 KB", 1_000), ("100 KB", 100_000), ("1 MB", 1_000_000))
ARMS = ("plain", "peer", "plugin")
# Both protocol eras: 2026-07-28 answers with one JSON body, the legacy era with an event stream.
ERAS = ("2026-07-28", "legacy")
TARGET_GROWTH = 2.0  # plugin-added CPU at 1 MB over that at 1 KB
TARGET_MEMORY_KIB = 5 * 1024


def run(quick: bool) -> Section:
    return anyio.run(_run, quick)


async def _run(quick: bool) -> Section:
    rounds, per_block, memory_calls = (3, 20, 2_000) if quick else (9, 40, 20_000)
    section = Section("Payload size (tools/call on loopback, server in its own process)")
    exporter = NoopExporter()
    processor = BatchSpanProcessor(exporter)
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(processor)
    trace.set_tracer_provider(tracer_provider)
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    providers = {"tracer_provider": tracer_provider, "meter_provider": meter_provider}
    plugin, peer = McpReplayInstrumentor(), HTTPX2ClientInstrumentor()

    def switch(arm: str) -> None:
        for instrumentor in (plugin, peer):
            if instrumentor.is_instrumented_by_opentelemetry:
                instrumentor.uninstrument()
        if arm == "plugin":
            plugin.instrument(servers=declared(url), **providers)
        elif arm == "peer":
            peer.instrument(**providers)

    added: dict[tuple[str, str, str], list[float]] = {}
    with server_process() as url:
        try:
            for era in ERAS:
                # The SDK's own 1 MiB cap on an SSE event off (the 1 MB answer carries the text twice).
                uncapped = streamable_http_client(url, max_sse_event_size=None)
                async with Client(uncapped, mode=era) as client:
                    for label, size in SIZES:
                        query = "x" * size
                        for arm in ARMS:  # warm-up
                            switch(arm)
                            await _block(client, query, per_block // 2)
                        for _ in range(rounds):
                            cpu = {}
                            for arm in ARMS:
                                switch(arm)
                                cpu[arm] = await _block(client, query, per_block)
                            for arm in ARMS[1:]:
                                added.setdefault((era, label, arm), []).append(cpu[arm] - cpu["plain"])
            async with Client(url) as client:
                switch("plugin")
                await _block(client, "x" * 1_000, 1_000)
                before = _settle(processor)
                await _block(client, "x" * 1_000, memory_calls)
                after = _settle(processor)
        finally:
            switch("off")
    processor.shutdown()
    figures = {key: median(samples) for key, samples in added.items()}
    for era in ERAS:
        for label, _ in SIZES:
            section.add(
                f"{era}: added CPU per call at {label}: plugin / peer",
                f"{figures[era, label, 'plugin']:.0f} us / {figures[era, label, 'peer']:.0f} us",
            )
        small, large = figures[era, "1 KB", "plugin"], figures[era, "1 MB", "plugin"]
        growth = large / small if small > 0 else float("inf")
        peer_growth = figures[era, "1 MB", "peer"] / max(figures[era, "1 KB", "peer"], 1e-9)
        section.add(
            f"{era}: plugin-added CPU, 1 MB over 1 KB (peer's beside)",
            f"{growth:.2f}x (peer {peer_growth:.2f}x)",
            f"<= {TARGET_GROWTH:.0f}x",
            growth <= TARGET_GROWTH,
        )
    growth_kib = after - before
    section.add(
        f"RSS growth over {memory_calls:,} calls at 1 KB, plugin on",
        f"{growth_kib / 1024:+.2f} MiB ({before / 1024:.1f} -> {after / 1024:.1f} MiB)",
        "< 5 MiB",
        growth_kib < TARGET_MEMORY_KIB,
    )
    section.notes.append(
        f"{rounds} rounds of {per_block} calls per arm and size (after {per_block // 2} warm-up calls "
        "per arm); CPU: time.process_time() over a block / its calls; added = arm - plain, same round; "
        "median over rounds. Declaration: app-authorized, search repeated on throttle and network."
    )
    return section


async def _block(client: Client, query: str, calls: int) -> float:
    """CPU microseconds per call over `calls` calls of search(query)."""
    started = time.process_time()
    for _ in range(calls):
        await client.call_tool("search", {"query": query})
    return (time.process_time() - started) / calls * 1e6


def _settle(processor: BatchSpanProcessor) -> int:
    processor.force_flush()
    gc.collect()
    return rss_kib()


if __name__ == "__main__":
    raise SystemExit(section_main(run))
