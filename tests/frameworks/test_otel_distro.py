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
(mcp 1.30, scripts/test-beside).
"""

from __future__ import annotations

import pytest

pytest.importorskip("opentelemetry.distro", reason="opentelemetry-distro is not installed here")

from tests.support import distros
from tests.support.distros import checked_run

from harness.ports import held_port, taken_first
from harness.sdk import LINE

SET_UPS = {
    "distro's configurator": {"OTEL_PYTHON_DISTRO": "distro", "OTEL_PYTHON_CONFIGURATOR": "configurator"},
    "mcp_replay": {"OTEL_PYTHON_DISTRO": "distro", "OTEL_PYTHON_CONFIGURATOR": "mcp_replay"},
}


@pytest.mark.parametrize("set_up", SET_UPS)
def test_one_call_span_per_call_and_nothing_raw(set_up: str) -> None:
    spans, _ = checked_run(server_spans=LINE == 2, **SET_UPS[set_up])
    assert any("mcp.session.id" in s["attributes"] for s in spans)  # the raw check is not vacuous


def test_an_app_whose_server_port_was_taken_runs_again_on_a_fresh_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Another process of the run holds the port named first: the app exits at its server's bind,
    # before it calls anything, and is run again; what the backend holds is its second run's alone.
    with held_port() as taken:
        port, named = taken_first(taken)
        monkeypatch.setattr(distros, "free_port", port)
        checked_run(server_spans=LINE == 2, **SET_UPS["mcp_replay"])
    assert len(named) == 2 and named[1] != taken
