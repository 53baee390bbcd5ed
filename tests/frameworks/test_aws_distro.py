"""Beside aws-opentelemetry-distro 0.22.0 (mcp 1.x): one MCP client span per call, redaction on.

The distro's `aws_mcp` instrumentation wraps `BaseSession.send_request` and opens a CLIENT span
`mcp tools/call <tool>` for each request, injecting its context into `_meta`; it records the tool's
arguments and result (`gen_ai.tool.call.arguments`, `.result`) and the raw `mcp.session.id`, and adds
an INTERNAL `mcp.session` span. Here the app runs under the distro's documented set-up
(`OTEL_PYTHON_DISTRO=aws_distro`, `OTEL_PYTHON_CONFIGURATOR=aws_configurator`), under the plugin's
configurator, with the distro's HTTP spans shown (`AWS_INSTRUMENTATION_MCP_SUPPRESS_HTTP_INSTRUMENTATION
=false`), and in AgentCore mode (`AGENT_OBSERVABILITY_ENABLED=true`, where the distro loads
`aws_mcp` beside the plugin: it steps aside only for an instrumentor named `mcp`). Each call is the
plugin's ONE call span (the distro's steps aside: patches/aws_distro.py) with its POSTs under it and
the server's span (the distro's server instrumentation, reading `_meta`) its child; every exported
span passes redaction (the distro's configurator's exporters are put behind it when the plugin is
instrumented): no canary of the arguments, no raw session id. The law holds: the server counts.

The distro pins OpenTelemetry 1.45.1 (0.21.0: 1.44) and mcp < 2: it runs in an environment of its own
(.venv-fw-aws, scripts/test-beside); elsewhere this file is skipped.
"""

from __future__ import annotations

import inspect

import pytest

pytest.importorskip("amazon.opentelemetry.distro", reason="aws-opentelemetry-distro runs in .venv-fw-aws")

from opentelemetry.sdk.trace import TracerProvider
from tests.support.distros import checked_run

from otel_mcp_replay.patches import aws_distro

DISTRO = {"OTEL_PYTHON_DISTRO": "aws_distro"}
SET_UPS = {
    # The distro's documented set-up.
    "aws_configurator": {**DISTRO, "OTEL_PYTHON_CONFIGURATOR": "aws_configurator"},
    # The plugin's configurator under the distro.
    "mcp_replay": {**DISTRO, "OTEL_PYTHON_CONFIGURATOR": "mcp_replay"},
    # Its HTTP spans shown: its own client span made per send, but for a call's request.
    "http spans shown": {
        **DISTRO,
        "OTEL_PYTHON_CONFIGURATOR": "aws_configurator",
        "AWS_INSTRUMENTATION_MCP_SUPPRESS_HTTP_INSTRUMENTATION": "false",
    },
    # AgentCore mode: the distro's defaults for agents (its exporters named here stay ours).
    "agentcore": {
        **DISTRO,
        "OTEL_PYTHON_CONFIGURATOR": "aws_configurator",
        "AGENT_OBSERVABILITY_ENABLED": "true",
    },
}
DISTRO_SCOPE = "amazon.opentelemetry.distro.instrumentation.mcp"


@pytest.mark.parametrize("set_up", SET_UPS)
def test_one_call_span_per_call_and_nothing_raw(set_up: str) -> None:
    spans, trees = checked_run(server_spans=True, **SET_UPS[set_up])
    # The distro still draws what it draws of the session: its server spans, its `mcp.session`.
    assert all(s["scope"] == DISTRO_SCOPE for tree in trees.values() for s in tree.servers)
    assert any(s["name"] == "mcp.session" for s in spans)
    # Its server spans record the arguments (the canaries, found nowhere): masked, not absent.
    assert any("gen_ai.tool.call.arguments" in s["attributes"] for s in spans)
    assert any("mcp.session.id" in s["attributes"] for s in spans)  # the raw check is not vacuous


def test_the_distro_keeps_what_the_plugin_steps_aside_through() -> None:
    # patches/aws_distro.py reads three private names of the distro: the tracer each ClientWrapper
    # keeps (`_tracer`, an instance attribute), the span name it opens per send (`_CLIENT_SPAN_NAME`),
    # and that its send wrapper opens that span with that tracer, reading it on each send. A release
    # that moves one fails here first, loudly.
    from amazon.opentelemetry.distro.instrumentation.mcp._wrappers import ClientWrapper

    tracer = TracerProvider().get_tracer("pin")
    assert vars(ClientWrapper(tracer=tracer))[aws_distro.TRACER] is tracer
    assert isinstance(getattr(ClientWrapper, aws_distro.SPAN_NAME), str)
    opens = "self._tracer.start_span(name=self._CLIENT_SPAN_NAME, kind=SpanKind.CLIENT)"
    assert opens in inspect.getsource(ClientWrapper.wrap_session_send)


def test_uninstrument_gives_the_distro_its_own_tracer_back() -> None:
    from amazon.opentelemetry.distro.instrumentation.mcp._wrappers import ClientWrapper

    from otel_mcp_replay import McpReplayInstrumentor

    tracer = TracerProvider().get_tracer("before")
    made_before = ClientWrapper(tracer=tracer)
    assert aws_distro.TRACER not in vars(ClientWrapper)
    instrumentor = McpReplayInstrumentor()
    instrumentor.instrument(tracer_provider=TracerProvider())
    try:
        # Read through the plugin's stepping tracer, whichever was made first.
        later = TracerProvider().get_tracer("after")
        for wrapper, own in [(made_before, tracer), (ClientWrapper(tracer=later), later)]:
            assert isinstance(wrapper._tracer, aws_distro.SteppingTracer)
            assert wrapper._tracer.__wrapped__ is own
    finally:
        instrumentor.uninstrument()
    assert aws_distro.TRACER not in vars(ClientWrapper) and made_before._tracer is tracer
