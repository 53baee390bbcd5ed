"""2. The plugin's own CPU per call, in process, and where it goes.

The same set-up as benchmark 1 (server in its own process, the OTel SDK as an app has it). Three
arms alternate in blocks on one Client: plain; instrumented with the SDK's tracer and meter
providers (what a user runs); instrumented with no-op providers (the plugin's own logic without the
cost of the spans, events and metrics it hands the SDK). CPU is `time.process_time()` over a block
(all threads of this process, so the BatchSpanProcessor's worker counts too) divided by its calls;
the plugin's CPU per call is instrumented minus plain.

Then a cProfile of the plain and instrumented arms, interleaved in rounds (timer: the event loop
thread's CPU time, so waiting on the socket is not counted): the
top 15 entries of otel_mcp_replay by cumulative time, and the extra CPU of the instrumented arm over
the plain one by package. cProfile slows Python code several-fold: read its figures as shares.

Last, what no background load can blur: the Python opcodes the loop thread executes per call
(sys.settrace, counted as benchmark 9 counts them), for each arm and for the telemetry floor
(benchmarks/_floor.py: only the SDK calls the contract asks of a clean call, the least any
implementation of the contract adds).
"""

from __future__ import annotations

import cProfile
import pstats
import time
from collections import defaultdict
from typing import Any

import anyio
from mcp import Client
from opentelemetry import trace
from opentelemetry.metrics import NoOpMeterProvider
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import NoOpTracerProvider

from benchmarks._common import NoopExporter, Section, declared, median, section_main, server_process
from benchmarks._floor import telemetry_floor
from benchmarks.opcodes import opcodes_per_call
from otel_mcp_replay import McpReplayInstrumentor

ARMS = ("plain", "instrumented", "instrumented, no-op telemetry")
FLOOR = "telemetry floor (only the SDK calls the contract asks for; benchmarks/_floor.py)"
PROFILE_ROUNDS = 4


def run(quick: bool) -> Section:
    return anyio.run(_run, quick)


async def _run(quick: bool) -> Section:
    rounds, per_block, profiled = (2, 80, 100) if quick else (8, 200, 600)
    counted = 10 if quick else 40
    section = Section("2. The plugin's CPU per call (in process)")
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(NoopExporter()))
    trace.set_tracer_provider(tracer_provider)
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    plugin = McpReplayInstrumentor()
    with server_process() as url:
        providers: dict[str, dict[str, Any]] = {
            ARMS[1]: {"tracer_provider": tracer_provider, "meter_provider": meter_provider},
            ARMS[2]: {"tracer_provider": NoOpTracerProvider(), "meter_provider": NoOpMeterProvider()},
        }

        def switch(arm: str) -> None:
            if plugin.is_instrumented_by_opentelemetry:
                plugin.uninstrument()
            if arm != ARMS[0]:
                plugin.instrument(servers=declared(url), **providers[arm])

        cpu: dict[str, list[float]] = {arm: [] for arm in ARMS}
        wall: dict[str, list[float]] = {arm: [] for arm in ARMS}
        try:
            async with Client(url) as client:
                for arm in ARMS:  # warm-up
                    switch(arm)
                    await _calls(client, per_block)
                for _ in range(rounds):
                    for arm in ARMS:
                        switch(arm)
                        started_cpu, started = time.process_time(), time.perf_counter()
                        await _calls(client, per_block)
                        cpu[arm].append((time.process_time() - started_cpu) / per_block * 1e6)
                        wall[arm].append((time.perf_counter() - started) / per_block * 1e6)
                profilers = {arm: cProfile.Profile(time.thread_time) for arm in ARMS[:2]}
                for _ in range(PROFILE_ROUNDS):  # interleaved too: drift lands on both profiles
                    for arm, profiler in profilers.items():
                        switch(arm)
                        await _calls(client, 5)  # not profiled: the first calls after a switch
                        profiler.enable()
                        await _calls(client, profiled // PROFILE_ROUNDS)
                        profiler.disable()
                profiles = {arm: pstats.Stats(profiler) for arm, profiler in profilers.items()}
                opcodes = {}
                for arm in ARMS:
                    switch(arm)
                    opcodes[arm] = (await opcodes_per_call(client, counted)).total
                switch(ARMS[0])
                with telemetry_floor(tracer_provider, meter_provider):
                    opcodes[FLOOR] = (await opcodes_per_call(client, counted)).total
        finally:
            if plugin.is_instrumented_by_opentelemetry:
                plugin.uninstrument()
    tracer_provider.shutdown()

    plain = median(cpu[ARMS[0]])
    for arm in ARMS:
        section.add(
            f"CPU per call, {arm} (median of {rounds} blocks)",
            f"{median(cpu[arm]):.0f} us (wall {median(wall[arm]):.0f} us)",
        )
    section.add("plugin CPU per call (instrumented - plain)", f"{median(cpu[ARMS[1]]) - plain:.0f} us")
    section.add(
        "  of which the plugin's own logic (no-op telemetry - plain)",
        f"{median(cpu[ARMS[2]]) - plain:.0f} us",
    )
    section.add(
        "  of which the SDK's spans, events, metrics (instrumented - no-op)",
        f"{median(cpu[ARMS[1]]) - median(cpu[ARMS[2]]):.0f} us",
    )
    _add_opcodes(section, opcodes)
    section.notes.append(
        f"{rounds} rounds of {per_block} calls per arm, arms interleaved; "
        f"cProfile over {profiled} calls per arm; opcodes counted over {counted} calls per arm."
    )
    section.notes.append(
        "Opcodes: every Python bytecode instruction the event loop's thread executes per call, "
        "counted with sys.settrace: the same count on any run, whatever the machine's load (C code, "
        "pydantic-core's validation and the sockets among it, is not counted: the ratios overstate "
        "the share of the call's time)."
    )
    section.details = _profile_tables(profiles, profiled)
    return section


def _add_opcodes(section: Section, opcodes: dict[str, float]) -> None:
    plain = opcodes[ARMS[0]]
    for arm in (*ARMS, FLOOR):
        extra = "" if arm == ARMS[0] else f" ({opcodes[arm] / plain:.3f} x plain)"
        section.add(f"Python opcodes per call, {arm}", f"{opcodes[arm]:,.0f}{extra}")
    own, sdk = opcodes[ARMS[2]] - plain, opcodes[ARMS[1]] - opcodes[ARMS[2]]
    section.add("  the plugin's own logic (no-op telemetry - plain)", f"{own:+,.0f} ({own / plain:+.1%})")
    section.add("  the SDK's work for the plugin (instrumented - no-op)", f"{sdk:+,.0f} ({sdk / plain:+.1%})")
    floor = opcodes[FLOOR] - plain
    section.add("  the contract's telemetry alone (floor - plain)", f"{floor:+,.0f} ({floor / plain:+.1%})")


async def _calls(client: Client, calls: int) -> None:
    for i in range(calls):
        await client.call_tool("search", {"query": f"q{i}"})


def _short(filename: str) -> str:
    for marker in ("site-packages/", "/src/", "/lib/python3"):
        if marker in filename:
            filename = filename.split(marker, 1)[1]
    return filename


def _profile_tables(profiles: dict[str, pstats.Stats], calls: int) -> str:
    instrumented = profiles[ARMS[1]]
    stats: dict[Any, Any] = instrumented.stats  # type: ignore[attr-defined]
    ours = [
        (value[3], value[2], value[1], key) for key, value in stats.items() if "otel_mcp_replay" in key[0]
    ]
    ours.sort(key=lambda row: row[0], reverse=True)
    lines = [
        "Profile of the instrumented arm: top 15 of otel_mcp_replay by cumulative time "
        f"(the loop thread's CPU under cProfile, per call, {calls} calls; a wrapper's cumulative "
        "time includes the mcp/httpx2 code it wraps):",
        "",
        "| cumulative us/call | own us/call | calls/call | function |",
        "| --- | --- | --- | --- |",
    ]
    for cumulative, own, ncalls, key in ours[:15]:
        lines.append(
            f"| {cumulative / calls * 1e6:.1f} | {own / calls * 1e6:.1f} | {ncalls / calls:.1f} "
            f"| {_short(key[0])}:{key[1]} {key[2]} |"
        )
    ours.sort(key=lambda row: row[1], reverse=True)
    lines += [
        "",
        "The same profile, top 10 of otel_mcp_replay by own time (excluding what it calls; every "
        "builtin call is a profiler event charged to its caller, so a function making many, like "
        "record._read, looks several times its unprofiled cost: about 5 us, see benchmark 5):",
        "",
        "| own us/call | calls/call | function |",
        "| --- | --- | --- |",
    ]
    for _, own, ncalls, key in ours[:10]:
        lines.append(
            f"| {own / calls * 1e6:.1f} | {ncalls / calls:.1f} | {_short(key[0])}:{key[1]} {key[2]} |"
        )
    plain: dict[Any, Any] = profiles[ARMS[0]].stats  # type: ignore[attr-defined]
    by_package: dict[str, float] = defaultdict(float)
    for key in set(stats) | set(plain):
        extra = stats.get(key, (0, 0, 0.0))[2] - plain.get(key, (0, 0, 0.0))[2]
        by_package[_package(key[0])] += extra
    positive = sum(extra for extra in by_package.values() if extra > 0)
    lines += [
        "",
        "Where the instrumented arm's extra CPU goes, by package (own time under cProfile, "
        "instrumented minus plain; shares of the positive differences). The plugin adds work to "
        "otel_mcp_replay, opentelemetry, C builtins, the stdlib (json: the request and the answer "
        "are parsed), httpx2 (header reads, the URL as text) and anyio (each call's cancel scope "
        "and event); mcp, h11 and httpcore2 run the same code in both arms, so their difference, "
        "like any negative one, shows the noise:",
        "",
        "| package | extra us/call (profiled) | share |",
        "| --- | --- | --- |",
    ]
    for package, extra in sorted(by_package.items(), key=lambda item: -item[1]):
        if abs(extra) / calls * 1e6 >= 1:
            share = f"{extra / positive:.0%}" if extra > 0 else "(noise)"
            lines.append(f"| {package} | {extra / calls * 1e6:+.0f} | {share} |")
    lines.append(f"| net | {sum(by_package.values()) / calls * 1e6:+.0f} | |")
    return "\n".join(lines)


def _package(filename: str) -> str:
    if "otel_mcp_replay" in filename:
        return "otel_mcp_replay"
    if filename == "~":
        return "C functions (builtins, extension methods)"
    if "site-packages/" in filename:
        return filename.split("site-packages/", 1)[1].split("/", 1)[0]
    return "stdlib (asyncio, json, ...)"


if __name__ == "__main__":
    raise SystemExit(section_main(run))
