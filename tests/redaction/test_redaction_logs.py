"""Redaction of log records: RedactingLogRecordProcessor and RedactingLogRecordExporter.

In process, a real SDK LoggerProvider hands each wrapper the log records an app emits (its own
InMemoryLogExporter behind): the span rules on attributes, the text rules on the body (a structured
body's strings too, bounded), the record allow-list on `mcp.tool.request_attempts` log records
(refused whole), the task ids seen masked, the plugin's own records read back vouched for. End to
end, `opentelemetry-instrument` with the `mcp_replay` configurator and `OTEL_LOGS_EXPORTER=otlp`
exports an MCP call's record as a log record, with the call span's ids, and an app's log record
redacted, and so does opentelemetry-distro's configurator (the plugin puts its log exporter behind
redaction when instrumented); the control run, that configurator with the plugin disabled, shows the
same canaries leak without it.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from opentelemetry._logs import LogRecord, SeverityNumber
from opentelemetry.sdk._logs import LoggerProvider, ReadableLogRecord
from opentelemetry.sdk._logs.export import InMemoryLogExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.trace import TracerProvider
from tests.support.autoinstrument import app_env, under_instrument
from tests.support.records import full_record

from harness.receiver import OtlpReceiver
from harness.server import running_server
from otel_mcp_replay import RedactingLogRecordExporter, RedactingLogRecordProcessor
from otel_mcp_replay import telemetry as t
from otel_mcp_replay.filing import LogFiling
from otel_mcp_replay.record import Vouches
from otel_mcp_replay.redaction import MASK, RedactionRules
from otel_mcp_replay.redaction import logs as redaction_logs
from otel_mcp_replay.redaction import rules as redaction_rules
from otel_mcp_replay.redaction.task_ids import TaskIds

CANARY = "CANARY-9b3e"
WRAPPERS = ("processor", "exporter")


class Pipeline:
    """A real SDK LoggerProvider whose log records pass one redacting wrapper into memory."""

    def __init__(self, wrapper: str, **given: Any) -> None:
        self.exporter = InMemoryLogExporter()
        rules = given.pop("rules", RedactionRules(redact_values=[r"CUST-[0-9]+"]))
        given.setdefault("on_refused", lambda: None)
        self.wrapper: RedactingLogRecordProcessor | RedactingLogRecordExporter
        if wrapper == "processor":
            self.wrapper = RedactingLogRecordProcessor(
                SimpleLogRecordProcessor(self.exporter), rules, **given
            )
            processor: Any = self.wrapper
        else:
            self.wrapper = RedactingLogRecordExporter(self.exporter, rules, **given)
            processor = SimpleLogRecordProcessor(self.wrapper)
        self.provider = LoggerProvider()
        self.provider.add_log_record_processor(processor)
        self.logger = self.provider.get_logger("app")

    def emit(self, **fields: Any) -> ReadableLogRecord:
        self.logger.emit(LogRecord(**fields))
        (log,) = self.exporter.get_finished_logs()
        self.exporter.clear()
        return log

    @property
    def refused(self) -> int:
        return self.wrapper.refused_count


def attributes_of(log: ReadableLogRecord) -> dict[str, Any]:
    return dict(log.log_record.attributes or {})


@pytest.mark.parametrize("wrapper", WRAPPERS)
def test_attributes_get_the_span_rules(wrapper: str) -> None:
    pipeline = Pipeline(wrapper)
    log = pipeline.emit(
        attributes={
            "http.request.header.authorization": (f"Bearer {CANARY}",),
            "url.full": f"http://user:{CANARY}@127.0.0.1:9/path?token={CANARY}",
            "app.db.password": CANARY,
            "gen_ai.tool.call.arguments": json.dumps({"card": CANARY}),
            "app.note": "order for CUST-7700123",
            "app.count": 3,
        },
        body=None,
    )
    attributes = attributes_of(log)
    assert attributes["http.request.header.authorization"] == (MASK,)
    assert attributes["url.full"] == "http://REDACTED:REDACTED@127.0.0.1:9/path?token=REDACTED"
    assert attributes["app.db.password"] == MASK
    assert attributes["gen_ai.tool.call.arguments"] == MASK
    assert attributes["app.note"] == f"order for {MASK}"
    assert attributes["app.count"] == 3
    assert CANARY not in log.to_json()


@pytest.mark.parametrize("wrapper", WRAPPERS)
def test_the_body_gets_the_text_rules_a_structured_one_its_keys_too(wrapper: str) -> None:
    pipeline = Pipeline(wrapper)
    text = pipeline.emit(body=f"login as Bearer {CANARY} from http://127.0.0.1:9/?token={CANARY}")
    assert text.log_record.body == f"login as Bearer {MASK} from http://127.0.0.1:9/?token=REDACTED"
    structured = pipeline.emit(
        body={
            "password": CANARY,
            "note": [f"Bearer {CANARY}", 7, {"api_key": CANARY}],
            "request": {"url.full": f"http://127.0.0.1:9/?token={CANARY}"},
            "raw": CANARY.encode(),
            "kept": "plain words",
        }
    )
    body = structured.log_record.body
    assert body["password"] == MASK and body["raw"] == MASK
    assert (
        body["note"][0] == f"Bearer {MASK}" and body["note"][1] == 7 and body["note"][2] == {"api_key": MASK}
    )
    assert body["request"] == {"url.full": "http://127.0.0.1:9/?token=REDACTED"}
    assert body["kept"] == "plain words"
    assert CANARY not in repr(body)


def test_a_structure_past_the_bounds_is_masked_not_read() -> None:
    pipeline = Pipeline("exporter")
    deep: Any = CANARY
    for _ in range(redaction_logs.MAX_DEPTH + 2):
        deep = {"inner": deep}
    wide = [f"item {i}" for i in range(redaction_logs.MAX_VALUES + 1)]
    assert CANARY not in repr(pipeline.emit(body=deep).log_record.body)
    assert MASK in pipeline.emit(body={"wide": wide}).log_record.body["wide"]


def test_a_log_record_no_rule_changes_is_handed_on_as_it_is() -> None:
    pipeline = Pipeline("processor")
    log = pipeline.emit(body="all is well", attributes={"app.count": 1})
    assert not isinstance(log.log_record, redaction_logs.RedactedLogRecord)
    assert (log.log_record.body, attributes_of(log)) == ("all is well", {"app.count": 1})


@pytest.mark.parametrize("wrapper", WRAPPERS)
def test_a_record_outside_the_allow_list_is_refused_whole(wrapper: str) -> None:
    refusals: list[int] = []
    pipeline = Pipeline(wrapper, on_refused=lambda: refusals.append(1))
    valid = full_record(rows=2)
    passed = pipeline.emit(event_name=t.RECORD_EVENT, attributes=valid)
    assert (passed.log_record.event_name, attributes_of(passed)) == (t.RECORD_EVENT, valid)
    for bad in ({**valid, "app.extra": CANARY}, {**valid, t.GEN_AI_TOOL_NAME: f"x\n{CANARY}"}):
        refused = pipeline.emit(event_name=t.RECORD_EVENT, attributes=bad)
        assert refused.log_record.event_name == t.RECORD_REFUSED_EVENT
        assert (attributes_of(refused), refused.log_record.body) == ({}, None)
    # A record has no body: one carrying one is outside the list too.
    bodied = pipeline.emit(event_name=t.RECORD_EVENT, attributes=valid, body=CANARY)
    assert (bodied.log_record.event_name, bodied.log_record.body) == (t.RECORD_REFUSED_EVENT, None)
    assert pipeline.refused == 3 == len(refusals)


def test_a_task_id_seen_is_masked_in_attributes_and_body() -> None:
    task_ids = TaskIds()
    task_ids.saw("task-7f3a91c2d4e5b6a7")
    pipeline = Pipeline("exporter", task_ids=task_ids)
    task = "task-7f3a91c2d4e5b6a7"
    log = pipeline.emit(body=f"polling {task}", attributes={"app.task": f"the {task}"})
    assert (log.log_record.body, attributes_of(log)) == (f"polling {MASK}", {"app.task": f"the {MASK}"})


@pytest.mark.parametrize("wrapper", WRAPPERS)
def test_the_plugins_own_record_is_read_back_vouched_for(
    wrapper: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Filed as a log record (filing.LogFiling, through a real SDK LoggerProvider made the global one
    for this test): the redaction reads it back without the whole check, as it does a span event's."""
    checks: list[object] = []
    real = redaction_rules.validate_record
    monkeypatch.setattr(redaction_rules, "validate_record", lambda raw: checks.append(raw) or real(raw))
    vouches = Vouches()
    pipeline = Pipeline(wrapper, vouches=vouches)
    from otel_mcp_replay import filing

    monkeypatch.setattr(filing, "get_logger_provider", lambda: pipeline.provider)
    span = TracerProvider().get_tracer("t").start_span("tools/call search")
    built = full_record(rows=3, may_have_run=True)
    LogFiling(False, vouches).file(span, built)
    (log,) = pipeline.exporter.get_finished_logs()
    assert checks == []  # vouched for: no whole check
    assert (log.log_record.event_name, attributes_of(log)) == (t.RECORD_EVENT, built)
    assert log.log_record.severity_number == SeverityNumber.WARN
    assert log.log_record.span_id == span.get_span_context().span_id
    span.end()
    # Written to after it was filed (a processor may: the SDK's log attributes stay writable), it is
    # no longer what was vouched for, and is checked whole.
    stored = log.log_record.attributes
    assert vouches.log_record(stored) is not None
    stored["app.extra"] = CANARY  # type: ignore[index]
    assert vouches.log_record(stored) is None


# -- end to end, under opentelemetry-instrument --------------------------------------------------

SCRIPT = textwrap.dedent(
    """
    import asyncio
    import sys

    from opentelemetry._logs import get_logger

    from harness.client import Client

    url, canary = sys.argv[1], sys.argv[2]


    async def main() -> None:
        async with Client(url) as client:
            await client.call_tool("search", {"query": canary})


    asyncio.run(main())
    get_logger("canary-app").emit(
        body=f"login as Bearer {canary} from http://u:{canary}@127.0.0.1:9/?token={canary}",
        attributes={"app.db.password": canary, "app.note": {"authorization": canary}},
    )
    print("script-done")
    """
)


def run_app(tmp_path: Path, receiver: OtlpReceiver, url: str, configurator: str, **extra: str) -> None:
    script = tmp_path / "app.py"
    script.write_text(SCRIPT)
    env = app_env(
        receiver,
        "log-redaction-e2e",
        configurator,
        OTEL_LOGS_EXPORTER="otlp",
        OTEL_BLRP_SCHEDULE_DELAY="100",
        OTEL_PYTHON_MCP_REPLAY_RECORD="log",
        **extra,
    )
    done = under_instrument(tmp_path, env, script, url, CANARY)
    assert done.returncode == 0 and "script-done" in done.stdout, done.stderr[-3000:]


@pytest.mark.parametrize("configurator", ["mcp_replay", "configurator"], ids=["ours", "the distro's"])
def test_under_opentelemetry_instrument_the_record_is_a_log_record_and_every_log_leaves_redacted(
    tmp_path: Path, receiver: OtlpReceiver, configurator: str
) -> None:
    """Under our configurator, or opentelemetry-distro's, whose log exporter the plugin puts behind
    RedactingLogRecordExporter when instrumented (as aws-opentelemetry-distro's, which turns log
    export on)."""
    with running_server() as server:
        run_app(tmp_path, receiver, server.url, configurator)
        assert server.counters.executions("search") == 1
    assert receiver.wait_for_logs(lambda logs: len(logs) >= 2, timeout=20)
    assert receiver.wait_for(
        lambda spans: any(s["scope"] == t.INSTRUMENTATION_NAME for s in spans), timeout=20
    )
    assert CANARY.encode() not in receiver.raw_bytes()
    (call,) = [
        s for s in receiver.spans() if s["scope"] == t.INSTRUMENTATION_NAME and s["name"].startswith("tools/")
    ]
    assert [e for e in call["events"] if e["name"] == t.RECORD_EVENT] == []  # `log`: no span event
    (record,) = [log for log in receiver.logs() if log["event_name"] == t.RECORD_EVENT]
    assert (record["trace_id"], record["span_id"]) == (call["trace_id"], call["span_id"])
    assert (record["scope"], record["severity_text"], record["body"]) == (
        t.INSTRUMENTATION_NAME,
        "INFO",
        None,
    )
    assert set(record["attributes"]) == set(t.RECORD_KEYS)
    assert (record["attributes"][t.VERDICT], record["attributes"][t.SENT]) == ("completed", 1)
    (app,) = [log for log in receiver.logs() if log["scope"] == "canary-app"]
    assert app["body"].startswith(f"login as Bearer {MASK} from http://REDACTED:REDACTED@127.0.0.1:9/")
    assert app["attributes"]["app.db.password"] == MASK
    assert app["attributes"]["app.note"] == {"authorization": MASK}


def test_control_without_our_configurator_the_log_canaries_do_leak(
    tmp_path: Path, receiver: OtlpReceiver
) -> None:
    with running_server() as server:
        # opentelemetry-distro's own configurator, and the plugin not instrumented: nothing redacts.
        run_app(
            tmp_path, receiver, server.url, "configurator", OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="mcp_replay"
        )
    assert receiver.wait_for_logs(lambda logs: any(log["scope"] == "canary-app" for log in logs), timeout=20)
    assert CANARY.encode() in b"".join(r.body for r in receiver.raw_requests() if r.path == "/v1/logs")
