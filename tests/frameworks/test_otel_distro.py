"""Beside opentelemetry-distro: one MCP client span per call, redaction on, under either configurator.

opentelemetry-distro's `configurator` builds the SDK's providers from the environment with bare
exporters; the plugin's `mcp_replay` builds the same with each exporter behind redaction. The app
runs under `opentelemetry-instrument` with each (`OTEL_PYTHON_DISTRO=distro`): each call is the
plugin's ONE call span with its POSTs under it, on mcp 2.x the server's span (the SDK's own, from
`_meta`) its child; every exported span passes redaction (under the distro's configurator its
exporters are put behind it when the plugin is instrumented): no canary of the arguments, no raw
session id. The law holds: the server counts. On mcp 1.x nothing instruments the server here, so
no server span is drawn.

It runs on each mcp line installed: the main environment (mcp 2.x) and .venv-fw-otel-distro
(mcp 1.30, scripts/test-lines).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.support.distros import check_calls, exported, leaked, raw_session_ids, run_app

from harness.receiver import OtlpReceiver
from harness.sdk import LINE

pytest.importorskip("opentelemetry.distro", reason="opentelemetry-distro is not installed here")

SET_UPS = {
    "distro's configurator": {"OTEL_PYTHON_DISTRO": "distro", "OTEL_PYTHON_CONFIGURATOR": "configurator"},
    "mcp_replay": {"OTEL_PYTHON_DISTRO": "distro", "OTEL_PYTHON_CONFIGURATOR": "mcp_replay"},
}


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as started:
        yield started


@pytest.mark.parametrize("set_up", SET_UPS)
def test_one_call_span_per_call_and_nothing_raw(receiver: OtlpReceiver, set_up: str) -> None:
    run = run_app(receiver, **SET_UPS[set_up])
    spans = exported(receiver, server_spans=LINE == 2)
    check_calls(spans, run, server_spans=LINE == 2)
    assert leaked(receiver, run) == [] and raw_session_ids(spans) == []
    assert "without redaction" not in run.stderr  # nothing left for the export-path WARNING to name
