"""The rig of the end-to-end redaction runs: the app script under `opentelemetry-instrument`, the
app's peer on 127.0.0.1 (`target`), the OTLP receiver (`receiver`), and what counts as a leak."""

from __future__ import annotations

import base64
import hashlib
import hmac
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

import otel_mcp_replay
from harness.receiver import OtlpReceiver, SpanDict
from otel_mcp_replay.redaction import ENV_REDACT_VALUES, ENV_SESSION_KEY

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


# The source tree this test imports: the app under test imports the same one, first on its path.
SOURCE = Path(otel_mcp_replay.__file__).resolve().parent.parent
ROOT = Path(__file__).resolve().parents[2]  # the repository: the harness the apps import


def app_env(
    receiver: OtlpReceiver, service: str, configurator: str | None, *, path: Sequence[Path] = (), **extra: str
) -> dict[str, str]:
    """An app's environment: this process's without its OTEL_ settings, `path`, the plugin's source
    and the repository (the harness) on its path, `configurator` (None: none named), its spans to
    `receiver` over OTLP/HTTP (batched every 100 ms), no metrics or logs exported, and `extra`."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    env["PYTHONPATH"] = os.pathsep.join(str(entry) for entry in (*path, SOURCE, ROOT))
    if configurator is not None:
        env["OTEL_PYTHON_CONFIGURATOR"] = configurator
    env.update(
        {
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_LOGS_EXPORTER": "none",
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_SERVICE_NAME": service,
            "OTEL_BSP_SCHEDULE_DELAY": "100",
            **extra,
        }
    )
    return env


def under_instrument(
    cwd: Path, env: dict[str, str], script: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    """`opentelemetry-instrument python script args...` in `cwd` with `env`, its output captured
    (a 90 s timeout guards a hang)."""
    command = [str(BIN / "opentelemetry-instrument"), str(BIN / "python"), str(script), *args]
    return subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=90, check=False)


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
    env = app_env(
        receiver,
        "redaction-e2e",
        configurator,
        path=path,
        # Ask the httpx2 instrumentor to record the very headers that carry secrets.
        OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_CLIENT_REQUEST="authorization,mcp-session-id",
        OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_CLIENT_RESPONSE="set-cookie,mcp-session-id",
        # Old and new HTTP conventions both: http.url and url.full.
        OTEL_SEMCONV_STABILITY_OPT_IN="http/dup",
        **{ENV_SESSION_KEY: SESSION_KEY, ENV_REDACT_VALUES: r"CUST-[0-9]+", **extra_env},  # extra_env wins
    )
    done = under_instrument(tmp_path, env, script, json.dumps(CANARIES), str(target.server_address[1]))
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


# Configuration by file needs opentelemetry-configuration (the extra `[config-file]`), which the
# main environment has and the per-line and per-release environments do not.
needs_config_file = pytest.mark.skipif(
    importlib.util.find_spec("opentelemetry.configuration") is None,
    reason="configuration by file needs opentelemetry-configuration (the [config-file] extra)",
)


def http_client_spans(spans: list[SpanDict]) -> list[SpanDict]:
    return [span for span in spans if "httpx" in span["scope"] and span["kind"] == "CLIENT"]


def session_hash(session_id: str) -> str:
    return "h:" + hmac.new(SESSION_KEY.encode(), session_id.encode(), hashlib.sha256).hexdigest()[:16]


def leaked(raw: bytes) -> list[str]:
    """The canaries (and the Basic form of the userinfo) found in what crossed the wire."""
    basic = base64.b64encode(f"{CANARIES['USER']}:{CANARIES['PASS']}".encode()).decode()
    return [name for name, value in [*CANARIES.items(), ("BASIC", basic)] if value.encode() in raw]
