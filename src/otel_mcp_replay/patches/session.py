"""The seam where a tool call begins and ends: `ClientSession.call_tool`.

It opens the call's span, puts the call's state in the context (the SDK carries that context into
the task that POSTs the request), and when the call ends settles its verdict, files its one record
and, under the app-authorized policy, turns a failure that lacked an answer into
`UnknownEffectError`. Every other outcome reaches the caller exactly as the SDK made it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.instrumentation.utils import is_instrumentation_enabled
from opentelemetry.trace import SpanKind, Status, StatusCode

from otel_mcp_replay import runtime as _runtime
from otel_mcp_replay import telemetry as t
from otel_mcp_replay.calls import CURRENT_CALL, CallState
from otel_mcp_replay.errors import ReplayUnavailableError, UnknownEffectError
from otel_mcp_replay.patches.httpx2_send import SSE_CLIENTS, SSE_WAITING


async def call_tool(
    wrapped: Callable[..., Awaitable[Any]], instance: object, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    rt = _runtime.current()
    name = args[0] if args else kwargs.get("name")
    if rt is None or type(name) is not str or not is_instrumentation_enabled():
        return await wrapped(*args, **kwargs)
    span = rt.tracer.start_span(
        f"{t.CALL_SPAN_PREFIX} {name}",
        kind=SpanKind.INTERNAL,
        attributes={t.MCP_METHOD_NAME: "tools/call", t.GEN_AI_TOOL_NAME: name},
    )
    span_context = trace.set_span_in_context(span)
    call = CallState(runtime=rt, tool=name, span=span, context=span_context, session=instance)
    token = CURRENT_CALL.set(call)
    otel_token = otel_context.attach(span_context)
    try:
        if SSE_CLIENTS:
            result = await _call_ending_on_failure(call, wrapped, args, kwargs)
        else:  # no SSE client exists, so no POST of this call can need ending here (see below)
            result = await wrapped(*args, **kwargs)
    except BaseException as exc:
        _given_up(call)
        _settle_failed(call, exc)
        raise
    finally:
        otel_context.detach(otel_token)
        CURRENT_CALL.reset(token)
    _given_up(call)
    verdict = "tool-error" if getattr(result, "is_error", False) is True else "completed"
    _file(call, verdict, may_have_run=False)
    span.end()
    return result


async def _call_ending_on_failure(
    call: CallState, wrapped: Callable[..., Awaitable[Any]], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """The SDK's call in a scope the series can cancel: on the SSE transport the SDK would wait for
    an answer that will never come (CallState.fail_without_answer). Only a client sse_client built
    takes that path, and it exists before any call on its session begins, so a call made while
    there is none needs no scope (one costs about a tenth of the plugin's own work per call)."""
    with anyio.CancelScope() as scope:
        call.scope = scope
        result = await wrapped(*args, **kwargs)
    if scope.cancelled_caught and call.failed_without_answer is not None:
        raise call.failed_without_answer
    return result


def _given_up(call: CallState) -> None:
    call.give_up()
    request = call.request
    if request is not None and request.sse_key is not None:
        SSE_WAITING.pop(request.sse_key, None)


def _settle_failed(call: CallState, exc: BaseException) -> None:
    """File the failed call, then raise what the law says the caller sees (or let `exc` go)."""
    request = call.request
    span = call.span
    try:
        if call.unavailable:
            _file(call, "failed", may_have_run=False)
            raise ReplayUnavailableError(call.tool) from None
        uncertain = False
        if request is not None and request.declaration.policy == "app-authorized":
            request.settle_open()
            # A caller that gave up sees its own cancellation, never "may have run".
            uncertain = request.facts.uncertain and not isinstance(exc, anyio.get_cancelled_exc_class())
        _file(call, "failed", may_have_run=uncertain)
        if uncertain:
            cause = request.final_error if request is not None and request.final_error is not None else exc
            raise UnknownEffectError(call.tool) from cause
    except (ReplayUnavailableError, UnknownEffectError) as error:
        _failed_span(span, error)
        raise
    _failed_span(span, exc)


def _failed_span(span: trace.Span, exc: BaseException) -> None:
    # The type only: an error's message may quote what the server echoed of the call.
    span.set_attribute(t.ERROR_TYPE, type(exc).__qualname__)
    span.set_status(Status(StatusCode.ERROR))
    span.end()


def _file(call: CallState, verdict: str, *, may_have_run: bool) -> None:
    try:
        call.file(verdict, may_have_run)  # type: ignore[arg-type]
    except Exception:  # the record must never break the caller's call
        _runtime.logger.exception("otel-mcp-replay: could not file the request_attempts record")
