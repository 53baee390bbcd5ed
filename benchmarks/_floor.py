"""The telemetry floor: the OTel SDK calls the contract asks of a clean tool call, and nothing else.

docs/contract.md asks, for each tools/call: the call's span, one span per HTTP attempt, the
`mcp.tool.request_attempts` event (15 keys) on the call's span, and a point on the attempts and
calls counters. `FloorTelemetry` makes exactly those SDK calls, with the attributes the plugin
gives them on a clean call, and no more: no law, no series, no answer watch, no record built (it is made
once, up front). What it costs is what any implementation of the contract pays on the SDK's side,
whatever its own logic costs: the lower bound of the plugin's overhead. `telemetry_floor()` puts
those calls around the SDK's `call_tool` (the floor arm of benchmark 1); `FloorTelemetry.warm_us()`
times them alone, in a loop with no I/O: the least they can cost on this machine.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager, nullcontext
from contextvars import Token
from typing import Any

import mcp.shared.jsonrpc_dispatcher
import wrapt  # type: ignore[import-untyped]
from mcp.client.session import ClientSession
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import INVALID_SPAN, Span, SpanKind, TracerProvider

from benchmarks._common import clean_record, per_op_us
from otel_mcp_replay import telemetry as t
from otel_mcp_replay.record import AttemptRow
from otel_mcp_replay.runtime import Instruments


class FloorTelemetry:
    """The SDK calls of one clean call, in two halves: before the request leaves, after its answer."""

    def __init__(self, tracer_provider: TracerProvider, meter_provider: MeterProvider) -> None:
        self.tracer = tracer_provider.get_tracer(t.INSTRUMENTATION_NAME)
        self.instruments = Instruments.on(meter_provider.get_meter(t.INSTRUMENTATION_NAME))
        self.record = clean_record([AttemptRow(200, "", "applied", "first", 0)])
        # The attempt's answer in the HTTP names in force (the plugin's helper, asked once here).
        self.answered: dict[str, Any] = {t.EFFECT: "applied"}
        self.instruments.http.response(self.answered, 200, None, None)

    def opened(self, name: str) -> tuple[Span, Span, Token[Context]]:
        """The call's span (made current) and its attempt's span."""
        span = self.tracer.start_span(
            f"{t.CALL_SPAN_PREFIX} {name}",
            kind=SpanKind.CLIENT,
            attributes={t.MCP_METHOD_NAME: "tools/call", t.GEN_AI_TOOL_NAME: name},
        )
        span_context = trace.set_span_in_context(span)
        token = otel_context.attach(span_context)
        span.set_attributes({t.JSONRPC_REQUEST_ID: "7", t.POLICY: "app-authorized"})
        attempt = self.tracer.start_span(
            t.ATTEMPT_SPAN_NAME,
            context=span_context,
            kind=SpanKind.CLIENT,
            attributes={t.GEN_AI_TOOL_NAME: name, t.JSONRPC_REQUEST_ID: "7", t.ATTEMPT: 1},
        )
        return span, attempt, token

    def closed(self, name: str, span: Span, attempt: Span, token: Token[Context]) -> None:
        """The attempt's effect and end, the counters, the record, the call's end."""
        attempt.set_attributes(self.answered)
        attempt.end()
        self.instruments.attempts.add(1, {t.GEN_AI_TOOL_NAME: name})
        span.add_event(t.RECORD_EVENT, self.record)
        counted = {t.VERDICT: "completed", t.EFFECT: "applied", t.POLICY: "app-authorized"}
        self.instruments.calls.add(1, {**counted, t.GEN_AI_TOOL_NAME: name})
        otel_context.detach(token)
        span.end()
        self.instruments.operation_duration.record(0.001, {**_OPERATION, t.GEN_AI_TOOL_NAME: name})

    def warm_us(self, calls: int = 200) -> float:
        """Microseconds per call for `calls` clean calls' SDK calls back to back, with no I/O between
        (caches warm). The clock is this thread's CPU time: the BatchSpanProcessor's worker, which in
        a real call exports during the network wait, is not counted."""
        return per_op_us(self._one_call, runs=1, loops=calls, clock=time.thread_time_ns)[0]

    def _one_call(self) -> None:
        self.closed("search", *self.opened("search"))


# The operation duration's attributes as a clean call over HTTP has them (their values are the floor's own).
_OPERATION: dict[str, str | int] = {
    t.MCP_METHOD_NAME: t.TOOLS_CALL_METHOD,
    t.GEN_AI_OPERATION_NAME: t.EXECUTE_TOOL,
    t.NETWORK_TRANSPORT: t.TCP,
    t.NETWORK_PROTOCOL_NAME: t.HTTP,
    t.NETWORK_PROTOCOL_VERSION: "1.1",
    t.MCP_PROTOCOL_VERSION: "2025-11-25",
    t.SERVER_ADDRESS: "127.0.0.1",
    t.SERVER_PORT: 1,
}


@contextmanager
def telemetry_floor(tracer_provider: TracerProvider, meter_provider: MeterProvider) -> Iterator[None]:
    floor = FloorTelemetry(tracer_provider, meter_provider)

    async def call_tool(
        wrapped: Callable[..., Awaitable[Any]],
        instance: object,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        name = args[0] if args else kwargs["name"]
        span, attempt, token = floor.opened(name)
        try:
            result = await wrapped(*args, **kwargs)
        except BaseException:
            otel_context.detach(token)
            raise
        floor.closed(name, span, attempt, token)
        return result

    def sdk_span(wrapped: Any, instance: object, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        # The call span stands in for the SDK's own span of a tools/call: not an SDK call the floor makes.
        attributes = kwargs.get("attributes")
        if type(attributes) is dict and attributes.get(t.MCP_METHOD_NAME) == t.TOOLS_CALL_METHOD:
            return nullcontext(INVALID_SPAN)
        return wrapped(*args, **kwargs)

    original = ClientSession.call_tool
    original_span = mcp.shared.jsonrpc_dispatcher.otel_span
    wrapt.wrap_function_wrapper(ClientSession, "call_tool", call_tool)
    wrapt.wrap_function_wrapper(mcp.shared.jsonrpc_dispatcher, "otel_span", sdk_span)
    try:
        yield
    finally:
        ClientSession.call_tool = original  # type: ignore[method-assign]
        mcp.shared.jsonrpc_dispatcher.otel_span = original_span
