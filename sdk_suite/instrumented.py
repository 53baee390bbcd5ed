"""The instrumented runs' pytest plugin (`-p sdk_suite.instrumented`): the plugin under test
instrumented for the whole session, as an app that installs it would (no declaration: the
compatibility policy), and every record it files checked.

`$SDK_SUITE_INSTRUMENT` chooses when `instrument()` runs:

- `early`: when pytest imports this plugin, before any conftest or test module imports mcp;
- `late`: at `pytest_collection_finish`, after every test module imported mcp (and bound names such
  as `sse_client` into its own namespace): the contract says import order never matters.

The spans go to an in-memory exporter on a private TracerProvider (and the metrics to a private
MeterProvider), so the SDK suite's own span captures (logfire's `capfire`) see none of them. After
each test this plugin reads that test's `tools/call` spans and appends one JSON line per test that
made a call to `$SDK_SUITE_RECORDS` (one file per xdist worker): how many
`mcp.tool.request_attempts` records, every `mcp.tool.request_attempts.refused` event with the
key that was refused and what was in it, every filed record that the allow-list itself would refuse,
every record saying effect `unknown` with verdict `completed`, calls that filed nothing, and what
the plugin logged at WARNING or above. None of this changes a test's outcome: plain and
instrumented outcomes are compared by the driver (`python -m sdk_suite`).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Generator
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_mcp_replay import McpReplayInstrumentor
from otel_mcp_replay import telemetry as t
from otel_mcp_replay.record import RecordRefused, record_refusal

try:  # where the call's record is built: watched to learn which key a refused record broke
    from otel_mcp_replay import call as _call_module
except ImportError:  # moved: refusals are still counted, without their key
    _call_module = None  # type: ignore[assignment]

MODE = os.environ.get("SDK_SUITE_INSTRUMENT", "early")
if MODE not in ("early", "configure", "late"):
    raise pytest.UsageError(f"SDK_SUITE_INSTRUMENT must be early, configure or late, not {MODE!r}")

EXPORTER = InMemorySpanExporter()
_provider = TracerProvider()
_provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
_INSTRUMENTOR = McpReplayInstrumentor()

# call_record's argument behind each refused record key (a column's refusal names its column).
_ARGUMENT_OF = {
    t.POLICY: "policy",
    t.SENT: "sent",
    t.EFFECT: "effect",
    t.VERDICT: "verdict",
    t.MAY_HAVE_RUN: "may_have_run",
    t.ENDPOINT: "endpoint",
    t.GEN_AI_TOOL_NAME: "tool",
    t.JSONRPC_REQUEST_ID: "request_id",
}
_COLUMN_OF = {key: index for index, key in enumerate(t.RECORD_COLUMN_KEYS)}  # AttemptRow order
_refusals: list[dict[str, Any]] = []  # call_record's refusals since the last test ended
_logged: list[dict[str, str]] = []  # what otel_mcp_replay logged at WARNING or above since then


def _describe(value: object) -> dict[str, Any]:
    """What a refused cell held (test data of the SDK's suite, never an app's)."""
    described: dict[str, Any] = {"type": type(value).__name__, "repr": repr(value)[:160]}
    if isinstance(value, str):
        described["len"] = len(value)
        odd = [c for c in value if not c.isprintable()]
        if odd:
            described["not_printable"] = sorted({f"U+{ord(c):04X}" for c in odd})[:8]
    return described


def _watching_call_record(original: Any) -> Any:
    """call_record as the call module uses it, noting each refusal with its key and value."""

    def call_record(**kwargs: Any) -> Any:
        try:
            return original(**kwargs)
        except RecordRefused as refused:
            key = refused.field.split(" ", 1)[0]
            argument, column = _ARGUMENT_OF.get(key), _COLUMN_OF.get(key)
            caller = sys._getframe(1).f_locals.get("self")  # the ToolCall filing it
            span = getattr(caller, "span", None)
            rows = list(kwargs.get("rows", ()))
            if argument is not None:
                value: Any = _describe(kwargs[argument])
            elif column is not None:  # the refused column's cells
                value = [_describe(row[column]) for row in rows[:5]]
            else:
                value = None
            _refusals.append(
                {
                    "field": refused.field,
                    "value": value,
                    "rows": [list(row) for row in rows[:5]],
                    "tool": kwargs.get("tool"),
                    "span_id": span.get_span_context().span_id if span is not None else None,
                }
            )
            raise

    return call_record


class _LogTap(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        exc = record.exc_info[1] if record.exc_info else None
        line = f"{record.levelname} {record.getMessage()}" + (f": {exc!r}" if exc else "")
        _logged.append({"line": line})


def _instrument() -> None:
    if hasattr(_call_module, "call_record"):
        _call_module.call_record = _watching_call_record(_call_module.call_record)
    logger = logging.getLogger("otel_mcp_replay")
    logger.addHandler(_LogTap(logging.WARNING))
    _INSTRUMENTOR.instrument(tracer_provider=_provider, meter_provider=MeterProvider())


if MODE == "early":
    _instrument()  # at plugin load: before conftest.py and the test modules import mcp


def pytest_collection_finish(session: pytest.Session) -> None:
    if MODE == "late":
        _instrument()  # every test module has imported mcp by now


def _findings(spans: list[ReadableSpan]) -> dict[str, Any]:
    refusals, _refusals[:] = list(_refusals), []
    logged, _logged[:] = list(_logged), []
    found: dict[str, Any] = {"calls": 0, "records": 0, "refused": [], "invalid_filed": []}
    found.update(unknown_completed=[], no_record=[], logged=logged)
    attempts: dict[int, list[dict[str, Any]]] = {}  # the attempt spans under each call span
    for span in spans:
        if t.ATTEMPT in (span.attributes or {}) and span.parent is not None:
            a = span.attributes or {}
            attempts.setdefault(span.parent.span_id, []).append(
                {
                    k: a.get(v)
                    for k, v in (("n", t.ATTEMPT), ("status", t.HTTP_STATUS_CODE), ("effect", t.EFFECT))
                }
            )
    for span in spans:
        if not span.name.startswith(t.CALL_SPAN_PREFIX + " "):
            continue
        found["calls"] += 1
        attributes = dict(span.attributes or {})
        tool = attributes.get(t.GEN_AI_TOOL_NAME)
        names = [event.name for event in span.events]
        for event in span.events:
            if event.name == t.RECORD_EVENT:
                found["records"] += 1
                record: dict[str, Any] = dict(event.attributes or {})
                refusal = record_refusal(event.attributes)
                if refusal is not None:
                    found["invalid_filed"].append({"tool": tool, "field": refusal})
                if record.get(t.EFFECT) == "unknown" and record.get(t.VERDICT) == "completed":
                    found["unknown_completed"].append(
                        {
                            "tool": tool,
                            "status": list(record.get(t.ATTEMPTS_STATUS, ())),
                            "failure": list(record.get(t.ATTEMPTS_FAILURE, ())),
                            "effect": list(record.get(t.ATTEMPTS_EFFECT, ())),
                            "permission": list(record.get(t.ATTEMPTS_PERMISSION, ())),
                            "endpoint": record.get(t.ENDPOINT),
                            "attempt_spans": attempts.get(span.get_span_context().span_id, []),
                        }
                    )
            elif event.name == t.RECORD_REFUSED_EVENT:
                span_id = span.get_span_context().span_id
                why = next((r for r in refusals if r["span_id"] == span_id), None)
                found["refused"].append(
                    {"tool": tool, "span_attributes": {k: str(v) for k, v in attributes.items()}, "why": why}
                )
        if t.RECORD_EVENT not in names and t.RECORD_REFUSED_EVENT not in names:
            found["no_record"].append({"tool": tool, "events": names})
    return found


class _Records:
    def __init__(self, path: str) -> None:
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 (open for the whole session)

    def write(self, nodeid: str) -> None:
        spans = list(EXPORTER.get_finished_spans())
        EXPORTER.clear()
        found = _findings(spans)
        if found["calls"] or found["logged"]:
            self._file.write(json.dumps({"nodeid": nodeid, **found}) + "\n")
            self._file.flush()

    def close(self) -> None:
        self._file.close()


_records: _Records | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _records
    if MODE == "configure":
        _instrument()  # the initial conftests (and what they import) have imported mcp by now
    path = os.environ.get("SDK_SUITE_RECORDS")
    if path:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        _records = _Records(f"{path}.{worker}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, None, None]:
    if _records is not None:
        _records.write("(between tests)")  # what ended outside any test is not this test's
    yield
    if _records is not None:
        _records.write(item.nodeid)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _records is not None:
        _records.write("(after the last test)")
        _records.close()
