"""5. The redaction processor per span, and the record allow-list it enforces.

Spans are made once by the SDK (a call span as the plugin makes it: four attributes, and for the
full case one `mcp.tool.request_attempts` event whose 100-row record comes from
record.call_record, as the plugin builds it) and then handed to
`RedactingSpanProcessor(SimpleSpanProcessor(exporter that drops spans))`.on_end again and again.
The processor's own cost is that minus the inner SimpleSpanProcessor's alone (also measured).

A record reaches the processor two ways. Filed by the plugin (the instrumentor's vouches' `file`, as every
call files it): checked at build, vouched for as the SDK stored it, and read back without the
cell-by-cell check. Written by any other code (span.add_event): checked whole, every cell, in
on_end. Both are measured; the target is read on the first, the spans the plugin writes.

Figures are per call, from many short runs (the median; min in brackets): a burst of the
machine's background load spoils a few runs, not the figure.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from benchmarks._common import NoopExporter, Section, clean_record, median, per_op_us, section_main
from otel_mcp_replay import telemetry as t
from otel_mcp_replay.instrumentor import McpReplayInstrumentor
from otel_mcp_replay.record import AttemptRow, validate_record
from otel_mcp_replay.redaction import RedactingSpanProcessor, RedactionRules

TARGET_US = 15.0
CALL_ATTRIBUTES = {
    t.MCP_METHOD_NAME: "tools/call",
    t.GEN_AI_TOOL_NAME: "search",
    t.JSONRPC_REQUEST_ID: "7",
    t.POLICY: "app-authorized",
}


def rows(n: int) -> list[AttemptRow]:
    listed = [AttemptRow(429, "throttle", "unknown", "first" if i == 0 else "app", 250 + i) for i in range(n)]
    if listed:
        listed[-1] = AttemptRow(200, "", "applied", "app", 0)
    return listed


def record(n: int) -> dict[str, Any]:
    return clean_record(rows(n))


def ended_span(with_record_rows: int | None, *, filed_by_plugin: bool = True) -> ReadableSpan:
    tracer = TracerProvider().get_tracer("benchmark")
    span = tracer.start_span("tools/call search", attributes=CALL_ATTRIBUTES)
    if with_record_rows is not None:
        if filed_by_plugin:
            McpReplayInstrumentor().vouches.file(span, record(with_record_rows))
        else:
            span.add_event(t.RECORD_EVENT, record(with_record_rows))
    span.end()
    return span  # type: ignore[return-value]


def run(quick: bool) -> Section:
    runs, loops = (60, 50) if quick else (400, 100)
    section = Section("5. Redaction processor per span (and the record allow-list)")
    inner = SimpleSpanProcessor(NoopExporter())
    # Built first, as an app builds its pipeline before its calls: from then on records are vouched for.
    processor = RedactingSpanProcessor(
        SimpleSpanProcessor(NoopExporter()),
        RedactionRules(),
        vouches=McpReplayInstrumentor().vouches,
        on_refused=lambda: None,
    )
    full, small, bare = ended_span(t.MAX_RECORD_ROWS), ended_span(3), ended_span(None)
    foreign = ended_span(t.MAX_RECORD_ROWS, filed_by_plugin=False)
    full_record = record(t.MAX_RECORD_ROWS)
    event_attributes = full.events[0].attributes
    one_row, hundred_rows = rows(1), rows(t.MAX_RECORD_ROWS)
    figures: dict[str, Callable[[], object]] = {
        "full": lambda: processor.on_end(full),
        "foreign": lambda: processor.on_end(foreign),
        "small": lambda: processor.on_end(small),
        "bare": lambda: processor.on_end(bare),
        "inner": lambda: inner.on_end(full),
        "validate event": lambda: validate_record(event_attributes),
        "validate dict": lambda: validate_record(full_record),
        "build 1": lambda: clean_record(one_row),
        "build 100": lambda: clean_record(hundred_rows),
    }
    samples = _interleaved(figures, runs, loops)
    us = {name: (median(values), min(values)) for name, values in samples.items()}
    own_full = us["full"][0] - us["inner"][0]
    section.add(
        "on_end, span with a full 100-row record the plugin filed",
        _us(us["full"]),
        f"<= {TARGET_US:.0f} us",
        us["full"][0] <= TARGET_US,
    )
    section.add("  the redaction's own share (minus the inner SimpleSpanProcessor)", f"{own_full:.1f} us",
                f"<= {TARGET_US:.0f} us", own_full <= TARGET_US)  # fmt: skip
    section.add(
        "on_end, span with a full 100-row record other code wrote (every cell checked)", _us(us["foreign"])
    )
    section.add("on_end, span with a 3-row record the plugin filed", _us(us["small"]))
    section.add("on_end, span without a record", _us(us["bare"]))
    section.add("inner SimpleSpanProcessor(drop) alone", _us(us["inner"]))
    section.add("validate_record, 100 rows (event attributes)", _us(us["validate event"]))
    section.add("validate_record, 100 rows (plain dict)", _us(us["validate dict"]))
    section.add("call_record, 1 row", _us(us["build 1"]))
    section.add("call_record, 100 rows", _us(us["build 100"]))
    section.notes.append(
        f"{runs} rounds; in each, every figure gets one run of {loops} calls (interleaved, so a burst of "
        "background load lands on all figures alike): median (min) over the rounds."
    )
    return section


def _interleaved(figures: dict[str, Callable[[], object]], runs: int, loops: int) -> dict[str, list[float]]:
    for fn in figures.values():
        fn()
    samples: dict[str, list[float]] = {name: [] for name in figures}
    for _ in range(runs):
        for name, fn in figures.items():
            samples[name].extend(per_op_us(fn, runs=1, loops=loops))
    return samples


def _us(figure: tuple[float, float]) -> str:
    return f"{figure[0]:.1f} us ({figure[1]:.1f})"


if __name__ == "__main__":
    raise SystemExit(section_main(run))
