"""End to end: under `opentelemetry-instrument`, set up by environment variables only, no planted
secret crosses the wire to the OTLP receiver, and the spans still arrive.

A real subprocess runs `opentelemetry-instrument python script.py` with the httpx2 instrumentor
loaded (it captures the Authorization, Cookie and session headers we ask it to), exporting
OTLP/HTTP protobuf to a receiver on 127.0.0.1 that keeps the raw bytes. Under the distro's plain
configurator the plugin puts its exporter behind redaction when instrumented; the control run, that
configurator with the plugin disabled, shows the same canaries do leak without it: the check can see
them.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest
from tests.support.autoinstrument import (
    BIN,
    CANARIES,
    SOURCE,
    Target,
    http_client_spans,
    leaked,
    needs_httpx2_spans,
    run_instrumented,
    session_hash,
)

from harness.receiver import OtlpReceiver
from otel_mcp_replay import telemetry as t
from otel_mcp_replay.redaction import ENV_REDACT_VALUES, MASK


@needs_httpx2_spans
def test_every_exported_span_is_redacted_under_opentelemetry_instrument(
    tmp_path: Path, target: Target, receiver: OtlpReceiver
) -> None:
    run_instrumented(tmp_path, target, receiver, "mcp_replay")
    assert receiver.wait_for(lambda spans: len(http_client_spans(spans)) >= 2, timeout=20)
    spans = receiver.spans()
    assert leaked(receiver.raw_bytes()) == []

    (app,) = [span for span in spans if span["name"] == "app-work"]
    assert app["attributes"][t.MCP_SESSION_ID] == session_hash(CANARIES["SESSION"])
    assert app["attributes"]["app.db.password"] == MASK
    assert app["attributes"]["app.note"] == f"order for {MASK}"

    clients = http_client_spans(spans)
    assert clients and all(span["trace_id"] == app["trace_id"] for span in clients)
    for span in clients:
        attributes = span["attributes"]
        # The instrumentor did record the headers; they arrive masked or hashed.
        assert attributes["http.request.header.authorization"] == [MASK]
        # (the instrumentor spells captured header names with underscores)
        assert attributes["http.response.header.set_cookie"] == [MASK]
        assert attributes["http.response.header.mcp_session_id"] == [session_hash(CANARIES["SESSION"])]
        for key in ("url.full", "http.url"):
            assert f"127.0.0.1:{target.server_address[1]}/" in attributes[key]  # host and path kept
            assert attributes[key].endswith("token=REDACTED")
    by_method = {span["attributes"]["http.request.method"]: span["attributes"] for span in clients}
    assert by_method["GET"]["url.full"].startswith("http://REDACTED:REDACTED@127.0.0.1:")
    assert by_method["POST"]["http.request.header.mcp_session_id"] == [session_hash(CANARIES["SESSION"])]


@needs_httpx2_spans
def test_control_without_the_plugin_the_canaries_do_leak(
    tmp_path: Path, target: Target, receiver: OtlpReceiver
) -> None:
    # opentelemetry-distro's own configurator, and the plugin not instrumented: nothing redacts.
    run_instrumented(
        tmp_path, target, receiver, "configurator", OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="mcp_replay"
    )
    assert receiver.wait_for(lambda spans: len(http_client_spans(spans)) >= 2, timeout=20)
    assert {"TOKEN", "BEARER", "SESSION", "PASSWORD", "COOKIE", "CUSTOMER"} <= set(
        leaked(receiver.raw_bytes())
    )


@needs_httpx2_spans
def test_a_bad_rule_in_the_environment_is_logged_and_the_built_in_rules_still_hold(
    tmp_path: Path, target: Target, receiver: OtlpReceiver
) -> None:
    stderr = run_instrumented(tmp_path, target, receiver, "mcp_replay", **{ENV_REDACT_VALUES: "(CUST-[0-9]+"})
    assert f"{ENV_REDACT_VALUES}: entry 1 is not a valid regular expression" in stderr
    assert "CUST-[0-9]" not in stderr  # the pattern is never echoed
    assert receiver.wait_for(lambda spans: len(http_client_spans(spans)) >= 2, timeout=20)
    # Only the user's value rule is lost; everything built in still holds.
    assert set(leaked(receiver.raw_bytes())) == {"CUSTOMER"}


@pytest.mark.parametrize(
    ("configurator", "disabled"),
    [("mcp_replay", ""), ("configurator", ""), ("configurator", "mcp_replay")],
    ids=["ours", "the distro's", "the distro's, the plugin disabled"],
)
def test_the_apps_own_span_leaves_redacted_through_our_configurator_on_every_sdk(
    tmp_path: Path, target: Target, receiver: OtlpReceiver, configurator: str, disabled: str
) -> None:
    """The app's own span, on any SDK this plugin supports (1.39 has no exporter factory: the
    configurator wraps the SDK's processor name instead), and under the distro's configurator,
    whose exporter the plugin puts behind redaction when instrumented; the plugin disabled is the
    control that the same canaries do leak without it."""
    run_instrumented(tmp_path, target, receiver, configurator, OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=disabled)
    assert receiver.wait_for(lambda spans: any(s["name"] == "app-work" for s in spans), timeout=20)
    (app,) = [span for span in receiver.spans() if span["name"] == "app-work"]
    if not disabled:
        assert leaked(receiver.raw_bytes()) == []
        assert app["attributes"][t.MCP_SESSION_ID] == session_hash(CANARIES["SESSION"])
        assert app["attributes"]["app.db.password"] == MASK
        assert app["attributes"]["app.note"] == f"order for {MASK}"
    else:
        assert {"SESSION", "PASSWORD", "CUSTOMER"} <= set(leaked(receiver.raw_bytes()))


def test_with_a_declarative_config_file_nothing_is_exported_rather_than_unredacted(
    tmp_path: Path, target: Target, receiver: OtlpReceiver
) -> None:
    # The SDK ignores the exporter factory when OTEL_CONFIG_FILE is set: ours then configures nothing.
    stderr = run_instrumented(
        tmp_path, target, receiver, "mcp_replay", OTEL_CONFIG_FILE=str(tmp_path / "x.yaml")
    )
    assert (
        "OTEL_PYTHON_CONFIGURATOR=mcp_replay cannot redact exporters declared by OTEL_CONFIG_FILE" in stderr
    )
    assert receiver.raw_requests() == []  # the app has exited: whatever it would export was sent by now


COMPOSE = textwrap.dedent(
    """
    import json
    from opentelemetry import trace
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from otel_mcp_replay.configurator import McpReplayConfigurator
    from otel_mcp_replay.instrumentor import McpReplayInstrumentor
    from otel_mcp_replay.redaction import RedactingSpanExporter

    given = []

    def factory(exporter, *args, **kwargs):
        given.append(exporter)
        return SimpleSpanProcessor(exporter)

    McpReplayConfigurator().configure(export_span_processor=factory)
    with trace.get_tracer("x").start_as_current_span("call") as span:
        span.add_event("mcp.tool.request_attempts", {"not": "a record"})
    print(json.dumps({
        "wrapped": [type(e).__name__ for e in given],
        "inner": [type(e.inner).__name__ for e in given if isinstance(e, RedactingSpanExporter)],
        "refused": sum(e.refused_count for e in given if isinstance(e, RedactingSpanExporter)),
        # What the configurator passed: the instrumentor's vouches, its task ids and its
        # refused-records count.
        "vouches": [e._vouches is McpReplayInstrumentor().vouches for e in given],
        "task ids": [e._task_ids is McpReplayInstrumentor().task_ids for e in given],
        "counted by": [e._on_refused == McpReplayInstrumentor().count_refused for e in given],
    }))
    """
)


def test_the_configurator_wraps_every_exporter_and_keeps_a_given_processor_factory(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    env["PYTHONPATH"] = str(SOURCE)
    env.update(
        {
            "OTEL_TRACES_EXPORTER": "console",
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_LOGS_EXPORTER": "none",
        }
    )
    done = subprocess.run(
        [str(BIN / "python"), "-c", COMPOSE], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {
        "wrapped": ["RedactingSpanExporter"],
        "inner": ["ConsoleSpanExporter"],
        "refused": 1,
        "vouches": [True],
        "task ids": [True],
        "counted by": [True],
    }
