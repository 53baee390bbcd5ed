"""Beside Splunk's distribution (`splunk-opentelemetry` 2.13.2): one MCP client span per call,
redaction on, and configuration by file through Splunk's own configurator.

Splunk names its distro `splunk_distro` and its configurator `configurator`, as opentelemetry-distro
does (a user has one of the two installed). With `OTEL_CONFIG_FILE` set, its configurator builds the
providers from the file itself (opentelemetry-configuration's `configure_tracer_provider`, the
file's `mcp_replay_redacting` exporter among them) and adds its own resource attributes; without,
from the environment, as the SDK's configurator does. Here the app of tests/support/distro_app.py runs
under each configurator (Splunk's, the plugin's), and the demo's agent under the example file
(tests/end_to_end/test_config_file.py runs whole in this environment too, its `configurator` being
Splunk's here). The law holds: the servers count.

Splunk pins OpenTelemetry 1.45.1 and opentelemetry-configuration 0.66b1: it runs in an environment of
its own (.venv-fw-splunk, mcp 2.3, scripts/test-beside); elsewhere this file is skipped.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("splunk_otel", reason="Splunk's distribution runs in .venv-fw-splunk")

from tests.support.config_files import run_with_file
from tests.support.distros import checked_run

from harness.sdk import LINE
from otel_mcp_replay import telemetry as t

DISTRO = {"OTEL_PYTHON_DISTRO": "splunk_distro"}
SET_UPS = {
    "Splunk's configurator": {**DISTRO, "OTEL_PYTHON_CONFIGURATOR": "configurator"},
    "mcp_replay": {**DISTRO, "OTEL_PYTHON_CONFIGURATOR": "mcp_replay"},
}
# What the demo's agent sends that must never be exported: the charge's key, the e-mail's address.
SECRETS = (b"order-7f3a9c", b"ada@example.com")


@pytest.mark.parametrize("set_up", SET_UPS)
def test_one_call_span_per_call_and_nothing_raw(set_up: str) -> None:
    spans, _ = checked_run(server_spans=LINE == 2, **SET_UPS[set_up])
    assert any("mcp.session.id" in s["attributes"] for s in spans)  # the raw check is not vacuous


@pytest.mark.timeout(300)
def test_the_file_through_splunks_configurator(tmp_path: Path) -> None:
    run = run_with_file(tmp_path, "configurator", OTEL_PYTHON_DISTRO="splunk_distro")
    # Splunk's configurator built the providers: its resource attributes are on every span.
    assert {s["resource"].get("telemetry.distro.name") for s in run.spans} == {"splunk-opentelemetry"}
    # The file's declaration obeyed (the servers' counts), its exporter redacting.
    assert run.posts[("billing", "search")] == 2 and run.posts[("billing", "send_email")] == 1
    assert run.runs[("billing", "charge")] == 1 and run.runs[("billing", "send_email")] == 1
    assert sum(1 for s in run.spans if s["name"].startswith(f"{t.CALL_SPAN_PREFIX} ")) == 4
    assert not [secret for secret in SECRETS if secret in run.raw]
