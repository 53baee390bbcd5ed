"""End to end: under `opentelemetry-instrument`, set up by environment variables only, no planted
secret crosses the wire to the OTLP receiver, and the spans still arrive.

A real subprocess runs `opentelemetry-instrument python script.py` with the httpx2 instrumentor
loaded (it captures the Authorization, Cookie and session headers we ask it to), exporting
OTLP/HTTP protobuf to a receiver on 127.0.0.1 that keeps the raw bytes. The control run, with the
distro's plain configurator, shows the same canaries do leak without ours: the check can see them.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

import otel_mcp_replay
from harness.receiver import OtlpReceiver, SpanDict
from otel_mcp_replay import telemetry as t
from otel_mcp_replay.redaction import ENV_REDACT_VALUES, ENV_SESSION_KEY, MASK

BIN = Path(sys.executable).parent
SESSION_KEY = "end-to-end-session-key-0123456789"

CANARIES = {
    "USER": "usr-Canary71",
    "PASS": "pwd-Canary72",
    "TOKEN": "tok-Canary73",
    "BEARER": "brr-Canary74",
    "SESSION": "ses-Canary75",
    "PASSWORD": "dbp-Canary76",
    "COOKIE": "ck-Canary77",
    "CUSTOMER": "CUST-7700123",
}

SCRIPT = textwrap.dedent(
    """
    import asyncio
    import json
    import sys

    import httpx2
    from opentelemetry import trace

    c = json.loads(sys.argv[1])
    port = int(sys.argv[2])
    base = f"http://127.0.0.1:{port}"
    tracer = trace.get_tracer("canary-app")

    with tracer.start_as_current_span("app-work") as span:
        span.set_attribute("mcp.session.id", c["SESSION"])
        span.set_attribute("app.db.password", c["PASSWORD"])
        span.set_attribute("app.note", "order for " + c["CUSTOMER"])
        with httpx2.Client() as client:
            url = f"http://{c['USER']}:{c['PASS']}@127.0.0.1:{port}/tools/list?a=1&token={c['TOKEN']}"
            answer = client.get(url, headers={"Authorization": "Bearer " + c["BEARER"]})
            assert answer.status_code == 200, answer.status_code

        async def post() -> None:
            async with httpx2.AsyncClient() as client:
                answer = await client.post(
                    f"{base}/mcp?token={c['TOKEN']}",
                    headers={"authorization": "Bearer " + c["BEARER"], "mcp-session-id": c["SESSION"]},
                    content=b"{}",
                )
                assert answer.status_code == 200, answer.status_code

        asyncio.run(post())
    print("script-done")
    """
)


class Target(ThreadingHTTPServer):
    """The app's HTTP peer on 127.0.0.1: answers 200, hands back a cookie and the session header."""

    daemon_threads = True

    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, str]]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                self.rfile.read(length)
                server.seen.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
                self.send_response(200)
                self.send_header("set-cookie", f"sid={CANARIES['COOKIE']}; HttpOnly")
                self.send_header("mcp-session-id", CANARIES["SESSION"])
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            do_GET = do_POST = _answer

            def log_message(self, format: str, *args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)


@pytest.fixture
def target() -> Iterator[Target]:
    server = Target()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as started:
        yield started


# The source tree this test imports: the app under test imports the same one, first on its path.
SOURCE = Path(otel_mcp_replay.__file__).resolve().parent.parent


def run_instrumented(
    tmp_path: Path,
    target: Target,
    receiver: OtlpReceiver,
    configurator: str | None,
    *,
    path: Sequence[Path] = (),
    **extra_env: str,
) -> str:
    """Run the app under opentelemetry-instrument (with OTEL_PYTHON_CONFIGURATOR set unless
    `configurator` is None, and `path` first on PYTHONPATH); its stderr."""
    script = tmp_path / "app.py"
    script.write_text(SCRIPT)
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    env["PYTHONPATH"] = os.pathsep.join(str(entry) for entry in [*path, SOURCE])
    if configurator is not None:
        env["OTEL_PYTHON_CONFIGURATOR"] = configurator
    env.update(
        {
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_LOGS_EXPORTER": "none",
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_SERVICE_NAME": "redaction-e2e",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
            # Ask the httpx2 instrumentor to record the very headers that carry secrets.
            "OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_CLIENT_REQUEST": "authorization,mcp-session-id",
            "OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_CLIENT_RESPONSE": "set-cookie,mcp-session-id",
            # Old and new HTTP conventions both: http.url and url.full.
            "OTEL_SEMCONV_STABILITY_OPT_IN": "http/dup",
            ENV_SESSION_KEY: SESSION_KEY,
            ENV_REDACT_VALUES: r"CUST-[0-9]+",
            **extra_env,
        }
    )
    done = subprocess.run(
        [
            str(BIN / "opentelemetry-instrument"),
            str(BIN / "python"),
            str(script),
            json.dumps(CANARIES),
            str(target.server_address[1]),
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert done.returncode == 0 and "script-done" in done.stdout, done.stderr[-3000:]
    # Every instrumentor loaded (one raising would have stopped those after it).
    assert "Failed to auto initialize" not in done.stderr and "Instrumenting of" not in done.stderr
    # The requests really carried the canaries: the checks on the wire are not vacuous.
    assert len(target.seen) == 2
    assert all(f"token={CANARIES['TOKEN']}" in path for path, _ in target.seen)
    assert any(CANARIES["BEARER"] in headers.get("authorization", "") for _, headers in target.seen)
    return done.stderr


# The app's HTTP client spans come from the httpx2 instrumentor, which opentelemetry-instrumentation-
# httpx ships from 0.65b0 on (it needs API 1.44): the oldest-OpenTelemetry environment has no such
# spans, and the tests that redact them have nothing to read there.
needs_httpx2_spans = pytest.mark.skipif(
    Version(version("opentelemetry-instrumentation-httpx")) < Version("0.65b0"),
    reason="the httpx2 instrumentor comes with opentelemetry-instrumentation-httpx 0.65b0",
)


def http_client_spans(spans: list[SpanDict]) -> list[SpanDict]:
    return [span for span in spans if "httpx" in span["scope"] and span["kind"] == "CLIENT"]


def session_hash(session_id: str) -> str:
    return "h:" + hmac.new(SESSION_KEY.encode(), session_id.encode(), hashlib.sha256).hexdigest()[:16]


def leaked(raw: bytes) -> list[str]:
    """The canaries (and the Basic form of the userinfo) found in what crossed the wire."""
    basic = base64.b64encode(f"{CANARIES['USER']}:{CANARIES['PASS']}".encode()).decode()
    return [name for name, value in [*CANARIES.items(), ("BASIC", basic)] if value.encode() in raw]


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
def test_control_without_our_configurator_the_canaries_do_leak(
    tmp_path: Path, target: Target, receiver: OtlpReceiver
) -> None:
    run_instrumented(tmp_path, target, receiver, "configurator")  # opentelemetry-distro's own
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


@pytest.mark.parametrize("configurator", ["mcp_replay", "configurator"])
def test_the_apps_own_span_leaves_redacted_through_our_configurator_on_every_sdk(
    tmp_path: Path, target: Target, receiver: OtlpReceiver, configurator: str
) -> None:
    """The app's own span, on any SDK this plugin supports (1.39 has no exporter factory: the
    configurator wraps the SDK's processor name instead), with the distro's configurator as the
    control that the same canaries do leak without ours."""
    run_instrumented(tmp_path, target, receiver, configurator)
    assert receiver.wait_for(lambda spans: any(s["name"] == "app-work" for s in spans), timeout=20)
    (app,) = [span for span in receiver.spans() if span["name"] == "app-work"]
    if configurator == "mcp_replay":
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
        # What the configurator passed: the instrumentor's vouches and its refused-records count.
        "vouches": [e._vouches is McpReplayInstrumentor().vouches for e in given],
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
        "counted by": [True],
    }
