"""The record as a log-based event (OTEP 4430), opt-in: `record` = `span_event`, `log` or `both`.

Against the SDK's own server on loopback, faults injected at the ASGI level, executions counted on
the server, in each protocol era the installed mcp line speaks (scripts/test-lines runs this file on
mcp 1.30 too). The log records are read from the SDK's InMemoryLogExporter behind the run's one
global SDK LoggerProvider (tests/support/logs.py): in `log` the call span holds no record event and
ONE log record per round holds the very record, with the call span's trace and span ids; in `both`
both say the same; in `span_event` (and for a bad value of the setting) no log record is emitted.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from opentelemetry._logs import SeverityNumber
from tests.support.autoinstrument import SOURCE
from tests.support.calls import declared, refused_call
from tests.support.logs import Logs, attributes_of
from tests.support.telemetry import Telemetry, records

from harness.client import Client, McpError
from harness.faults import DropMidBody, JsonRpcError, Throttle
from harness.server import Counters, ServerHandle, build_server, running_server
from otel_mcp_replay import UnknownEffectError
from otel_mcp_replay import environment_variables as ev
from otel_mcp_replay import telemetry as t
from otel_mcp_replay.version import __version__

pytestmark = pytest.mark.anyio

PLACES = ("span_event", "log", "both")
CANARY = "CANARY-41c7"
SEARCH = {"search": {"on": ["throttle"]}}
CHARGE = {"charge": {"changes": True, "on": ["network"]}}
MODERN = "2026-07-28"


@pytest.fixture
def logs() -> Logs:
    return Logs()


def call_span(telemetry: Telemetry, tool: str) -> Any:
    (span,) = [
        s
        for s in telemetry.spans()
        if s.name == f"{t.CALL_SPAN_PREFIX} {tool}"
        and s.instrumentation_scope is not None
        and s.instrumentation_scope.name == t.INSTRUMENTATION_NAME
    ]
    return span


def span_records(span: Any) -> list[dict[str, Any]]:
    return [dict(e.attributes or {}) for e in span.events if e.name == t.RECORD_EVENT]


@pytest.mark.parametrize("place", PLACES)
async def test_each_place_files_the_one_record_where_it_says(
    server: ServerHandle, telemetry: Telemetry, logs: Logs, instrument: Any, mode: str, place: str
) -> None:
    """A throttled call repeated once: the record (two rows) is the span's event, a log record, or
    both, and says the same wherever it is."""
    instrument(servers=declared(server, SEARCH), record=place)
    server.faults.add("search", Throttle("0"))
    async with Client(server.url, mode=mode) as client:
        with anyio.fail_after(20):
            await client.call_tool("search", {"query": "q"})
    assert server.counters.executions("search") == 1
    assert server.counters.tool_posts("search") == 2
    span = call_span(telemetry, "search")
    on_span, logged = span_records(span), logs.records()
    assert len(on_span) == (0 if place == "log" else 1)
    assert len(logged) == (0 if place == "span_event" else 1)
    if place == "span_event":
        return
    (log,) = logged
    record = log.log_record
    assert attributes_of(log)[t.ATTEMPTS_STATUS] == (429, 200)
    assert attributes_of(log)[t.ATTEMPTS_PERMISSION] == ("first", "app")
    assert (attributes_of(log)[t.SENT], attributes_of(log)[t.VERDICT]) == (2, "completed")
    assert set(attributes_of(log)) == set(t.RECORD_KEYS)
    if place == "both":
        assert on_span == [attributes_of(log)]
    # The call span's trace and span ids, the plugin's scope and version, INFO, no body.
    assert (record.trace_id, record.span_id) == (span.context.trace_id, span.context.span_id)
    assert record.event_name == t.RECORD_EVENT
    assert (record.severity_number, record.severity_text) == (SeverityNumber.INFO, "INFO")
    assert record.body is None
    scope = log.instrumentation_scope
    assert scope is not None and (scope.name, scope.version) == (t.INSTRUMENTATION_NAME, __version__)


async def test_a_call_that_may_have_run_is_logged_at_warn(
    server: ServerHandle, telemetry: Telemetry, logs: Logs, instrument: Any, mode: str
) -> None:
    """Cut mid-answer without its key: not repeated, UnknownEffectError; its log record is WARN."""
    instrument(servers=declared(server, CHARGE, deduplicates={"argument": "idempotency_key"}), record="log")
    server.faults.add("charge", DropMidBody())
    async with Client(server.url, mode=mode) as client:
        with anyio.fail_after(20), pytest.raises(UnknownEffectError):
            await client.call_tool("charge", {"amount": 5})
    assert server.counters.tool_posts("charge") == 1 == server.counters.executions("charge")
    assert span_records(call_span(telemetry, "charge")) == []
    (log,) = logs.records()
    assert attributes_of(log)[t.MAY_HAVE_RUN] is True
    assert (attributes_of(log)[t.EFFECT], attributes_of(log)[t.VERDICT]) == ("unknown", "failed")
    assert (log.log_record.severity_number, log.log_record.severity_text) == (SeverityNumber.WARN, "WARN")


async def test_a_bad_value_is_an_error_naming_the_variable_and_the_record_stays_a_span_event(
    server: ServerHandle,
    telemetry: Telemetry,
    logs: Logs,
    instrument: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    canary = f"logs-{CANARY}"
    monkeypatch.setenv(ev.OTEL_PYTHON_MCP_REPLAY_RECORD, canary)
    with caplog.at_level(logging.ERROR, logger="otel_mcp_replay"):
        instrument(servers=declared(server, SEARCH))
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any(ev.OTEL_PYTHON_MCP_REPLAY_RECORD in message for message in errors), errors
    assert not any(canary in message for message in caplog.messages)
    server.faults.add("search", Throttle("0"))
    with anyio.fail_after(20):
        await refused_call(server.url, "search", {"query": "q"}, 429)
    # Fail-closed (nothing repeats), and the record is the span's event: no log record.
    assert server.counters.tool_posts("search") == 1
    (record,) = records(telemetry)
    assert (record[t.SENT], record[t.ATTEMPTS_STATUS]) == (1, (429,))
    assert logs.records() == []


@pytest.fixture
def round_server() -> Iterator[ServerHandle]:
    counters = Counters()
    with running_server(counters=counters, server=build_server(counters, era_tools=True)) as handle:
        yield handle


async def test_a_multi_round_call_logs_one_record_per_round_under_its_one_span(
    round_server: ServerHandle, telemetry: Telemetry, logs: Logs, instrument: Any
) -> None:
    """SEP-2322 on 2026-07-28: round 1 answers InputRequiredResult, round 2 completes; one call
    span, two log records (rounds 1 and 2), each with that span's ids."""
    from harness.client import ERAS

    if MODERN not in ERAS:
        pytest.skip("the installed mcp line has no 2026-07-28 era (no rounds of their own)")
    import mcp_types as types
    from mcp import Client as SdkClient

    async def confirm(context: Any, params: Any) -> Any:
        return types.ElicitResult(action="accept", content={"ok": True})

    instrument(record="log")
    async with SdkClient(round_server.url, mode=MODERN, elicitation_callback=confirm) as client:
        with anyio.fail_after(20):
            result = await client.call_tool("ask_then_charge", {"amount": 7})
    assert not result.is_error
    assert round_server.counters.executions("ask_then_charge") == 1
    assert round_server.counters.tool_posts("ask_then_charge") == 2
    span = call_span(telemetry, "ask_then_charge")
    assert span_records(span) == []
    logged = logs.records()
    assert [(attributes_of(log)[t.ROUND], attributes_of(log)[t.VERDICT]) for log in logged] == [
        (1, "input-required"),
        (2, "completed"),
    ]
    assert {(log.log_record.trace_id, log.log_record.span_id) for log in logged} == {
        (span.context.trace_id, span.context.span_id)
    }


async def test_a_hostile_servers_canaries_never_reach_a_log_record(
    server: ServerHandle, telemetry: Telemetry, logs: Logs, instrument: Any, mode: str
) -> None:
    """The server's own text (a JSON-RPC error's message and data, a Retry-After it made up, its
    headers) and the app's arguments never reach a log record: the record holds its allow-list only."""
    instrument(servers=declared(server, SEARCH), record="both")
    server.faults.add("search", Throttle(f"soon {CANARY}"))
    server.faults.add("send_email", JsonRpcError(message=f"failed: token={CANARY}", data={"secret": CANARY}))
    async with Client(server.url, mode=mode) as client:
        with anyio.fail_after(20):
            await client.call_tool("search", {"query": CANARY})
            with pytest.raises(McpError):
                await client.call_tool("send_email", {"to": CANARY, "body": CANARY})
    assert server.counters.tool_posts("search") == 2 and server.counters.executions("search") == 1
    assert server.counters.executions("send_email") == 0
    logged = logs.emitted()
    assert [attributes_of(log)[t.GEN_AI_TOOL_NAME] for log in logs.records()] == ["search", "send_email"]
    for log in logged:
        assert CANARY not in repr(attributes_of(log)) and CANARY not in repr(log.log_record.body)
    assert [(r[t.GEN_AI_TOOL_NAME], r[t.VERDICT]) for r in records(telemetry)] == [
        ("search", "completed"),
        ("send_email", "failed"),
    ]


NO_PROVIDER_APP = textwrap.dedent(
    """
    import asyncio
    import json
    import logging
    import sys

    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from harness.client import Client
    from otel_mcp_replay import McpReplayInstrumentor
    from otel_mcp_replay import telemetry as t

    said = []


    class Kept(logging.Handler):
        def emit(self, record):
            said.append((record.levelname, record.getMessage()))


    logging.getLogger("otel_mcp_replay.filing").addHandler(Kept())
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    McpReplayInstrumentor().instrument(record=sys.argv[2])


    async def main():
        async with Client(sys.argv[1]) as client:
            for _ in range(3):
                await client.call_tool("search", {"query": "q"})


    asyncio.run(main())
    spans = exporter.get_finished_spans()
    events = sum(1 for span in spans for event in span.events if event.name == t.RECORD_EVENT)
    print(json.dumps({"events": events, "said": said}))
    """
)


@pytest.mark.parametrize("place", ["log", "both"])
def test_without_an_sdk_logger_provider_the_record_stays_a_span_event_said_once(
    tmp_path: Path, place: str
) -> None:
    """A process that set no LoggerProvider (the API's proxy): each of three calls keeps its record as
    its span's event, and one WARNING, not three, says why."""
    script = tmp_path / "app.py"
    script.write_text(NO_PROVIDER_APP)
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    env["PYTHONPATH"] = os.pathsep.join((str(SOURCE.parent), str(SOURCE)))
    with running_server() as plain:
        done = subprocess.run(
            [sys.executable, str(script), plain.url, place],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert plain.counters.executions("search") == 3
    told = json.loads(done.stdout.strip().splitlines()[-1])
    assert told["events"] == 3
    assert [level for level, _ in told["said"]] == ["WARNING"]
    assert "no SDK LoggerProvider" in told["said"][0][1]
