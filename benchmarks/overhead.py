"""1. Clean-path overhead: a tools/call with the plugin on vs off, side by side in one run.

Set-up: the demo server (streamable HTTP, no faults; it answers this call with one JSON body) in
its own process on 127.0.0.1; in this process the OTel SDK as an app would have it (a global
TracerProvider with a BatchSpanProcessor to an exporter that drops spans, and an SDK
MeterProvider), so the mcp SDK's own spans exist in every arm and the plugin's spans and metrics
cost what they cost in production.

One `mcp.Client` (one session, one connection pool) serves every arm; the arms alternate in blocks
(plain, peer, plugin, both, floor, plain, ...) after a warm-up of each, switched by instrument() /
uninstrument() exactly as a user would. The peer is opentelemetry-instrumentation-httpx's
HTTPX2ClientInstrumentor (one HTTP client span per request): what users already pay for an
instrumentation, the yardstick for the plugin's price. The floor arm (benchmarks/_floor.py) makes
only the SDK calls the contract asks of a clean call: the least any implementation of the contract
could add. Latency is the caller's: perf_counter around `await client.call_tool("search", ...)`;
CPU is this process's over each block. After each plain block, the floor's SDK calls are also
timed alone, in a loop with no I/O (the warm floor).
"""

from __future__ import annotations

import contextlib
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

from benchmarks._common import (
    NoopExporter,
    Section,
    declared,
    median,
    percentile,
    section_main,
    server_process,
)
from benchmarks._floor import FloorTelemetry, telemetry_floor
from otel_mcp_replay import McpReplayInstrumentor

TARGET_P50 = 1.03
TARGET_P99 = 1.10
SETTLE = 5  # calls after each switch, not counted
# plain: the mcp SDK alone; peer: opentelemetry-instrumentation-httpx's HTTPX2ClientInstrumentor
# alone (one HTTP client span per request: the yardstick an instrumentation's price is read
# against); plugin: this plugin alone; both: the plugin and the peer; floor: the plugin's arm cut
# down to only the SDK calls the contract asks for (benchmarks/_floor.py).
ARMS = ("plain", "peer", "plugin", "both", "floor")


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
    peer = HTTPX2ClientInstrumentor()
    with server_process() as url:
        settings: dict[str, Any] = {
            "tracer_provider": tracer_provider,
            "meter_provider": meter_provider,
            "servers": declared(url),
        }
        try:
            latencies, cpu, warm = await _arms(url, plugin, peer, settings, blocks, per_block, warmup)
        finally:
            for instrumentor in (plugin, peer):
                if instrumentor.is_instrumented_by_opentelemetry:
                    instrumentor.uninstrument()
        _report(section, latencies, cpu, warm)
    tracer_provider.shutdown()
    section.notes.append(
        f"{blocks} blocks of {per_block} calls per arm, alternating (each after {SETTLE} uncounted calls), "
        f"after {warmup} warm-up calls per arm; "
        "p50/p99 over all calls of an arm; one Client and session serve every arm; "
        "declaration: app-authorized, search repeated on throttle and network (the path a declared "
        "tool takes); spans to BatchSpanProcessor(exporter that drops them). "
        "CPU per call: this process's CPU time (every thread: the span export included; the server "
        "runs in its own process) over a block, divided by its calls; added = arm - plain."
    )
    section.notes.append(
        "warm floor: the floor's SDK calls alone, back to back in a loop with no I/O between them "
        "(caches warm, nothing else running in this process; the clock is the thread's CPU time), "
        "median and least of one run of 200 after each plain block: the least the telemetry the contract "
        "asks for costs on this machine, whatever the implementation; the budget is what a p50 ratio "
        f"of {TARGET_P50} leaves of the plain p50."
    )
    section.notes.append(
        "block ratio: the median over block pairs of (arm block p50 / neighbouring plain "
        "block p50): less sensitive to drift in the machine's background load than the pooled ratio."
    )
    return section


async def _arms(
    url: str,
    plugin: McpReplayInstrumentor,
    peer: HTTPX2ClientInstrumentor,
    settings: dict[str, Any],
    blocks: int,
    per_block: int,
    warmup: int,
) -> tuple[dict[str, list[list[float]]], dict[str, list[float]], list[float]]:
    """Each arm's blocks of latencies (ms) and CPU per call (us), and a warm-floor sample (us)
    after each plain block."""
    arms: dict[str, list[list[float]]] = {arm: [] for arm in ARMS}
    cpu: dict[str, list[float]] = {arm: [] for arm in ARMS}
    warm: list[float] = []  # sampled beside the plain blocks, so the same drift of load is in both
    warm_floor = FloorTelemetry(settings["tracer_provider"], settings["meter_provider"])
    floor = contextlib.ExitStack()  # holds the floor's patch while that arm runs
    providers = {"tracer_provider": settings["tracer_provider"], "meter_provider": settings["meter_provider"]}

    def switch(arm: str) -> None:
        for instrumentor in (plugin, peer):
            if instrumentor.is_instrumented_by_opentelemetry:
                instrumentor.uninstrument()
        floor.close()
        if arm in ("plugin", "both"):
            plugin.instrument(**settings)
        if arm in ("peer", "both"):
            peer.instrument(**providers)
        if arm == "floor":
            floor.enter_context(telemetry_floor(settings["tracer_provider"], settings["meter_provider"]))

    async with Client(url) as client:
        for arm in ARMS:
            switch(arm)
            await _block(client, warmup)
        for index in range(blocks * len(ARMS)):
            arm = ARMS[index % len(ARMS)]
            switch(arm)
            await _block(client, SETTLE)  # not counted: the first calls after a switch fill caches
            gc.collect()  # each block starts from the same heap state, whatever the previous one left
            started = time.process_time()
            arms[arm].append(await _block(client, per_block))
            cpu[arm].append((time.process_time() - started) / per_block * 1e6)
            if arm == "plain":
                gc.collect()
                warm.append(warm_floor.warm_us())
    switch("plain")
    return arms, cpu, warm


async def _block(client: Client, calls: int) -> list[float]:
    latencies = []
    for i in range(calls):
        started = time.perf_counter_ns()
        result = await client.call_tool("search", {"query": f"q{i}"})
        latencies.append((time.perf_counter_ns() - started) / 1e6)
        if result.is_error:
            raise RuntimeError("the clean path met an error")
    return latencies


def _report_warm_floor(section: Section, samples: list[float], plain_p50_ms: float) -> None:
    plain_us = plain_p50_ms * 1000
    budget_us = (TARGET_P50 - 1) * plain_us
    warm, least = median(samples), min(samples)
    section.add(
        "warm floor (the contract's SDK calls alone, no I/O) per call, median (min)",
        f"{warm:.0f} us ({least:.0f}) = {warm / plain_us:.1%} ({least / plain_us:.1%}) of plain p50; "
        f"p50 <= {TARGET_P50} leaves {budget_us:.0f} us",
    )


def added_cpu_us(cpu: dict[str, list[float]]) -> dict[str, float]:
    """Each arm's CPU per call over plain's, by the median over blocks (us)."""
    plain = median(cpu["plain"])
    return {arm: median(samples) - plain for arm, samples in cpu.items()}


def _report(
    section: Section, arms: dict[str, list[list[float]]], cpu: dict[str, list[float]], warm: list[float]
) -> None:
    pooled = {arm: [x for block in blocks for x in block] for arm, blocks in arms.items()}
    plain = pooled["plain"]
    p50, p99 = percentile(plain, 50), percentile(plain, 99)
    added = added_cpu_us(cpu)
    section.add("plain p50 / p99; CPU per call", f"{p50:.3f} / {p99:.3f} ms; {median(cpu['plain']):.0f} us")
    names = {"peer": "peer (httpx2 instrumentor)", "plugin": "plugin", "both": "plugin + peer"}
    for arm, name in {**names, "floor": "floor"}.items():
        arm50, arm99 = percentile(pooled[arm], 50), percentile(pooled[arm], 99)
        block_ratios = sorted(
            percentile(i, 50) / percentile(p, 50) for p, i in zip(arms["plain"], arms[arm], strict=True)
        )
        section.add(
            f"{name}: p50 / p99 ratio; added CPU per call",
            f"{arm50 / p50:.3f} / {arm99 / p99:.3f}; {added[arm]:+.0f} us",
        )
        section.add(
            f"{name}: block ratio, median (min..max)",
            f"{percentile(block_ratios, 50):.3f} ({block_ratios[0]:.3f}..{block_ratios[-1]:.3f})",
        )
    if added["peer"] > 0:
        section.add("plugin-added / peer-added CPU per call", f"{added['plugin'] / added['peer']:.2f}")
    _report_warm_floor(section, warm, p50)


if __name__ == "__main__":
    raise SystemExit(section_main(run))
