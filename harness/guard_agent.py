"""One agent process for the repeat guard's store tests: the plugin instrumented from its
environment, tool calls made on command, what it exported told back.

The rule: it does what an app does, nothing more. Configured only by the environment (the
`OTEL_PYTHON_MCP_REPLAY_*` variables the test sets), it reads one JSON command per line on stdin
and answers one JSON line on stdout:
  {"op": "call", "tool": ..., "arguments": {...}, "confirmed": bool} -> {"outcome": <how it ended>}
  {"op": "report"} -> the fallback metric's points, the log records, every exported span's name,
                      attributes and events, and how many store operations were begun.
A call opens its own session (mcp 1.x ends a session after a failed call). Run as
`python -m harness.guard_agent URL BACKEND` (BACKEND: asyncio or trio).
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

import anyio
import anyio.to_thread
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from harness.client import Client, is_error
from otel_mcp_replay import McpReplayInstrumentor, RedactingSpanProcessor, repeat_confirmed
from otel_mcp_replay import telemetry as t


class _Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[tuple[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append((record.levelname, record.getMessage()))


async def call_once(url: str, tool: str, arguments: dict[str, Any], confirmed: bool = False) -> str:
    """One call on a session of its own: how the call itself ended (`completed`, `tool-error`, the
    plugin's error by name, else the error's type). mcp 1.x then tears the session down after a
    failed call (docs/mcp-lines.md): that teardown is the SDK's, not the call's outcome."""
    outcome: str | None = None
    try:
        async with Client(url) as client:
            try:
                with anyio.fail_after(30):  # a hang guard only
                    if confirmed:
                        with repeat_confirmed():
                            result = await client.call_tool(tool, arguments)
                    else:
                        result = await client.call_tool(tool, arguments)
            except Exception as exc:
                outcome = _error_name(exc)
            else:
                outcome = "tool-error" if is_error(result) else "completed"
    except Exception as exc:
        if outcome is None:
            return _error_name(exc)
    assert outcome is not None
    return outcome


def _error_name(exc: BaseException) -> str:
    """The plugin's error the call ended with (found inside an exception group too), else its type."""
    seen: list[BaseException] = [exc]
    while seen:
        one = seen.pop()
        if type(one).__name__ in ("UnknownEffectError", "RepeatRefusedError", "ReplayUnavailableError"):
            return type(one).__name__
        seen.extend(getattr(one, "exceptions", ()))
    return type(exc).__name__


def _report(
    exporter: InMemorySpanExporter, reader: InMemoryMetricReader, kept: _Kept, instrumentor: Any
) -> dict[str, Any]:
    fallbacks: list[tuple[dict[str, Any], int]] = []
    data = reader.get_metrics_data()
    for resource_metrics in data.resource_metrics if data is not None else ():
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                if metric.name == t.METRIC_GUARD_STORE_FALLBACKS:
                    for point in metric.data.data_points:
                        fallbacks.append((dict(point.attributes or {}), int(getattr(point, "value", 0))))
    spans = [
        {
            "name": span.name,
            "attributes": {k: repr(v) for k, v in (span.attributes or {}).items()},
            "events": [
                {"name": e.name, "attributes": {k: repr(v) for k, v in (e.attributes or {}).items()}}
                for e in span.events
            ],
        }
        for span in exporter.get_finished_spans()
    ]
    guard = instrumentor.runtime.guard if instrumentor.runtime is not None else None
    shared = guard.shared if guard is not None else None
    operations = getattr(shared.store, "operations", 0) if shared is not None else 0
    return {"fallbacks": fallbacks, "logs": kept.records, "spans": spans, "store_operations": operations}


async def _serve(url: str) -> None:
    kept = _Kept()
    logging.getLogger("otel_mcp_replay").addHandler(kept)
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(RedactingSpanProcessor(SimpleSpanProcessor(exporter)))  # as documented
    reader = InMemoryMetricReader()
    instrumentor = McpReplayInstrumentor()
    instrumentor.instrument(tracer_provider=tracer_provider, meter_provider=MeterProvider([reader]))
    print(json.dumps({"ready": True}), flush=True)
    while True:
        line = await anyio.to_thread.run_sync(sys.stdin.readline)
        if not line:
            break
        command = json.loads(line)
        answer: dict[str, Any]
        if command["op"] == "call":
            outcome = await call_once(
                url, command["tool"], command["arguments"], bool(command.get("confirmed"))
            )
            answer = {"outcome": outcome}
        else:
            answer = _report(exporter, reader, kept, instrumentor)
        print(json.dumps(answer), flush=True)
    instrumentor.uninstrument()


def main() -> None:
    url, backend = sys.argv[1], sys.argv[2]
    anyio.run(_serve, url, backend=backend)


if __name__ == "__main__":
    main()
