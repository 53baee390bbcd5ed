"""Beside aws-opentelemetry-distro's own MCP instrumentation (mcp 1.x): one MCP client span per call.

The rule: for the `tools/call` of a call the plugin governs, the distro's client span is not made;
the call span stands in for it, and the trace context the request carries in `_meta` is the call
span's, so the server's span is its child (as on mcp 2.x, where the SDK's own span steps aside:
session.sdk_span). Every other message keeps the distro's span, untouched.

How. The distro's wrapper of `BaseSession.send_request` (its `ClientWrapper.wrap_session_send`)
sends a message without a span of its own when `ClientWrapper._should_suppress_mcp_span(message)`
says so (its own use: `initialize`, and AgentCore's pings), a method it looks up on each send: so
the seam holds whichever of the two instrumentors is instrumented first, and whichever of them
wraps `send_request` outermost. The distro asks it only while it suppresses the HTTP spans (its
default, `AWS_INSTRUMENTATION_MCP_SUPPRESS_HTTP_INSTRUMENTATION` unset or true). The seam is a
private method of the distro: tests/frameworks/test_aws_distro.py pins it, and a release that moves
it leaves this seam out (the distro's span is made again, under the call span), never a crash.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, Final

from opentelemetry import propagate
from opentelemetry.context import Context

from otel_mcp_replay.call import CURRENT_CALL
from otel_mcp_replay.patches.session import tool_of

# The distro's MCP instrumentation (amazon/opentelemetry/distro/instrumentation/mcp/_wrappers.py).
MODULE: Final = "amazon.opentelemetry.distro.instrumentation.mcp._wrappers"
SEAM: Final = "ClientWrapper._should_suppress_mcp_span"


def seams() -> list[tuple[str, str, Callable[..., Any]]]:
    """The seam, where the distro is installed and still has it; else none."""
    try:
        module = importlib.import_module(MODULE)
    except Exception:  # not installed, or a release that does not import here: nothing to step aside from
        return []
    owner, _, name = SEAM.partition(".")
    if not callable(getattr(getattr(module, owner, None), name, None)):
        return []
    return [(MODULE, SEAM, steps_aside)]


def steps_aside(
    wrapped: Callable[..., Any], instance: object, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """`ClientWrapper._should_suppress_mcp_span(message)`: True for the request of the call in
    progress (not yet sent: its ledger has no id), whose `_meta` is given the call span's trace
    context first; the distro's own answer for every other message."""
    message = args[0] if args else kwargs.get("message")
    call = CURRENT_CALL.get()
    if call is None or call.ledger.id is not None or tool_of(message) != call.tool:
        return wrapped(*args, **kwargs)
    _carry_context(message, call.call_span.context)
    return True


def _carry_context(message: object, context: Context) -> None:
    """The call span's trace context into the request's `params._meta` (the MCP conventions' carrier,
    with the global propagator, as the distro itself injects its own), keeping what `_meta` held."""
    params = getattr(getattr(message, "root", message), "params", None)
    if params is None:
        return
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=context)
    if not carrier:
        return
    from mcp.types import RequestParams

    meta = getattr(params, "meta", None)
    held = meta.model_dump() if meta is not None else {}
    # 1.x's model of `_meta`, which keeps extra keys (the distro instruments mcp 1.x only).
    params.meta = RequestParams.Meta(**{**held, **carrier})  # type: ignore[attr-defined,unused-ignore]
