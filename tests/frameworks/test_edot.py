"""Beside Elastic's distribution, EDOT Python (`elastic-opentelemetry` 1.18.0): one MCP client span
per call, redaction on, and what its default sampler does to every span.

EDOT names its distro `distro` and its configurator `configurator`, as opentelemetry-distro does (a
user has one of the two installed). Its configurator builds the providers from the environment with
OTLP exporters; unless `OTEL_TRACES_SAMPLER` names one, its sampler is its own `DefaultSampler`, the
SDK's experimental composite sampler (parent threshold over a trace-id ratio, so that Elastic's
central configuration can change the ratio). That sampler hands the SDK back no attributes of the
span it samples, and the SDK makes the sampler's attributes the span's: every span, whoever starts
it, loses the attributes given at its start (the plugin's `mcp.method.name` and `gen_ai.tool.name`
on the call span, `url.full` and `mcp.replay.attempt` on an attempt, the mcp SDK's own on its spans);
what is set later stays. The distro sets that default for whichever configurator runs, the plugin's
too. Naming a sampler (`OTEL_TRACES_SAMPLER=parentbased_traceidratio`, the ratio in
`OTEL_TRACES_SAMPLER_ARG`) keeps them: the set-ups checked whole here name one. The law holds in
every set-up: the server counts.

EDOT pins OpenTelemetry 1.45.1: it runs in an environment of its own (.venv-fw-edot, mcp 2.3,
scripts/test-beside); elsewhere this file is skipped.
"""

from __future__ import annotations

import pytest

pytest.importorskip("elasticotel.distro", reason="EDOT runs in .venv-fw-edot")

from tests.support.distros import checked_run, run_app

from harness.receiver import OtlpReceiver, SpanDict
from harness.sdk import LINE
from otel_mcp_replay import telemetry as t

DISTRO = {"OTEL_PYTHON_DISTRO": "distro"}
CONFIGURATORS = {
    "EDOT's configurator": {**DISTRO, "OTEL_PYTHON_CONFIGURATOR": "configurator"},
    "mcp_replay": {**DISTRO, "OTEL_PYTHON_CONFIGURATOR": "mcp_replay"},
}
# A sampler named: the start attributes kept.
SAMPLER = {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "1.0"}


@pytest.mark.parametrize("set_up", CONFIGURATORS)
def test_one_call_span_per_call_and_nothing_raw(set_up: str) -> None:
    spans, _ = checked_run(server_spans=LINE == 2, **CONFIGURATORS[set_up], **SAMPLER)
    assert any("mcp.session.id" in s["attributes"] for s in spans)  # the raw check is not vacuous


@pytest.mark.parametrize("set_up", CONFIGURATORS)
def test_its_default_sampler_drops_every_start_attribute(set_up: str) -> None:
    # What docs/frameworks.md tells EDOT's users, measured: the law still holds and the record is
    # filed, but no span keeps what it was started with, under either configurator (the distro sets
    # the sampler's default for both).
    with OtlpReceiver() as receiver:
        run = run_app(receiver, **CONFIGURATORS[set_up])
        # Found by name and scope: no call span has the attributes `exported` looks for.
        receiver.wait_for(lambda spans: len(_call_spans(spans)) == 2, timeout=20)
        spans = receiver.spans()
    assert run.executions == {"search": 1, "charge": 1}, run
    assert run.outcomes == {"search": "completed", "charge": "UnknownEffectError"}, run
    (call,) = [s for s in _call_spans(spans) if s["name"] == "tools/call search"]
    assert t.MCP_METHOD_NAME not in call["attributes"] and t.GEN_AI_TOOL_NAME not in call["attributes"]
    assert call["attributes"][t.VERDICT] == "completed"  # set at its end: kept
    assert [e["name"] for e in call["events"]] == ["mcp.tool.request_attempts"]
    attempts = [s for s in spans if s["parent_span_id"] == call["span_id"] and s["name"] == "POST"]
    assert len(attempts) == 2 and not any(t.ATTEMPT in s["attributes"] for s in attempts)
    sdk_own = [s for s in spans if s["scope"] != t.INSTRUMENTATION_NAME and s["name"].startswith("MCP send")]
    assert sdk_own and not any(t.MCP_METHOD_NAME in s["attributes"] for s in sdk_own)


def _call_spans(spans: list[SpanDict]) -> list[SpanDict]:
    return [s for s in spans if s["scope"] == t.INSTRUMENTATION_NAME and s["name"].startswith("tools/call ")]
