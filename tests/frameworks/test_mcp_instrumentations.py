"""Beside the other MCP instrumentations users install: one MCP client span per call, their content
masked, the law held.

Each loads under `opentelemetry-instrument` by its own entry point (both are named `mcp`), beside
the plugin's `mcp_replay`:
- OpenLLMetry's `opentelemetry-instrumentation-mcp` 0.62.4 (mcp 1.x) wraps `BaseSession.send_request`
  with an INTERNAL span per request (`search.tool`, `tools/list.mcp`), and the transports' write
  streams with a `ResponseStreamWriter` span per answer. Unless `TRACELOOP_TRACE_CONTENT=false`, it
  records a call's name and arguments in `traceloop.entity.input`, its result in
  `traceloop.entity.output`, and each answer in `mcp.response.value`: the tool arguments (an
  idempotency key among them) and results this plugin never exports. With redaction on (the
  default) they are masked (`redact_content`, keys.CONTENT_KEYS); with `redact_content` false they
  are exported, as the user asked.
- OpenInference's `openinference-instrumentation-mcp` 2.0.13 draws no span: it carries the trace
  context in `_meta` through the transports' streams, on both mcp lines.
The app of tests/support/distro_app.py runs under opentelemetry-distro with each configurator (the
distro's, the plugin's): each call is still the plugin's ONE MCP client span, OpenLLMetry's tool span
under it, the server counts one execution of each tool, and no canary crosses the wire.

It runs where one of them is installed: .venv-fw-mcp-instrumentations (mcp 1.30, both) and
.venv-fw-openinference (mcp 2.3; OpenLLMetry's instrumentor does not load on mcp 2.x: it wraps
`mcp.shared.session`, which 2.x does not have), built by scripts/test-beside.
"""

from __future__ import annotations

from importlib.util import find_spec

import pytest
from tests.support.distros import CANARIES, TOOLS, call_tree, checked_run, exported, run_app

from harness.receiver import OtlpReceiver
from harness.sdk import LINE
from otel_mcp_replay import telemetry as t
from otel_mcp_replay.redaction import MASK


def installed(module: str) -> bool:
    try:
        return find_spec(module) is not None
    except ModuleNotFoundError:  # its parent package is not installed
        return False


OPENLLMETRY = installed("opentelemetry.instrumentation.mcp")
OPENINFERENCE = installed("openinference.instrumentation.mcp")
pytestmark = pytest.mark.skipif(
    not (OPENLLMETRY or OPENINFERENCE), reason="no other MCP instrumentation is installed here"
)
SET_UPS = {
    "distro's configurator": {"OTEL_PYTHON_DISTRO": "distro", "OTEL_PYTHON_CONFIGURATOR": "configurator"},
    "mcp_replay": {"OTEL_PYTHON_DISTRO": "distro", "OTEL_PYTHON_CONFIGURATOR": "mcp_replay"},
}
OPENLLMETRY_SCOPE = "opentelemetry.instrumentation.mcp.instrumentation"
# What OpenLLMetry records of a call's content, by default.
CONTENT = ("traceloop.entity.input", "traceloop.entity.output", "mcp.response.value")


@pytest.mark.parametrize("set_up", SET_UPS)
def test_one_call_span_per_call_and_their_content_masked(set_up: str) -> None:
    spans, trees = checked_run(server_spans=LINE == 2, **SET_UPS[set_up])
    theirs = [s for s in spans if s["scope"] == OPENLLMETRY_SCOPE]
    if not OPENLLMETRY:
        assert theirs == []
        return
    for tool in TOOLS:  # its tool span, under the plugin's call span
        (tool_span,) = [s for s in theirs if s["name"] == f"{tool}.tool"]
        assert tool_span["parent_span_id"] == trees[tool].calls[0]["span_id"]
        assert tool_span["attributes"]["traceloop.entity.input"] == MASK
    recorded = [s["attributes"][key] for s in theirs for key in CONTENT if key in s["attributes"]]
    assert len(recorded) >= 5 and set(recorded) == {MASK}  # search's three, charge's input, more


@pytest.mark.skipif(not OPENLLMETRY, reason="OpenLLMetry's MCP instrumentation is not installed here")
def test_redact_content_false_exports_what_openllmetry_records() -> None:
    with OtlpReceiver() as receiver:
        run = run_app(receiver, **SET_UPS["mcp_replay"], OTEL_PYTHON_MCP_REPLAY_REDACT_CONTENT="false")
        spans = exported(receiver, server_spans=False)
    assert run.executions == {"search": 1, "charge": 1}, run
    (search,) = [s for s in spans if s["name"] == "search.tool"]
    assert CANARIES["QUERY"] in search["attributes"]["traceloop.entity.input"]
    assert CANARIES["QUERY"] in search["attributes"]["traceloop.entity.output"]
    # The plugin's own spans and record still hold no argument.
    ours = [s for s in spans if s["scope"] == t.INSTRUMENTATION_NAME]
    assert ours and not any(CANARIES["QUERY"] in str(s) for s in ours)
    assert call_tree(spans, "search").record[t.VERDICT] == "completed"


def test_disabling_theirs_by_name_leaves_the_plugin_on() -> None:
    # Both name their entry point `mcp`: the loader matches names whole, so `mcp_replay` still loads.
    spans, _ = checked_run(
        server_spans=LINE == 2, **SET_UPS["mcp_replay"], OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="mcp"
    )
    assert not any(s["scope"] == OPENLLMETRY_SCOPE for s in spans)
