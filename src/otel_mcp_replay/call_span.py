"""A call's span, the MCP conventions' client span of one tool call: begun once, written once.

The rule: a call's span says where its request went (its `Route`, read once per session) and, as it
ends, the call's outcome in one write (the record's words, as attributes a backend can query); its
duration is the conventions' client operation duration. It never holds a value of the call: an
error is named by its type or the server's JSON-RPC code, a session id only by its keyed hash.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from typing import Final, NamedTuple

from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer

from otel_mcp_replay import telemetry as t
from otel_mcp_replay.endpoints import SpanEndpoint
from otel_mcp_replay.runtime import Runtime


class Route(NamedTuple):
    """Where a call's request goes, as its spans and metrics say it: the endpoint (None: a URL no
    origin spells), and the call span's and the operation metric's attributes, made once per
    session (`route_of`)."""

    endpoint: SpanEndpoint | None
    span_attributes: dict[str, str | int]
    metric_attributes: dict[str, str | int]


# The call span's and the metric's attributes of a call that went another way than HTTP (stdio).
_LOCAL_ROUTE: Final = {t.NETWORK_TRANSPORT: t.PIPE}


def route_of(
    session_key: bytes, endpoint: SpanEndpoint | None, protocol_version: str | None, session_id: str | None
) -> Route:
    """The route of a request over HTTP: the session id (legacy era) is hashed, never held raw."""
    metric: dict[str, str | int] = {t.NETWORK_TRANSPORT: t.TCP}
    if protocol_version is not None:
        metric[t.MCP_PROTOCOL_VERSION] = protocol_version
    if endpoint is not None:
        metric[t.SERVER_ADDRESS] = endpoint.address
        metric[t.SERVER_PORT] = endpoint.port
    spans = {**metric, t.NETWORK_PROTOCOL_NAME: t.HTTP}
    if session_id is not None:
        spans[t.MCP_SESSION_ID] = hashed_session_id(session_key, session_id)
    return Route(endpoint, spans, metric)


def start_call_span(tracer: Tracer, tool: str) -> Span:
    """The MCP conventions' client span of one tool call (it stands in for the SDK's own)."""
    return tracer.start_span(
        f"{t.CALL_SPAN_PREFIX} {tool}",
        kind=SpanKind.CLIENT,
        attributes={
            t.MCP_METHOD_NAME: t.TOOLS_CALL_METHOD,
            t.GEN_AI_OPERATION_NAME: t.EXECUTE_TOOL,
            t.GEN_AI_TOOL_NAME: tool,
        },
    )


def end_call_span(
    runtime: Runtime,
    span: Span,
    tool: str,
    started_ns: int,
    route: Route | None,
    outcome: dict[str, str | int | bool],
    failure_type: str | None,
    code: int | None,
    http_version: str | None,
    local: bool = False,
    *,
    timed: bool = True,  # False: its request's duration was recorded already (a task's creation)
) -> None:
    """A call's span ends with its outcome (the record's words, as span attributes a backend can
    query), and its duration is recorded as the MCP conventions' client operation duration."""
    if failure_type is not None:
        outcome[t.ERROR_TYPE] = failure_type
        if code is not None:
            outcome[t.RPC_RESPONSE_STATUS_CODE] = str(code)
        span.set_status(Status(StatusCode.ERROR))  # never a description: it could quote the server
    if http_version is not None:
        outcome[t.NETWORK_PROTOCOL_VERSION] = http_version
    where = route.span_attributes if route is not None else _LOCAL_ROUTE if local else None
    span.set_attributes(outcome if where is None else {**outcome, **where})  # the call's one write at its end
    span.end()
    if timed:
        record_operation_duration(runtime, tool, started_ns, route, local, failure_type)


def record_operation_duration(
    runtime: Runtime, tool: str, started_ns: int, route: Route | None, local: bool, failure_type: str | None
) -> None:
    """The MCP conventions' client operation duration of one tools/call request, from `started_ns`."""
    metric: dict[str, str | int] = {t.MCP_METHOD_NAME: t.TOOLS_CALL_METHOD, t.GEN_AI_TOOL_NAME: tool}
    if route is not None:
        metric.update(route.metric_attributes)
    elif local:
        metric.update(_LOCAL_ROUTE)
    if failure_type is not None:
        metric[t.ERROR_TYPE] = failure_type
    runtime.instruments.operation_duration.record((time.perf_counter_ns() - started_ns) / 1e9, metric)


def error_type(error: BaseException, code: int | None = None) -> str:
    """A failed call's error.type: the server's JSON-RPC code, else the error's full type name."""
    return str(code) if code is not None else type_name(error)


def type_name(error: BaseException) -> str:
    """The fully qualified name of an error's type (a builtin's bare): never its message, which may
    quote what the server echoed of the call."""
    kind = type(error)
    module = kind.__module__
    return kind.__qualname__ if module == "builtins" else f"{module}.{kind.__qualname__}"


def hashed_session_id(key: bytes, session_id: str) -> str:
    """A session id as a span may hold it: a keyed hash, never the id (it authorises the session)."""
    digest = hmac.new(key, session_id.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()
    return "h:" + digest[:16]
