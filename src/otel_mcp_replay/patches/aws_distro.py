"""Beside aws-opentelemetry-distro's own MCP instrumentation (mcp 1.x): one MCP client span per call.

The rule: for the request of a call the plugin governs, the distro's client span is not made; the
call span stands in for it, so the trace context the distro puts in the request's `_meta` is the
call span's and the server's span is its child (as on mcp 2.x, where the SDK's own span steps aside:
http_send.sdk_span). Every other message keeps the distro's span, untouched.

How. The distro's wrapper of `BaseSession.send_request` (its `ClientWrapper.wrap_session_send`)
opens its span with its own tracer, `self._tracer.start_span("mcp.client", kind=CLIENT)`, then
writes the span's context into `_meta` and its attributes onto it. While a call's request is not yet
sent, that tracer hands back the call span's context as a span that records nothing: the distro
injects the call span's context, and its writes (the arguments, the result, the raw session id) go
nowhere. The tracer is reached as the distro reads it, on each send: `_tracer` on the class, a
property that finds each instance's own and hands it back behind `SteppingTracer`, so the seam holds
whichever of the two instrumentors is instrumented first, whichever wraps `send_request`
outermost, and with the distro's HTTP spans suppressed (its default) or not. `uninstall` removes the
property: each instance's tracer is its own again. The names are private to the distro: the test
pins them, and a release that moves them leaves this seam out (the distro's span is made again,
under the call span), never a crash.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, Final

import wrapt
from opentelemetry.trace import NonRecordingSpan, Span, SpanKind

from otel_mcp_replay.call import CURRENT_CALL

# The distro's MCP instrumentation (amazon/opentelemetry/distro/instrumentation/mcp/_wrappers.py).
MODULE: Final = "amazon.opentelemetry.distro.instrumentation.mcp._wrappers"
OWNER: Final = "ClientWrapper"
TRACER: Final = "_tracer"  # the instance attribute its send wrapper reads its tracer from
SPAN_NAME: Final = "_CLIENT_SPAN_NAME"  # the class attribute naming the span it opens per send


class SteppingTracer(wrapt.ObjectProxy):  # type: ignore[misc,type-arg]
    """The distro's tracer, but for the span it opens for the request of the call in progress."""

    def __init__(self, wrapped: Any, span_name: str) -> None:
        super().__init__(wrapped)
        self._self_span_name = span_name

    def start_span(self, name: str, *args: Any, **kwargs: Any) -> Span:
        call = CURRENT_CALL.get()
        if (
            call is not None
            and call.request_id is None  # its request not yet sent: this is it
            and name == self._self_span_name
            and kwargs.get("kind") is SpanKind.CLIENT
        ):
            return NonRecordingSpan(call.call_span.span.get_span_context())
        return self.__wrapped__.start_span(name, *args, **kwargs)  # type: ignore[no-any-return]


def install() -> None:
    """The property on the distro's client wrapper, where the distro is installed and still keeps
    what it reads; else nothing."""
    try:
        owner = getattr(importlib.import_module(MODULE), OWNER, None)
    except Exception:  # not installed, or a release that does not import here: nothing to step aside from
        return
    span_name = getattr(owner, SPAN_NAME, None)
    if not isinstance(owner, type) or not isinstance(span_name, str) or TRACER in vars(owner):
        return

    def stepping(instance: object) -> Any:
        tracer = vars(instance).get(TRACER)
        if tracer is None:  # as the attribute would be: never set
            raise AttributeError(TRACER)
        return SteppingTracer(tracer, span_name)

    def keep(instance: object, tracer: object) -> None:
        vars(instance)[TRACER] = tracer

    setattr(owner, TRACER, property(stepping, keep))


def uninstall() -> None:
    """The property removed, if `install` put it there (a distro never imported had none)."""
    owner = getattr(sys.modules.get(MODULE), OWNER, None)
    if isinstance(owner, type) and isinstance(vars(owner).get(TRACER), property):
        delattr(owner, TRACER)
