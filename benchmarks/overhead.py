"""1. Clean-path overhead: a tools/call with the plugin on vs off, side by side in one run.

Set-up: the demo server (streamable HTTP, SSE-framed answers, no faults) in its own process on
127.0.0.1; in this process the OTel SDK as an app would have it (a global TracerProvider with a
BatchSpanProcessor to an exporter that drops spans, and an SDK MeterProvider), so the mcp SDK's own
spans exist in both arms and the plugin's spans and metrics cost what they cost in production.

One `mcp.Client` (one session, one connection pool) serves both arms of a pair; the arms alternate
in blocks (plain, instrumented, plain, ...) after a warm-up of both, switched by instrument() /
uninstrument() exactly as a user would. Latency is the caller's: perf_counter around
`await client.call_tool("search", ...)`. The second pair has opentelemetry-instrumentation-httpx's
HTTPX2ClientInstrumentor on in both arms (its spans nest under the plugin's attempt spans).
"""

from __future__ import annotations

import gc
import time
from typing import Any

import anyio
from mcp import Client
from opentelemetry import trace
from opentelemetry.instrumentation.httpx import HTTPX2ClientInstrumentor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from benchmarks._common import NoopExporter, Section, declared, percentile, section_main, server_process
from otel_mcp_replay import McpReplayInstrumentor

TARGET_P50 = 1.03
TARGET_P99 = 1.10
SETTLE = 5  # calls after each switch, not counted


def run(quick: bool) -> Section:
    return anyio.run(_run, quick)


async def _run(quick: bool) -> Section:
    blocks, per_block, warmup = (4, 50, 50) if quick else (20, 100, 200)
    section = Section("1. Clean-path overhead (tools/call on loopback, server in its own process)")
    exporter = NoopExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(tracer_provider)
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    plugin = McpReplayInstrumentor()
    with server_process() as url:
        settings: dict[str, Any] = {
            "tracer_provider": tracer_provider,
            "meter_provider": meter_provider,
            "servers": declared(url),
        }
        for label, with_httpx in (("plain SDK", False), ("+ HTTPX2ClientInstrumentor in both arms", True)):
            httpx = HTTPX2ClientInstrumentor() if with_httpx else None
            if httpx is not None:
                httpx.instrument(tracer_provider=tracer_provider, meter_provider=meter_provider)
            try:
                latencies = await _pair(url, plugin, settings, blocks, per_block, warmup)
            finally:
                if plugin.is_instrumented_by_opentelemetry:
                    plugin.uninstrument()
                if httpx is not None:
                    httpx.uninstrument()
            _report(section, label, latencies)
    tracer_provider.shutdown()
    section.notes.append(
        f"{blocks} blocks of {per_block} calls per arm, alternating (each after {SETTLE} uncounted calls), "
        f"after {warmup} warm-up calls per arm; "
        "p50/p99 over all calls of an arm; the same Client and session serve both arms of a pair; "
        "declaration: app-authorized, search repeated on throttle and network (the path a declared "
        "tool takes); spans to BatchSpanProcessor(exporter that drops them)."
    )
    section.notes.append(
        "block ratio: the median over block pairs of (instrumented block p50 / neighbouring plain "
        "block p50): less sensitive to drift in the machine's background load than the pooled ratio."
    )
    return section


async def _pair(
    url: str,
    plugin: McpReplayInstrumentor,
    settings: dict[str, Any],
    blocks: int,
    per_block: int,
    warmup: int,
) -> dict[str, list[list[float]]]:
    arms: dict[str, list[list[float]]] = {"plain": [], "instrumented": []}

    def switch(arm: str) -> None:
        if arm == "instrumented" and not plugin.is_instrumented_by_opentelemetry:
            plugin.instrument(**settings)
        elif arm == "plain" and plugin.is_instrumented_by_opentelemetry:
            plugin.uninstrument()

    async with Client(url) as client:
        for arm in ("plain", "instrumented"):
            switch(arm)
            await _block(client, warmup)
        for index in range(blocks * 2):
            arm = "plain" if index % 2 == 0 else "instrumented"
            switch(arm)
            await _block(client, SETTLE)  # not counted: the first calls after a switch fill caches
            gc.collect()  # each block starts from the same heap state, whatever the previous one left
            arms[arm].append(await _block(client, per_block))
    switch("plain")
    return arms


async def _block(client: Client, calls: int) -> list[float]:
    latencies = []
    for i in range(calls):
        started = time.perf_counter_ns()
        result = await client.call_tool("search", {"query": f"q{i}"})
        latencies.append((time.perf_counter_ns() - started) / 1e6)
        if result.is_error:
            raise RuntimeError("the clean path met an error")
    return latencies


def _report(section: Section, label: str, arms: dict[str, list[list[float]]]) -> None:
    plain = [x for block in arms["plain"] for x in block]
    instrumented = [x for block in arms["instrumented"] for x in block]
    p50 = (percentile(plain, 50), percentile(instrumented, 50))
    p99 = (percentile(plain, 99), percentile(instrumented, 99))
    ratio50, ratio99 = p50[1] / p50[0], p99[1] / p99[0]
    block_ratios = sorted(
        percentile(i, 50) / percentile(p, 50)
        for p, i in zip(arms["plain"], arms["instrumented"], strict=True)
    )
    section.add(f"{label}: plain p50 / p99", f"{p50[0]:.3f} / {p99[0]:.3f} ms")
    section.add(f"{label}: instrumented p50 / p99", f"{p50[1]:.3f} / {p99[1]:.3f} ms")
    section.add(f"{label}: p50 ratio", f"{ratio50:.3f}", f"<= {TARGET_P50}", ratio50 <= TARGET_P50)
    section.add(f"{label}: p99 ratio", f"{ratio99:.3f}", f"<= {TARGET_P99}", ratio99 <= TARGET_P99)
    section.add(
        f"{label}: block ratio, median (min..max)",
        f"{percentile(block_ratios, 50):.3f} ({block_ratios[0]:.3f}..{block_ratios[-1]:.3f})",
    )
    section.add(
        f"{label}: added per call at p50", f"{(p50[1] - p50[0]) * 1000:.0f} us of {p50[0] * 1000:.0f} us"
    )


if __name__ == "__main__":
    raise SystemExit(section_main(run))
