"""9. Python opcodes per clean call: the plugin's price in bytecode, exact from run to run.

What no background load can blur: every Python bytecode instruction the calling thread executes
during a clean `tools/call` (sys.settrace with `frame.f_trace_opcodes`: the tracer's opcode events;
the BatchSpanProcessor's worker would run in another thread, so spans end in a SimpleSpanProcessor
here and their export is counted too, to an exporter that drops them). The arms of benchmark 1
(plain, peer, plugin, both, floor, skeleton; `overhead.ArmSwitch`), 20 calls each after 5 that are
not counted, with the tracing and metrics SDKs live. The figures: each arm's opcodes per call, what
the peer and the plugin add over plain, their ratio (issue 23's goal: the plugin at most 0.75 of the
peer), the same ratio for the floor and the skeleton (the least an implementation of the contract
could add, benchmarks/overhead.py), and the plugin's own opcodes (those executed in frames of
otel_mcp_replay's modules). Then the same arms with redaction in the export path
(`SimpleSpanProcessor(RedactingSpanExporter(exporter))`: every span of the process redacted in the
calling thread, so its opcodes are counted as well).

C work (sockets, pydantic-core's validation, JSON scanning, the SDK's C helpers) is not in these
counts: benchmark 1 weighs the CPU.
"""

from __future__ import annotations

import gc
import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any

import anyio
from mcp import Client
from opentelemetry import _logs, trace
from opentelemetry.sdk._logs import LoggerProvider, LogRecordProcessor, ReadableLogRecord, ReadWriteLogRecord
from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult, SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from benchmarks._common import NoopExporter, Section, declared, section_main, server_process
from benchmarks.overhead import ArmSwitch, SwitchedProcessor
from otel_mcp_replay import McpReplayInstrumentor, RedactingLogRecordExporter, RedactingSpanExporter

TARGET_RATIO = 0.75  # plugin-added opcodes at most this share of the peer's (issue 23)
CALLS = 20
SETTLE = 5
# floor and skeleton: the least an implementation of the contract could add (benchmarks/overhead.py).
# skeleton-both: the skeleton in the whole set-up (the peer on), the least the "both" arm could be.
ARMS = ("plain", "peer", "plugin", "both", "floor", "skeleton", "skeleton-both")
REDACTED = " (redaction on)"
# Where the record goes (the `record` setting): the plugin arm again with each of the opt-in places,
# log records exported in the calling thread (SimpleLogRecordProcessor) so their cost is counted.
RECORD_PLACES = ("log", "both")
OURS = "/otel_mcp_replay/"  # a frame of the plugin: its code's file is in this package
SKELETON = "/benchmarks/_skeleton.py"  # a frame of the skeleton's own Python


@dataclass
class Opcodes:
    """Opcodes per call in the calling thread: all of them, those in the plugin's frames, and those
    in the skeleton's."""

    total: float
    own: float
    skeleton: float = 0.0


async def opcodes_per_call(client: Client, calls: int, settle: int = SETTLE) -> Opcodes:
    """`calls` clean calls of `search` on `client`, counted after `settle` that are not."""
    total = own = skeleton = 0

    def count(frame: FrameType, event: str, arg: object) -> Any:
        nonlocal total, own, skeleton
        frame.f_trace_opcodes = True
        if event == "opcode":
            total += 1
            filename = frame.f_code.co_filename
            if OURS in filename:
                own += 1
            elif filename.endswith(SKELETON):
                skeleton += 1
        return count

    await search_calls(client, settle)  # the first calls after a switch fill caches
    # The metrics SDK draws its exemplars from the random module: seeded, every run draws the same,
    # so a commit's count repeats exactly (unseeded, an arm's count moved by up to 100 per call).
    random.seed(0)
    gc.collect()
    gc.disable()  # a collection's finalizers would run Python code at a moment no call decides
    sys.settrace(count)
    try:
        await search_calls(client, calls)
    finally:
        sys.settrace(None)
        gc.enable()
    return Opcodes(total / calls, own / calls, skeleton / calls)


async def search_calls(client: Client, calls: int) -> None:
    for i in range(calls):
        result = await client.call_tool("search", {"query": f"q{i}"})
        if result.is_error:
            raise RuntimeError("the clean path met an error")


def run(quick: bool) -> Section:
    return anyio.run(_run, quick)


async def _run(quick: bool) -> Section:
    section = Section("9. Python opcodes per clean call (exact: no load blurs them)")
    exporter = NoopExporter()
    export_path = SwitchedProcessor(SimpleSpanProcessor(exporter))
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(export_path)
    trace.set_tracer_provider(tracer_provider)
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    # The global SDK LoggerProvider the `log` and `both` arms file through (the others emit nothing).
    logs = DroppedLogs()
    log_path = SwitchedLogProcessor(SimpleLogRecordProcessor(logs))
    logger_provider = LoggerProvider()
    logger_provider.add_log_record_processor(log_path)
    _logs.set_logger_provider(logger_provider)
    counted: dict[str, Opcodes] = {}
    redacted: dict[str, Opcodes] = {}
    with server_process() as url:
        switch = ArmSwitch(
            {"tracer_provider": tracer_provider, "meter_provider": meter_provider, "servers": declared(url)}
        )
        try:
            async with Client(url) as client:
                for arm in ARMS:
                    switch(arm)
                    counted[arm] = await opcodes_per_call(client, CALLS)
                await count_places(client, switch, counted, log_path, SimpleLogRecordProcessor(logs))
                vouches = McpReplayInstrumentor().vouches  # as the configurator passes them
                export_path.inner = SimpleSpanProcessor(RedactingSpanExporter(exporter, vouches=vouches))
                for arm in ARMS:
                    switch(arm)
                    redacted[arm] = await opcodes_per_call(client, CALLS)
                redacting = RedactingLogRecordExporter(logs, vouches=vouches)
                await count_places(client, switch, redacted, log_path, SimpleLogRecordProcessor(redacting))
        finally:
            switch.off()
    tracer_provider.shutdown()
    report(section, counted)
    report_places(section, counted)
    report(section, redacted, REDACTED)
    report_places(section, redacted, REDACTED)
    section.notes.append(
        f"{CALLS} clean calls per arm (after {SETTLE} not counted), one Client for every arm; spans "
        "to SimpleSpanProcessor(exporter that drops them), an SDK MeterProvider; declaration: "
        "app-authorized, search repeated on throttle and network. --quick changes nothing here: "
        "the count is exact."
    )
    return section


async def count_places(
    client: Client,
    switch: ArmSwitch,
    counted: dict[str, Opcodes],
    log_path: SwitchedLogProcessor,
    export: LogRecordProcessor,
) -> None:
    """The plugin arm with the record filed in each of RECORD_PLACES (its log records to `export`)."""
    log_path.inner = export
    switch.off()  # the last arm's patches (the skeleton's) too
    for place in RECORD_PLACES:
        placed = ArmSwitch({**switch.settings, "record": place})
        placed("plugin")
        try:
            counted[f"plugin, record={place}"] = await opcodes_per_call(client, CALLS)
        finally:
            placed.off()


def report_places(section: Section, counted: dict[str, Opcodes], suffix: str = "") -> None:
    plugin = counted["plugin"].total
    for place in RECORD_PLACES:
        arm = f"plugin, record={place}"
        section.add(
            f"opcodes per call, {arm}{suffix}; over record=span_event (the default)",
            f"{counted[arm].total:,.0f}; {counted[arm].total - plugin:+,.0f}",
        )


class DroppedLogs(LogRecordExporter):
    """Accepts and drops log records: what the SDK does to make and hand them on is the cost."""

    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        return LogRecordExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


class SwitchedLogProcessor(LogRecordProcessor):
    """Hands log records to `inner`, which the benchmark swaps (with or without redaction)."""

    def __init__(self, inner: LogRecordProcessor) -> None:
        self.inner = inner

    def on_emit(self, log_record: ReadWriteLogRecord) -> None:
        self.inner.on_emit(log_record)

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


def report(section: Section, counted: dict[str, Opcodes], suffix: str = "") -> None:
    plain = counted["plain"].total
    added = {arm: counted[arm].total - plain for arm in ARMS[1:]}
    section.add(f"opcodes per call, plain{suffix}", f"{plain:,.0f}")
    for arm in ARMS[1:]:
        section.add(
            f"opcodes per call, {arm}{suffix}; added over plain",
            f"{counted[arm].total:,.0f}; {added[arm]:+,.0f}",
        )
    # Issue 33's goal: the set-up with the httpx2 instrumentation (mcp's own spans live) costs no more
    # with the plugin than without it (1.03 with redaction in the export path): the plugin's spans
    # replace the ones they made redundant.
    whole = counted["both"].total / counted["peer"].total
    goal = 1.03 if suffix else 1.00
    section.add(
        f"(peer + plugin) / peer opcodes per call, the whole set-up{suffix}",
        f"{whole:.3f}",
        target=f"<= {goal:.2f}",
        met=whole <= goal,
    )
    # What that goal leaves for any code: the skeleton (no law, no failure handled) in the same
    # set-up, and the same without the Python of its own (its frames and the plugin's JSON reader it
    # borrows): the contract's SDK calls alone, on top of the set-up's.
    if not suffix:
        least = counted["skeleton-both"]
        peer = counted["peer"].total
        section.add(
            "(peer + skeleton) / peer opcodes per call, the whole set-up", f"{least.total / peer:.3f}"
        )
        sdk_only = least.total - least.skeleton - least.own
        section.add(
            "(peer + the contract's SDK calls) / peer opcodes per call, the whole set-up",
            f"{sdk_only / peer:.3f}",
        )
    ratio = added["plugin"] / added["peer"]
    section.add(
        f"plugin-added / peer-added opcodes per call{suffix}",
        f"{ratio:.3f}",
        target=f"<= {TARGET_RATIO}",
        met=ratio <= TARGET_RATIO,
    )
    section.add(
        f"(plugin + peer)-added / peer-added opcodes per call{suffix}", f"{added['both'] / added['peer']:.3f}"
    )
    # The same goal read against the least any implementation could add: the SDK calls alone, and
    # those with the least Python around them (no law). Not with redaction on: their records are not
    # vouched for (record.Vouches), so the redaction checks them whole, as the plugin's it need not.
    for arm in ("floor", "skeleton") if not suffix else ():
        section.add(f"{arm}-added / peer-added opcodes per call{suffix}", f"{added[arm] / added['peer']:.3f}")
    # With redaction on, otel_mcp_replay's frames redact every span, the plain arm's too.
    # (The skeleton borrows the plugin's JSON reader: its frames there are not the plugin's own price.)
    own = ", ".join(
        f"{arm} {counted[arm].own:,.0f}" for arm in ARMS[:4] if counted[arm].own or arm != "plain"
    )
    section.add(f"the plugin's own opcodes per call (in otel_mcp_replay frames){suffix}", own)


if __name__ == "__main__":
    raise SystemExit(section_main(run))
