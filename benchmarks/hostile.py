"""6. Hostile input: what the plugin adds to the plain SDK on input a server or the environment controls.

`python -m benchmarks.hostile [--quick] [--json PATH]` (from the repository root, with `src` on
PYTHONPATH). The hostile cases, each at two sizes:

- an event stream (streamable HTTP, 2xx `text/event-stream`) of blank lines, and one of `: x`
  comments, before the answer: 8 and 16 MB;
- a tool result (2xx `application/json`): 20 and 40 MB;
- a JSON-RPC error whose message is a long word ending in " ://": 50k and 100k characters (its
  cost is redaction's, which the plugin's RedactingSpanProcessor runs on the span that records it);
- an environment value: `config.configuration_of()` of OTEL_PYTHON_MCP_REPLAY_SERVERS at 0.5 and 1 MB.

Set-up: the demo server in its own process on 127.0.0.1, answering a `tools/call` of the tool
`hostile` with the case its arguments name, prebuilt (the FaultPlan's rule answers in place of the
tool: the server's own cost is a write of prebuilt bytes, the same in both arms). In this process
one `mcp.Client` calls it with the plugin off (plain) and on (instrumented, nothing declared:
compatibility, what every app gets), in alternation. The global TracerProvider (so the SDK's own
spans, which carry a JSON-RPC error's message, exist in both arms) sends spans to a
SimpleSpanProcessor, through RedactingSpanProcessor in the instrumented arm, so that their whole
cost is inside the call. Figures
are medians of process CPU time (this process, all threads: the server's CPU is not in it) and of
wall time. The environment case has no plain arm: its reference is `json.loads` of the same text,
the least any reader of it pays.

Verdicts, on the least CPU of each arm's runs: within 2x of plain (instrumented / plain <= 2, so
the plugin adds at most what the SDK itself spends) and linear growth (instrumented at twice the
size <= 3x at the size, so a cost quadratic in the input, which would be 4x, shows).
"""

from __future__ import annotations

import contextlib
import gc
import json
import multiprocessing
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event as EventType
from typing import Any

import anyio
from mcp import Client
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from benchmarks._common import LOOPBACK, NoopExporter, Section, median, section_main
from otel_mcp_replay import McpReplayInstrumentor, RedactingSpanProcessor
from otel_mcp_replay import environment_variables as ev

MB = 1_000_000
TOOL = "hostile"
WITHIN = 2.0  # instrumented / plain
GROWTH = 3.0  # instrumented at 2x the size / at 1x: linear is ~2, quadratic ~4


@dataclass(frozen=True)
class Case:
    name: str
    sizes: tuple[int, int]  # full run
    quick: tuple[int, int]
    unit: str  # how a size is shown


CASES = (
    Case("event stream: blank lines before the answer", (8 * MB, 16 * MB), (1 * MB, 2 * MB), "MB"),
    Case("event stream: `: x` comments before the answer", (8 * MB, 16 * MB), (1 * MB, 2 * MB), "MB"),
    Case("tool result (application/json)", (20 * MB, 40 * MB), (2 * MB, 4 * MB), "MB"),
    Case('JSON-RPC error message ending in " ://"', (50_000, 100_000), (5_000, 10_000), "k chars"),
)
ENV_CASE = Case("OTEL_PYTHON_MCP_REPLAY_SERVERS: config.resolve()", (MB // 2, MB), (MB // 8, MB // 4), "MB")
KINDS = ("blank", "comments", "result", "error")


# -- the server: the demo server, answering `hostile` calls with prebuilt bytes ---------------------


def _answer(request_id: object, result: dict[str, Any]) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}).encode()


def _body(kind: str, size: int, request_id: object) -> tuple[bytes, str]:
    text_result = {"content": [{"type": "text", "text": "ok"}], "isError": False, "resultType": "complete"}
    if kind in ("blank", "comments"):
        padding = b"\n" if kind == "blank" else b": x\n"
        event = b"event: message\ndata: " + _answer(request_id, text_result) + b"\n\n"
        return padding * (size // len(padding)) + event, "text/event-stream"
    if kind == "result":
        big = {"content": [{"type": "text", "text": "x" * size}], "isError": False, "resultType": "complete"}
        return _answer(request_id, big), "application/json"
    message = "a" * (size - 4) + " ://"
    error = {"jsonrpc": "2.0", "id": request_id, "error": {"code": -32000, "message": message}}
    return json.dumps(error).encode(), "application/json"


def _serve(ready: Connection, stop: EventType) -> None:
    """In the server's own process: send the MCP URL on `ready`, serve until `stop` is set."""
    from harness.faults import FaultContext, FaultPlan, Status
    from harness.server import Counters, running_server

    built: dict[tuple[str, int, str], Status] = {}

    def rule(ctx: FaultContext) -> Status | None:
        if ctx.tool != TOOL:
            return None
        kind, size = str(ctx.arguments.get("kind")), int(ctx.arguments.get("size", 0))
        key = (kind, size, ctx.request_id)
        if key not in built:
            built.clear()  # one case at a time: 40 MB bodies are not kept
            request_id: object = int(ctx.request_id) if ctx.request_id.isdigit() else ctx.request_id
            body, content_type = _body(kind, size, request_id)
            built[key] = Status(200, body, {"content-type": content_type, "cache-control": "no-cache"})
        return built[key]

    with running_server("streamable", fault_plan=FaultPlan(rule), counters=Counters(log_limit=0)) as handle:
        ready.send(handle.url)
        stop.wait()


@contextlib.contextmanager
def hostile_server() -> Iterator[str]:
    """The hostile server in a child process (its CPU is never this process's); its URL."""
    spawn = multiprocessing.get_context("spawn")
    ready, child_end = spawn.Pipe(duplex=False)
    stop = spawn.Event()
    process = spawn.Process(target=_serve, args=(child_end, stop), daemon=True)
    process.start()
    try:
        if not ready.poll(60):
            raise RuntimeError("the hostile server did not start in time")
        url: str = ready.recv()
        if not url.startswith(f"http://{LOOPBACK}:"):
            raise RuntimeError("the hostile server is not on loopback")
        yield url
    finally:
        stop.set()
        process.join(15)
        if process.is_alive():
            process.kill()
            process.join(5)


# -- the client ------------------------------------------------------------------------------------


class _ArmSpans(SpanProcessor):
    """Spans to a SimpleSpanProcessor, through RedactingSpanProcessor while `redacting`."""

    def __init__(self) -> None:
        self.plain = SimpleSpanProcessor(NoopExporter())
        self.redacted = RedactingSpanProcessor(SimpleSpanProcessor(NoopExporter()))
        self.redacting = False

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        (self.redacted if self.redacting else self.plain).on_start(span, parent_context=parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        (self.redacted if self.redacting else self.plain).on_end(span)

    def shutdown(self) -> None:
        self.plain.shutdown()
        self.redacted.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


@dataclass
class Timing:
    cpu_s: list[float]
    wall_s: list[float]


async def _call(client: Client, kind: str, size: int) -> tuple[float, float]:
    gc.collect()
    cpu, wall = time.process_time(), time.perf_counter()
    try:
        result = await client.call_tool(TOOL, {"kind": kind, "size": size})
    except Exception as exc:  # the error case: the SDK raises the server's JSON-RPC error
        if kind != "error":
            raise RuntimeError(f"{kind} {size}: the call failed ({type(exc).__name__})") from exc
    else:
        if kind == "error" or result.is_error:
            raise RuntimeError(f"{kind} {size}: unexpected answer")
    return time.process_time() - cpu, time.perf_counter() - wall


async def _client_cases(url: str, quick: bool, runs: int) -> dict[tuple[str, int, str], Timing]:
    spans = _ArmSpans()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(spans)
    trace.set_tracer_provider(tracer_provider)  # the SDK's own spans exist in both arms, as in an app
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    plugin = McpReplayInstrumentor()
    timings: dict[tuple[str, int, str], Timing] = {}

    def switch(arm: str) -> None:
        if plugin.is_instrumented_by_opentelemetry:
            plugin.uninstrument()
        spans.redacting = arm == "instrumented"
        if arm == "instrumented":
            plugin.instrument(tracer_provider=tracer_provider, meter_provider=meter_provider)

    try:
        async with Client(url) as client:
            for case, kind in zip(CASES, KINDS, strict=True):
                for size in case.quick if quick else case.sizes:
                    for arm in ("plain", "instrumented"):  # one warm-up call each, not counted
                        switch(arm)
                        await _call(client, kind, size)
                    for _ in range(runs):
                        for arm in ("plain", "instrumented"):
                            switch(arm)
                            cpu, wall = await _call(client, kind, size)
                            timing = timings.setdefault((kind, size, arm), Timing([], []))
                            timing.cpu_s.append(cpu)
                            timing.wall_s.append(wall)
                    print(f"  {kind} {size}: done", file=sys.stderr, flush=True)
    finally:
        switch("plain")
        tracer_provider.shutdown()
    return timings


# -- the environment -------------------------------------------------------------------------------


def servers_json(size: int) -> str:
    """A valid OTEL_PYTHON_MCP_REPLAY_SERVERS of about `size` bytes: endpoints with many tools."""
    tools = {f"tool_{i:07d}": {"on": ["throttle", "network"]} for i in range(size // 40)}
    declaration = {"policy": "app-authorized", "label": "env", "tools": tools}
    return json.dumps({"http://127.0.0.1:9/mcp": declaration})


def _env_timing(size: int, runs: int) -> dict[str, list[float]]:
    """CPU of configuration_of() on a SERVERS value of `size` bytes: as it runs, and with the cyclic GC
    paused (what the plugin's own code costs, without CPython's collections over the heap), and
    of json.loads alone."""
    from otel_mcp_replay.config import configuration_of

    text = servers_json(size)
    environ = {ev.OTEL_PYTHON_MCP_REPLAY_SERVERS: text}

    def cpu(fn: Callable[[], object], paused: bool = False) -> float:
        gc.collect()
        if paused:
            gc.disable()
        try:
            started = time.process_time()
            fn()
            return time.process_time() - started
        finally:
            gc.enable()

    resolved = configuration_of({}, environ)
    if resolved.fail_closed or len(resolved.servers) != 1:
        raise RuntimeError("the environment case did not read")
    return {
        "resolve": [cpu(lambda: configuration_of({}, environ)) for _ in range(runs)],
        "resolve, GC paused": [cpu(lambda: configuration_of({}, environ), paused=True) for _ in range(runs)],
        "json.loads": [cpu(lambda: json.loads(text)) for _ in range(runs)],
    }


# -- the report ------------------------------------------------------------------------------------


def _shown(case: Case, size: int) -> str:
    return f"{size / MB:g} MB" if case.unit == "MB" else f"{size // 1000}k chars"


def _s(samples: list[float]) -> str:
    return f"{median(samples):.3f} ({min(samples):.3f})"


def _growth(section: Section, name: str, at_1x: list[float], at_2x: list[float]) -> None:
    growth = min(at_2x) / min(at_1x) if min(at_1x) > 0 else float("inf")
    section.add(name, f"x{growth:.2f}", f"<= x{GROWTH:g} (linear)", growth <= GROWTH)


def run(quick: bool) -> Section:
    runs = 2 if quick else 7
    section = Section("6. Hostile input: the plugin's added time vs the plain SDK")
    with hostile_server() as url:
        timings = anyio.run(_client_cases, url, quick, runs)
    for case, kind in zip(CASES, KINDS, strict=True):
        small, large = case.quick if quick else case.sizes
        for size in (small, large):
            plain = timings[(kind, size, "plain")]
            instr = timings[(kind, size, "instrumented")]
            added = min(instr.cpu_s) - min(plain.cpu_s)
            ratio = min(instr.cpu_s) / min(plain.cpu_s) if min(plain.cpu_s) > 0 else float("inf")
            section.add(
                f"{case.name}, {_shown(case, size)}: CPU s plain / instrumented, median (min); added; "
                "wall s median",
                f"{_s(plain.cpu_s)} / {_s(instr.cpu_s)}; {added:+.3f} s, x{ratio:.2f}; "
                f"wall {median(plain.wall_s):.3f} / {median(instr.wall_s):.3f}",
                f"<= x{WITHIN:g} of plain",
                ratio <= WITHIN,
            )
        _growth(
            section,
            f"{case.name}: instrumented CPU (min) at 2x the size / at 1x",
            timings[(kind, small, "instrumented")].cpu_s,
            timings[(kind, large, "instrumented")].cpu_s,
        )
    env = {size: _env_timing(size, runs) for size in (ENV_CASE.quick if quick else ENV_CASE.sizes)}
    for size, figures in env.items():
        section.add(
            f"{ENV_CASE.name}, {_shown(ENV_CASE, size)}: CPU s median (min)",
            "; ".join(f"{name} {_s(samples)}" for name, samples in figures.items()),
        )
    small_env, large_env = env.values()
    for name in ("resolve", "resolve, GC paused"):
        title = f"{ENV_CASE.name}: {name}, CPU (min) at 2x / at 1x"
        _growth(section, title, small_env[name], large_env[name])
    section.notes.append(
        f"{runs} calls per arm and size, alternating plain and instrumented after one uncounted call "
        "of each; CPU is this process's (all threads), wall the caller's; verdicts on the least CPU "
        "of each arm (the run the machine's other load disturbed least); nothing declared "
        "(compatibility); spans to SimpleSpanProcessor, through RedactingSpanProcessor in the "
        "instrumented arm."
    )
    section.notes.append("the error case's cost is redaction's: every rule on RE2, linear in the text.")
    section.notes.append(
        "environment: no plain arm (without the plugin nothing reads the variable); json.loads of the "
        "same text is the least any reader pays. With the GC running, CPython's full collections "
        "(one per 25% growth of the heap's long-lived objects, each over the whole heap) add a step "
        "that the GC-paused row leaves out."
    )
    return section


def main(argv: Sequence[str] | None = None) -> int:
    return section_main(run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
