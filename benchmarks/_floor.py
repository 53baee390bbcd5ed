"""The telemetry floor: the OTel SDK calls the contract asks of a clean tool call, and nothing else.

CONTRACT.md asks, for each tools/call: the call's span, one span per HTTP attempt, the
`mcp.tool.request_attempts` event (14 keys) on the call's span, and a point on the attempts and
calls counters. `telemetry_floor()` patches `ClientSession.call_tool` to make exactly those SDK
calls, with the attributes the plugin gives them on a clean call, around the SDK's own call, and
no more: no law, no series, no ledger, no record built (it is made once, up front). What it costs
is what any implementation of the contract pays on the SDK's side, whatever its own logic costs:
the lower bound of the plugin's overhead.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import wrapt  # type: ignore[import-untyped]
from mcp.client.session import ClientSession
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import SpanKind, TracerProvider

from benchmarks._common import clean_record
from otel_mcp_replay import telemetry as t
from otel_mcp_replay.record import AttemptRow
from otel_mcp_replay.runtime import Instruments


@contextmanager
def telemetry_floor(tracer_provider: TracerProvider, meter_provider: MeterProvider) -> Iterator[None]:
    tracer = tracer_provider.get_tracer(t.INSTRUMENTATION_NAME)
    instruments = Instruments.on(meter_provider.get_meter(t.INSTRUMENTATION_NAME))
    record = clean_record([AttemptRow(200, "", "applied", "first", 0)])

    async def call_tool(
        wrapped: Callable[..., Awaitable[Any]],
        instance: object,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        name = args[0] if args else kwargs["name"]
        span = tracer.start_span(
            f"{t.CALL_SPAN_PREFIX} {name}",
            kind=SpanKind.INTERNAL,
            attributes={t.MCP_METHOD_NAME: "tools/call", t.GEN_AI_TOOL_NAME: name},
        )
        span_context = trace.set_span_in_context(span)
        token = otel_context.attach(span_context)
        try:
            span.set_attributes({t.JSONRPC_REQUEST_ID: "7", t.POLICY: "app-authorized"})
            attempt = tracer.start_span(
                f"{t.ATTEMPT_SPAN_PREFIX} {name}",
                context=span_context,
                kind=SpanKind.INTERNAL,
                attributes={
                    t.MCP_METHOD_NAME: "tools/call",
                    t.GEN_AI_TOOL_NAME: name,
                    t.JSONRPC_REQUEST_ID: "7",
                    t.ATTEMPT: 1,
                },
            )
            result = await wrapped(*args, **kwargs)
            attempt.set_attributes({t.EFFECT: "applied", t.HTTP_STATUS_CODE: 200})
            attempt.end()
            instruments.attempts.add(1, {t.GEN_AI_TOOL_NAME: name})
            span.add_event(t.RECORD_EVENT, record)
            instruments.calls.add(
                1, {t.VERDICT: "completed", t.EFFECT: "applied", t.POLICY: "app-authorized"}
            )
        finally:
            otel_context.detach(token)
        span.end()
        return result

    original = ClientSession.call_tool
    wrapt.wrap_function_wrapper(ClientSession, "call_tool", call_tool)
    try:
        yield
    finally:
        ClientSession.call_tool = original  # type: ignore[method-assign]
