"""4. Memory: 20,000 tool calls with faults in one process, and nothing per request left behind.

The server (its own process, `Counters(log_limit=0)`, so its memory is not this process's) meets
`search` calls with the seeded mix of benchmarks/_server.py MIXED_FAULTS: 10% 429 with
`Retry-After: 0` (repeated at once), 4% 503 (not repeated), 1% a cut after the tool ran (the
network kind, repeated). Four callers share one Client. The pipeline is production's:
BatchSpanProcessor(RedactingSpanExporter(exporter that drops spans, the plugin's vouches)), an SDK
MeterProvider.

RSS (VmRSS) is read after a warm-up and after the run, each time after the span queue is flushed and
gc.collect(). Then: the SSE waiting map empty, no ToolCall or Attempt alive, the retry budget
map and the redaction caches within their bounds, and once the Client has closed, no task or file
descriptor more than before it opened.
"""

from __future__ import annotations

import asyncio
import gc
import os
import time
from collections import Counter

import anyio
from mcp import Client
from mcp.shared.exceptions import MCPError
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from benchmarks._common import NoopExporter, Section, declared, rss_kib, section_main, server_process
from otel_mcp_replay import McpReplayInstrumentor, RedactingSpanExporter
from otel_mcp_replay.attempt import Attempt
from otel_mcp_replay.call import ToolCall
from otel_mcp_replay.patches.sse import SseStream
from otel_mcp_replay.policy import ENDPOINTS_KEPT

TARGET_GROWTH_KIB = 5 * 1024
CALLERS = 4


def run(quick: bool) -> Section:
    return anyio.run(_run, quick)


async def _run(quick: bool) -> Section:
    warmup, calls = (200, 1_000) if quick else (1_000, 20_000)
    section = Section(f"4. Memory ({calls:,} calls with faults, one process)")
    exporter = NoopExporter()
    # As the configurator builds it: the plugin's records vouched for.
    redacting = RedactingSpanExporter(exporter, vouches=McpReplayInstrumentor().vouches)
    processor = BatchSpanProcessor(redacting)
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(processor)
    trace.set_tracer_provider(tracer_provider)
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    plugin = McpReplayInstrumentor()
    outcomes: Counter[str] = Counter()
    with server_process("--faults", "mixed", "--seed", "11") as url:
        providers = {"tracer_provider": tracer_provider, "meter_provider": meter_provider}
        plugin.instrument(servers=declared(url), **providers)
        try:
            tasks_before, fds_before = len(asyncio.all_tasks()), _fds()  # before the Client opens
            async with Client(url) as client:
                await _calls(client, warmup, outcomes)
                before = _settle(processor)
                started = time.monotonic()
                outcomes.clear()
                await _calls(client, calls, outcomes)
                elapsed = time.monotonic() - started
                after = _settle(processor)
            tasks_after, fds_after = len(asyncio.all_tasks()), _fds()  # and after it closed
            runtime = McpReplayInstrumentor().runtime
            budgets = len(runtime.budgets) if runtime is not None else -1
            waiting = sum(len(o.waiting) for o in gc.get_objects() if type(o) is SseStream)
        finally:
            plugin.uninstrument()
    gc.collect()
    calls_alive = sum(1 for o in gc.get_objects() if type(o) is ToolCall)
    attempts_alive = sum(1 for o in gc.get_objects() if type(o) is Attempt)
    growth = after - before
    section.add(
        f"RSS growth over {calls:,} calls (after a {warmup:,}-call warm-up)",
        f"{growth / 1024:+.2f} MiB ({before / 1024:.1f} -> {after / 1024:.1f} MiB)",
        "< 5 MiB",
        growth < TARGET_GROWTH_KIB,
    )
    section.add("calls: answered / tool error / failed", _outcomes(outcomes))
    section.add("throughput (4 callers)", f"{calls / elapsed:.0f} calls/s, {elapsed:.1f} s")
    section.add("SSE waiters (SseStream.waiting) after", str(waiting), "0", waiting == 0)
    alive = f"{calls_alive} / {attempts_alive}"
    section.add("ToolCall / Attempt objects alive after", alive, "0 / 0", alive == "0 / 0")
    section.add(
        "retry budget map (endpoints kept)",
        str(budgets),
        f"<= {ENDPOINTS_KEPT}",
        0 <= budgets <= ENDPOINTS_KEPT,
    )
    rules = redacting.rules  # its per-rules caches are private: read here only to check their bound
    caches = (len(rules._actions), len(rules._hashes))
    section.add("redaction caches (key actions, session hashes)", f"{caches[0]}, {caches[1]}", "<= 4096 each",
                max(caches) <= 4096)  # fmt: skip
    leftovers = f"{tasks_before} -> {tasks_after}, {fds_before} -> {fds_after}"
    no_growth = tasks_after <= tasks_before and fds_after <= fds_before
    section.add(
        "asyncio tasks, open fds: before the Client -> after it closed", leftovers, "no growth", no_growth
    )
    section.add("spans exported (redacted, dropped by the exporter)", f"{exporter.spans:,}")
    tracer_provider.shutdown()
    gc.collect()
    vouched = len(McpReplayInstrumentor().vouches)
    section.add("records vouched for, still held once the spans are gone", str(vouched), "0", vouched == 0)
    return section


async def _calls(client: Client, calls: int, outcomes: Counter[str]) -> None:
    remaining = iter(range(calls))

    async def caller() -> None:
        for i in remaining:
            try:
                result = await client.call_tool("search", {"query": f"q{i}"})
            except MCPError as error:
                outcomes[type(error).__name__] += 1
                continue
            outcomes["tool error" if result.is_error else "answered"] += 1

    async with anyio.create_task_group() as group:
        for _ in range(CALLERS):
            group.start_soon(caller)


def _settle(processor: BatchSpanProcessor) -> int:
    processor.force_flush()
    gc.collect()
    return rss_kib()


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _outcomes(outcomes: Counter[str]) -> str:
    errors = {name: n for name, n in sorted(outcomes.items()) if name not in ("answered", "tool error")}
    kinds = ", ".join(f"{name} {n}" for name, n in errors.items())
    figures = f"{outcomes['answered']:,} / {outcomes['tool error']:,} / {sum(errors.values()):,}"
    return figures + (f" ({kinds})" if kinds else "")


if __name__ == "__main__":
    raise SystemExit(section_main(run))
