"""A call's span, the MCP conventions' client span of one tool call: begun once, written once.

The rule: a call's span says where its request went (its `Route`, read once per session) and, as it
ends, the call's outcome in one write (the record's words, as attributes a backend can query). Where
another instrumentation already made the MCP client span of this very call (fastmcp's `Client`), that
span is the call's span: the plugin writes onto it and never ends it (the MCP conventions: enrich, do
not duplicate). Each `tools/call` request (a round) is one point of the conventions' client operation
duration. Nothing here holds a value of the call: an error is named by its type or the server's
JSON-RPC code, a session id only by its keyed hash.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from typing import Final, NamedTuple, Protocol

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer

from otel_mcp_replay import telemetry as t
from otel_mcp_replay.endpoints import SpanEndpoint
from otel_mcp_replay.errors import type_name
from otel_mcp_replay.http_conventions import Attributes, HttpConventions
from otel_mcp_replay.ledger import SERIES_EFFECT, RequestReplay
from otel_mcp_replay.runtime import Runtime
from otel_mcp_replay.telemetry import CallVerdict, Effect, Policy


class Route(NamedTuple):
    """Where a call's request goes, as its spans and metrics say it: the endpoint (None: a URL no
    origin spells), the call span's and the operation metric's attributes (the same but for the
    session id, which only the span holds, and the operation, which the span holds from its start),
    and its POST's, as an attempt span and the HTTP client
    duration say it before any response, in the HTTP conventions in force. Made once per session
    (`route_of`)."""

    endpoint: SpanEndpoint | None
    span_attributes: dict[str, str | int]
    metric_attributes: dict[str, str | int]
    post_span_attributes: Attributes
    post_metric_attributes: Attributes
    resend_count: str | None  # the attribute a repeat's resend count goes in (None: the vocabulary has none)
    record_endpoint: str  # the endpoint its calls' records name: the declared label, else the origin


# The call span's and the metric's attributes of a call that went another way than HTTP (stdio).
_LOCAL_ROUTE: Final = {t.NETWORK_TRANSPORT: t.PIPE}
# What the call span (ours, or the outer one enriched) says of the call: the conventions' operation.
_CALL_OPERATION: Final = {t.MCP_METHOD_NAME: t.TOOLS_CALL_METHOD, t.GEN_AI_OPERATION_NAME: t.EXECUTE_TOOL}


def route_of(
    session_key: bytes,
    http: HttpConventions,
    endpoint: SpanEndpoint | None,
    protocol_version: str | None,
    session_id: str | None,
    record_endpoint: str,
) -> Route:
    """The route of a request over HTTP: the session id (legacy era) is hashed, never held raw. The
    operation metric's attributes hold the conventions' operation too (the call span has it from
    its start)."""
    spans: dict[str, str | int] = {t.NETWORK_TRANSPORT: t.TCP, t.NETWORK_PROTOCOL_NAME: t.HTTP}
    if protocol_version is not None:
        spans[t.MCP_PROTOCOL_VERSION] = protocol_version
    if endpoint is not None:
        spans[t.SERVER_ADDRESS] = endpoint.address
        spans[t.SERVER_PORT] = endpoint.port
    metric = {**_CALL_OPERATION, **spans}
    if session_id is not None:
        spans[t.MCP_SESSION_ID] = hashed_session_id(session_key, session_id)
    post_span, post_metric = http.request(endpoint) if endpoint is not None else ({}, {})
    return Route(endpoint, spans, metric, post_span, post_metric, http.resend_count, record_endpoint)


class Ending(NamedTuple):
    """How a call ended, in the record's words, made once where it ends (call.ToolCall.ended): its
    record, its span's outcome and its point of the calls metric are all read from it."""

    request_id: str
    policy: Policy
    sent: int
    effect: Effect
    verdict: CallVerdict
    may_have_run: bool
    failure_type: str | None  # error.type: the server's JSON-RPC code, the error's type, or tool_error
    code: int | None  # the server's JSON-RPC error code, when it failed the call with one
    http_version: str | None
    local: bool  # it went another way than HTTP (stdio, in-process)
    endpoint: str  # the endpoint its record names


class CallSpan:
    """One call's span, the context its attempts' spans are children in, and where its request
    went: made by the call (or by the first round of an app's call, whose rounds share it; a task's
    polls write under it too). It ends once (`end`): the outcome in one write, the call counted."""

    __slots__ = ("context", "owned", "route", "span")

    def __init__(self, tracer: Tracer, tool: str) -> None:
        # The current context, read once for the three readers below (each would read it again).
        current = otel_context.get_current()
        outer = outer_call_span(tool, current)  # (start_call_span's reading, in place: a frame fewer)
        self.owned = outer is None  # the plugin made it, and ends it
        self.span = own_call_span(tracer, tool, current) if outer is None else outer
        self.context = trace.set_span_in_context(self.span, current)
        self.route: Route | None = None  # where its request went, once the HTTP seam saw it

    def outlives_its_request(self, tracer: Tracer, tool: str) -> None:
        """The call went on past its request (a task-backed call, tasks.py) and past the outer
        instrumentation's span, which timed that request and ended with it (fastmcp's around a
        `call_tool_task` handle): that span can no longer be written, so the call's record and outcome
        go on a span of its own, under that one, from its start."""
        if not self.owned:
            self.span = own_call_span(tracer, tool, outer=self.span)
            self.owned, self.context = True, trace.set_span_in_context(self.span)

    def end(self, runtime: Runtime, tool: str, ending: Ending) -> None:
        """The call (a call, or an app's call of rounds) ends as `ending` says: its outcome, the
        record's words, as span attributes a backend can query, written in one write, and the call
        counted once in the calls metric, both built here only. A span the plugin did not make (the
        outer instrumentation's) is written the same, with the conventions' operation, and left for
        its maker to end: this runs inside its maker's call, so before it ends it."""
        span = self.span
        outcome: dict[str, str | int | bool] = {
            t.JSONRPC_REQUEST_ID: ending.request_id,
            t.POLICY: ending.policy,
            t.SENT: ending.sent,
            t.EFFECT: ending.effect,
            t.VERDICT: ending.verdict,
            t.MAY_HAVE_RUN: ending.may_have_run,
        }
        if ending.failure_type is not None:
            outcome[t.ERROR_TYPE] = ending.failure_type
            if ending.code is not None:
                outcome[t.RPC_RESPONSE_STATUS_CODE] = str(ending.code)
            span.set_status(Status(StatusCode.ERROR))  # never a description: it could quote the server
        if ending.http_version is not None:
            outcome[t.NETWORK_PROTOCOL_VERSION] = ending.http_version
        route = self.route
        if route is not None:
            outcome.update(route.span_attributes)
        elif ending.local:
            outcome.update(_LOCAL_ROUTE)
        if self.owned:
            span.set_attributes(outcome)  # the call's one write at its end
            span.end()
        else:
            span.set_attributes({**_CALL_OPERATION, **outcome})
        metric = {
            t.VERDICT: ending.verdict,
            t.EFFECT: ending.effect,
            t.POLICY: ending.policy,
            t.GEN_AI_TOOL_NAME: tool,
        }
        runtime.instruments.calls.add(1, metric)


def start_call_span(tracer: Tracer, tool: str) -> tuple[Span, bool]:
    """The MCP conventions' client span of one tool call (it stands in for the SDK's own), and
    whether the plugin made it (it ends it then): the outer instrumentation's span of this very
    call when there is one (`outer_call_span`), else a new one."""
    outer = outer_call_span(tool)
    if outer is not None:
        return outer, False
    return own_call_span(tracer, tool), True


def own_call_span(
    tracer: Tracer, tool: str, context: Context | None = None, *, outer: Span | None = None
) -> Span:
    """The plugin's own client span of one tool call: in `context` (None: the current one), or
    under `outer`, the outer instrumentation's span of it, from that span's start (a task-backed call
    outlives the creating request that span times: tasks.py)."""
    if outer is not None:
        context = trace.set_span_in_context(outer)
    return tracer.start_span(
        f"{t.CALL_SPAN_PREFIX} {tool}",
        context,
        SpanKind.CLIENT,
        {**_CALL_OPERATION, t.GEN_AI_TOOL_NAME: tool},
        start_time=getattr(outer, "start_time", None),
    )


def outer_call_span(tool: str, context: Context | None = None) -> Span | None:
    """The MCP client span another instrumentation made of this very call, current here (in
    `context`, None: the current one): a recording CLIENT span, not the plugin's, with
    `mcp.method.name` = `tools/call` and the same `gen_ai.tool.name` (fastmcp's `Client` makes one
    around its session's `call_tool`). None when there is none. Its attributes are read where the
    SDK keeps them (a span of the API alone has none to read: never outer)."""
    span = trace.get_current_span(context)
    if getattr(span, "kind", None) is not SpanKind.CLIENT or not span.is_recording():
        return None
    attributes = getattr(span, "attributes", None)
    if (
        attributes is None
        or attributes.get(t.MCP_METHOD_NAME) != t.TOOLS_CALL_METHOD
        or attributes.get(t.GEN_AI_TOOL_NAME) != tool
    ):
        return None
    scope = getattr(span, "instrumentation_scope", None)
    if scope is not None and scope.name == t.INSTRUMENTATION_NAME:
        return None  # the plugin's own (a call made while one of its calls runs): never enriched
    return span


def record_operation(
    runtime: Runtime,
    tool: str,
    started_ns: int,
    route: Route | None,
    failure_type: str | None,
    code: int | None,
    http_version: str | None,
    local: bool = False,
) -> None:
    """One `tools/call` request (a round) ended: its point of the MCP conventions' client operation
    duration, with every attribute the conventions give it (each when known)."""
    if route is not None:
        metric = {**route.metric_attributes, t.GEN_AI_TOOL_NAME: tool}
    else:
        metric = {**_CALL_OPERATION, t.GEN_AI_TOOL_NAME: tool}
        if local:
            metric.update(_LOCAL_ROUTE)
    if http_version is not None:
        metric[t.NETWORK_PROTOCOL_VERSION] = http_version
    if failure_type is not None:
        metric[t.ERROR_TYPE] = failure_type
        if code is not None:
            metric[t.RPC_RESPONSE_STATUS_CODE] = str(code)
    runtime.instruments.operation_duration.record((time.perf_counter_ns() - started_ns) / 1e9, metric)


def error_type(error: BaseException, code: int | None = None) -> str:
    """A failed call's error.type: the server's JSON-RPC code, else the error's full type name."""
    return str(code) if code is not None else type_name(error)


def hashed_session_id(key: bytes, session_id: str) -> str:
    """A session id as a span may hold it: a keyed hash, never the id (it authorises the session)."""
    digest = hmac.new(key, session_id.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()
    return "h:" + digest[:16]


class Round(Protocol):
    """What an app's call reads of one of its rounds (call.ToolCall)."""

    ledger: RequestReplay  # its request's

    def app_call_ended(self, error: BaseException | None, result: object) -> None:
        """Its app's call ended with it handed on unended: it ends now."""


class AppCall:
    """One `Client.call_tool` of the app's (mcp 2.x), which the SDK's round driver (SEP-2322) sends
    as one `ClientSession.call_tool` per round: one call all the same. Its span is made by its first
    round and holds every round's attempts and records; it ends, counted once in the calls metric,
    when the app's call returns or raises, its verdict the final round's."""

    # Class attributes until a round changes them (one store fewer per call each).
    # Made by the first round and shared by all of them: a call that sent none has none.
    call_span: CallSpan | None = None
    rounds = 0
    ending: Ending | None = None  # the latest round's, as it ended
    # The latest round, handed on unended: a claimed result its client finishes, or a task still open.
    pending: Round | None = None
    effect: Effect = "none"  # of the whole call: unknown if any round's is, else applied if any
    sent = 0  # requests sent over all its rounds
    mismatched = False  # the latest round was rejected with HEADER_MISMATCH: the SDK resends it
    # The latest round was answered with InputRequiredResult: the next one continues it, and is never
    # a repeat of it.
    continues = False

    def __init__(self, runtime: Runtime, tool: str, arguments: object, session: object) -> None:
        self.runtime, self.tool, self.arguments, self.session = runtime, tool, arguments, session

    def next_round(self) -> CallSpan:
        """A round begins: the span all its rounds share (its number is `rounds` now)."""
        if self.call_span is None:
            self.call_span = CallSpan(self.runtime.tracer, self.tool)
        self.rounds += 1
        return self.call_span

    def handed_on(self, call: Round) -> None:
        """Its round `call` returned unended (a claimed result, or a task still open): it ends as its
        task does, else as the app's call does."""
        self.pending, self.ending, self.continues = call, None, False
        self.sent += call.ledger.sent
        self.effect = SERIES_EFFECT[self.effect, call.ledger.effect]  # uncertainty survives

    def ended(self, error: BaseException | None, result: object = None) -> Round | None:
        """The app's call returned `result` (`error` None) or raised `error`: a round still pending
        ends now (returned, for the repeat guard's store), then its span, counted once."""
        call_span, pending = self.call_span, self.pending
        if call_span is None:
            return None  # no round began: nothing was sent, nothing to say
        if pending is not None:  # the claim's resolver made the final result, or it raised
            pending.app_call_ended(error, result)
        ending = self.ending
        if ending is None:  # not reached: every round ends (patches/session.py), but never leave a span open
            if call_span.owned:
                call_span.span.end()
            return pending
        self.ending = None  # its last round's ending let go with it
        # Every round's sent and effect, in the one copy made of the last round's ending.
        if error is not None:  # the final round's own failure, or what the SDK raised after it
            ending = ending._replace(
                verdict="failed",
                failure_type=error_type(error, ending.code),
                sent=self.sent,
                effect=self.effect,
            )
        else:
            code = ending.code if ending.verdict == "failed" else None  # its task failed with it
            ending = ending._replace(may_have_run=False, code=code, sent=self.sent, effect=self.effect)
        call_span.end(self.runtime, self.tool, ending)
        return pending
