"""End to end: under `opentelemetry-instrument`, set up by environment variables only or by a
configuration file (OTEL_CONFIG_FILE), no planted secret crosses the wire to the OTLP receiver, and
the spans still arrive.

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
    needs_config_file,
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


def _config_file(tmp_path: Path, receiver: OtlpReceiver, exporter: str, *, enabled: bool = True) -> Path:
    """An OTEL_CONFIG_FILE exporting to `receiver` through `exporter` (`otlp_http`, or the plugin's
    `mcp_replay_redacting` around it), with the file's own redact option (and `enabled: false`)."""
    inner = f"otlp_http: {{endpoint: {receiver.traces_endpoint}}}"
    if exporter == "mcp_replay_redacting":
        inner = f"mcp_replay_redacting: {{{inner}}}"
    path = tmp_path / "otel.yaml"
    path.write_text(
        textwrap.dedent(
            f"""\
            file_format: "1.0"
            tracer_provider:
              processors:
                - simple:
                    exporter: {{{inner}}}
            instrumentation/development:
              python:
                mcp_replay:
                  redact_values: ["CUST-[0-9]+"]
            """
        )
        + ("" if enabled else "      enabled: false\n")
    )
    return path


# Under a file the SDK builds the file's exporters whichever configurator runs (the distro's is
# `configurator`): the plugin's exporter around the file's redacts every span, with the file's
# redact options, and the plugin's variables (set by run_instrumented) are ignored, said once.
@needs_config_file
@needs_httpx2_spans
@pytest.mark.parametrize("configurator", ["mcp_replay", "configurator"])
def test_under_a_config_file_the_plugins_exporter_redacts_every_span(
    tmp_path: Path, target: Target, receiver: OtlpReceiver, configurator: str
) -> None:
    config = _config_file(tmp_path, receiver, "mcp_replay_redacting")
    stderr = run_instrumented(tmp_path, target, receiver, configurator, OTEL_CONFIG_FILE=str(config))
    assert receiver.wait_for(lambda spans: len(http_client_spans(spans)) >= 2, timeout=20)
    assert leaked(receiver.raw_bytes()) == []
    (app,) = [span for span in receiver.spans() if span["name"] == "app-work"]
    assert app["attributes"]["app.db.password"] == MASK
    assert app["attributes"]["app.note"] == f"order for {MASK}"  # the file's redact_values
    # Hashed with this process's own key: the session-key variable is ignored under a file.
    assert app["attributes"][t.MCP_SESSION_ID] not in (CANARIES["SESSION"], session_hash(CANARIES["SESSION"]))
    for span in http_client_spans(receiver.spans()):
        assert span["attributes"]["http.request.header.authorization"] == [MASK]
    ignored = [line for line in stderr.splitlines() if "are ignored: the file's mcp_replay section" in line]
    assert len(ignored) == 1 and ENV_REDACT_VALUES in ignored[0] and CANARIES["CUSTOMER"] not in stderr
    assert "Attempting to instrument while already instrumented" not in stderr
    assert "without redaction" not in stderr  # no export-path warning: every exporter is behind it


# A file whose exporter is plain: its telemetry flows (the plugin never refuses a file), and the
# export-path WARNING names the fix in the file's own terms.
@needs_config_file
@needs_httpx2_spans
def test_a_config_file_without_the_plugins_exporter_is_redacted_all_the_same(
    tmp_path: Path, target: Target, receiver: OtlpReceiver
) -> None:
    # The file names a plain exporter: the SDK builds it, and instrument() (under
    # opentelemetry-instrument, whichever configurator ran) puts it behind redaction, so nothing is
    # left to warn of. The WARNING naming mcp_replay_redacting is for an exporter out of its reach
    # (test_redaction_export_path.py).
    # The control: the plugin's section `enabled: false`, the same pipeline exports the canaries as
    # they are.
    control = _config_file(tmp_path, receiver, "otlp_http", enabled=False)
    run_instrumented(tmp_path, target, receiver, "mcp_replay", OTEL_CONFIG_FILE=str(control))
    assert receiver.wait_for(lambda spans: len(http_client_spans(spans)) >= 2, timeout=20)
    assert {"SESSION", "PASSWORD"} <= set(leaked(receiver.raw_bytes()))
    receiver.clear()
    target.seen.clear()
    config = _config_file(tmp_path, receiver, "otlp_http")
    stderr = run_instrumented(tmp_path, target, receiver, "mcp_replay", OTEL_CONFIG_FILE=str(config))
    assert receiver.wait_for(lambda spans: len(http_client_spans(spans)) >= 2, timeout=20)
    assert leaked(receiver.raw_bytes()) == []
    assert "without redaction" not in stderr


# An SDK that cannot read the file (opentelemetry-configuration missing: here a package of that name
# that fails to import, first on the path): one ERROR naming the extra, nothing exported, the app runs.
def test_without_the_configuration_package_one_error_names_the_extra(
    tmp_path: Path, target: Target, receiver: OtlpReceiver
) -> None:
    missing = tmp_path / "missing" / "opentelemetry" / "configuration"
    missing.mkdir(parents=True)
    (missing / "__init__.py").write_text("raise ImportError('not installed')\n")
    config = _config_file(tmp_path, receiver, "mcp_replay_redacting")
    stderr = run_instrumented(
        tmp_path, target, receiver, "mcp_replay", path=[tmp_path / "missing"], OTEL_CONFIG_FILE=str(config)
    )
    named = [line for line in stderr.splitlines() if "pip install 'otel-mcp-replay[config-file]'" in line]
    # The configurator's ERROR (nothing configured), then the plugin's fail-closed (a WARNING).
    assert len(named) == 2 and all("OTEL_CONFIG_FILE" in line for line in named)
    assert "no telemetry SDK configured" in named[0] and "fail-closed" in named[1]
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
