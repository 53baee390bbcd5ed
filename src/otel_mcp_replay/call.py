"""One tool call and the life of each of its attempts: what the call's span and record say.

The rule: an attempt's life is one path, SENDING -> EXCHANGED -> (AWAITING its answer) -> DONE
(a redirect the client follows, SENDING -> REDIRECTED -> SENDING, stays the same attempt), entered
only through the named transitions below; at DONE its span ends, its row is written and it
is counted, once. The call is given up (`abandon`) when the caller has its outcome or stopped
waiting: nothing more is sent for it, and an attempt still open is settled as what is known of it.
A multi-round call (SEP-2322, `AppCall`) is one call: each round is a `ToolCall` of its own (its
request, attempts and record) on the one span the app's call ends and counts, once.
Nothing here reads a value of the call: no arguments, no result, no key, no URL path.
"""

from __future__ import annotations

import contextvars
import hashlib
import hmac
import sys
import time
from collections.abc import Callable
from typing import Any, Final, Literal, NamedTuple

import anyio
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from otel_mcp_replay import telemetry as t
from otel_mcp_replay.answers import answer_of
from otel_mcp_replay.declaration import COMPATIBILITY, Declaration
from otel_mcp_replay.endpoints import LOCAL_ENDPOINT, UNKNOWN_ENDPOINT, SpanEndpoint
from otel_mcp_replay.errors import UnknownEffectError, lost_answer
from otel_mcp_replay.guard import CONFIRMED
from otel_mcp_replay.law import (
    GIVEN_UP,
    NO_RESPONSE,
    Answer,
    Outcome,
    Permission,
    classify,
)
from otel_mcp_replay.lines import LINE, http_instrumented
from otel_mcp_replay.record import AttemptRow, RecordRefused, call_record
from otel_mcp_replay.runtime import Runtime
from otel_mcp_replay.telemetry import CallDeclinedReason, CallVerdict, DeclinedReason, Effect

# The call in progress in this context: set by the call_tool seam, read by the HTTP and stdio seams
# (the SDK carries the context into the task that sends the request).
CURRENT_CALL: contextvars.ContextVar[ToolCall | None] = contextvars.ContextVar(
    "otel_mcp_replay_call", default=None
)

# The request id of a call none of whose requests was seen (its record and span say it).
UNKNOWN_REQUEST_ID: Final = "unknown"

State = Literal["sending", "redirected", "exchanged", "awaiting", "done"]


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


# What a series' effect becomes after one more attempt's: uncertainty survives (once any attempt
# is `unknown`, the series is), and evidence that something ran (`applied`) is never erased.
_RANK: Final[dict[Effect, int]] = {"none": 0, "applied": 1, "unknown": 2}
_SERIES: Final[dict[tuple[Effect, Effect], Effect]] = {
    (so_far, attempt): so_far if _RANK[so_far] >= _RANK[attempt] else attempt
    for so_far in _RANK
    for attempt in _RANK
}


def series_effect(so_far: Effect, attempt: Effect) -> Effect:
    """What is known of a whole series' effect once one more attempt came to `attempt`."""
    try:
        return _SERIES[so_far, attempt]  # one lookup: it is asked once per attempt
    except KeyError:
        raise ValueError("an effect is none, unknown or applied") from None


class Attempt:
    """One HTTP attempt of a tools/call, from the moment it is sent until its effect is known."""

    # What most attempts never change starts as a class attribute (one store fewer per attempt each).
    state: State = "sending"
    outcome = NO_RESPONSE  # replaced when the exchange ends
    ended_ns = 0  # the exchange's end: the span ends there, not after a wait
    wait_ms = 0
    declined: DeclinedReason | None = None
    early: Answer | None = None  # an answer that beat the end of its exchange (SSE)
    _answer_seen: anyio.Event | None = None  # made only by answer_within
    hop_status = 0  # the redirect the client is following, while REDIRECTED
    repeated = False  # a repeat followed this attempt (its wait is written, even when 0)
    wire = 0  # times its request was handed to the connection (patches/http_send.py)
    last_hop = 0  # the status of the latest response to it there (0: none yet)
    stream_cut = False  # its answer's stream was cut, not ended
    http_version: str | None = None  # the HTTP version of its response (network.protocol.version)
    error_type: str | None = None  # the type of the error it got no response with

    def __init__(self, call: ToolCall, permission: Permission | None, span: Span) -> None:
        self.call = call
        self.permission = permission
        self.span = span

    # -- transitions --

    async def answer_within(self, seconds: float) -> Answer | None:
        """Wait up to `seconds` for this attempt's answer on the connection's own stream (SSE): a
        POST cut after the server took it may still be answered there, and an answer seen is the
        answer, whichever was told first."""
        if self.early is None:
            self._answer_seen = anyio.Event()
            with anyio.move_on_after(seconds):
                await self._answer_seen.wait()
        return self.early

    def redirected(self, status: int) -> None:
        """SENDING -> REDIRECTED: a redirect the client follows with the same request; the next
        hop continues this attempt (ToolCall.opened)."""
        if self.state == "sending":
            self.state, self.hop_status = "redirected", status

    def resent_by_client(self, status: int) -> None:
        """SENDING: the HTTP client sent this attempt's request again of itself (its auth flow, after
        a 401): the response it had is an attempt of its own, filed as one, and this attempt goes on
        as the next, sent by the app's own client (permission `app`, on what that response was)."""
        if self.state != "sending":
            return
        outcome = classify(status, "other")  # the response went back to the flow: no answer reached the SDK
        self.exchanged(outcome)
        self.decided(0, None)  # repeated, by the client: not declined
        call = self.call
        self.permission = Permission("app", outcome.failure or "error")
        self.span = call._attempt_span(self.permission)
        self.state, self.outcome, self.ended_ns, self.wait_ms = "sending", NO_RESPONSE, 0, 0
        self.declined, self.early, self.repeated, self.stream_cut = None, None, False, False
        call.attempt = self

    def exchanged(
        self, outcome: Outcome, error: BaseException | None = None, http_version: str | None = None
    ) -> None:
        """SENDING -> EXCHANGED: the HTTP exchange ended (before any wait)."""
        if self.state != "sending":
            return  # cut short already: what it does now is not this call's record
        self.state, self.outcome, self.ended_ns = "exchanged", outcome, time.time_ns()
        call = self.call
        if http_version is not None:
            self.http_version = call.http_version = http_version
        if error is not None and outcome.status == 0:
            self.error_type = type_name(error)
        if outcome.effect != "none":
            call.sent_one()
        if outcome.status == 0 and outcome.failure == "network" and outcome.effect != "none":
            call.no_answer()
        if outcome.answered:
            call.answer_arrived()
        call.final_error = error  # the final error is the latest attempt's (None: a response)

    def decided(self, wait_ms: int, declined: DeclinedReason | None) -> None:
        """EXCHANGED -> DONE, or -> AWAITING when the answer is still to come on a stream."""
        if self.state != "exchanged":
            return
        self.wait_ms, self.declined = wait_ms, declined
        self.repeated = self.outcome.failure is not None and declined is None
        if not self.repeated and self.outcome.status:  # the attempt the SDK was handed
            self.call.delivered_status(self.outcome.status)
        if self.outcome.effect is not None:
            self._done()
        else:
            self.state = "awaiting"
            if self.early is not None:
                self.answered(self.early)

    def answered(self, kind: Answer) -> None:
        """The JSON-RPC answer to the request's id was seen on a stream: AWAITING -> DONE."""
        self.call.answer_arrived()
        if self.state != "awaiting":
            self.early = kind
            if self._answer_seen is not None:
                self._answer_seen.set()
            return
        self.outcome = self.outcome.after_stream(kind)
        self._done()

    def stream_ended(self, error: BaseException | None) -> None:
        """The delivered attempt's stream ended before its answer. The client may resume it on a new
        stream where the answer still comes, so it stays AWAITING until the call ends (abandon)."""
        if self.state == "awaiting" and error is not None:
            self.call.final_error = error
            self.stream_cut = True

    def abandon(self) -> None:
        """The call ended with this attempt open: sent and unanswered, or never to be repeated."""
        if self.state == "redirected":  # the redirect was not followed after all
            self.state = "sending"
            self.exchanged(classify(self.hop_status, None))
            self.decided(0, None)
        elif self.state == "sending":  # a cancel or a read timeout mid-exchange: the caller's
            if not self.wire:
                self.exchanged(classify(0, None, sent=False))  # never sent
                self.decided(0, None)
                return
            # Sent, and given up before any response: the caller's timeout is no failure below the
            # SDK (`network`), so it is `error` (the law's word for anything else), as it is when the
            # caller gives up after the response's headers came (below) and over stdio: one word.
            self.exchanged(GIVEN_UP)
            self.call.no_answer()
            self.decided(0, "not-retryable")
        elif self.state == "exchanged":
            self.decided(0, "budget")
        elif self.state == "awaiting":  # its answer never came: its effect is unknown
            self.outcome = self.outcome.after_stream(None, cut=self.stream_cut)
            if self.outcome.failure == "error" and self.declined is None:
                self.declined = "not-retryable"  # a response without its answer: the law's `error`
            self._done()

    def _done(self) -> None:
        self.state = "done"
        call, outcome = self.call, self.outcome
        assert outcome.effect is not None
        if call.attempt is self:
            call.attempt = None
        call.effect = series_effect(call.effect, outcome.effect)
        attributes: dict[str, str | int] = {t.EFFECT: outcome.effect}  # one call: the SDK locks per call
        status = outcome.status
        if status:
            attributes[t.HTTP_STATUS_CODE] = status
        if self.http_version is not None:
            attributes[t.NETWORK_PROTOCOL_VERSION] = self.http_version
        # The HTTP conventions' error.type: the status from 400, else the type of the error that
        # left it without a response.
        error_type = str(status) if status >= 400 else self.error_type
        if error_type is not None:
            attributes[t.ERROR_TYPE] = error_type
        if outcome.failure is not None:
            attributes[t.FAILURE] = outcome.failure
            self.span.set_status(Status(StatusCode.ERROR))
        if outcome.answered and outcome.failure == "error":
            call.error_answered = True  # the server answered it with a JSON-RPC error
        if self.declined is not None:
            attributes[t.DECLINED] = self.declined
        if self.repeated:
            attributes[t.WAIT_MS] = self.wait_ms
        self.span.set_attributes(attributes)
        self.span.end(end_time=self.ended_ns or None)
        if call.route is not None and http_instrumented():
            self._http_duration(error_type)
        permission = self.permission
        by = "first" if permission is None else permission.by
        call.rows.append(AttemptRow(outcome.status, outcome.failure or "", outcome.effect, by, self.wait_ms))
        metric: dict[str, str] = {t.GEN_AI_TOOL_NAME: call.tool}
        if outcome.failure is not None:
            metric[t.FAILURE] = outcome.failure
        if permission is not None:
            metric[t.PERMISSION_BY] = permission.by
        if self.declined is not None:
            metric[t.DECLINED] = self.declined
        instruments = call.runtime.instruments
        instruments.attempts.add(1, metric)
        if self.repeated:
            instruments.wait.record(self.wait_ms / 1000.0, {t.GEN_AI_TOOL_NAME: call.tool})

    def _http_duration(self, error_type: str | None) -> None:
        """The HTTP conventions' request duration for this attempt's POST, which the HTTP client
        instrumentation, suppressed under the attempt's span, no longer records itself."""
        call = self.call
        started = getattr(self.span, "start_time", None)  # the SDK's span: the POST began there
        if call.route is None or call.route.endpoint is None or not started or not self.ended_ns:
            return
        endpoint = call.route.endpoint
        metric: dict[str, str | int] = {
            t.HTTP_REQUEST_METHOD: "POST",
            t.SERVER_ADDRESS: endpoint.address,
            t.SERVER_PORT: endpoint.port,
            t.URL_SCHEME: endpoint.scheme,
        }
        if self.outcome.status:
            metric[t.HTTP_STATUS_CODE] = self.outcome.status
        if self.http_version is not None:
            metric[t.NETWORK_PROTOCOL_VERSION] = self.http_version
        if error_type is not None:
            metric[t.ERROR_TYPE] = error_type
        call.runtime.instruments.http_duration.record(max(self.ended_ns - started, 0) / 1e9, metric)


class ToolCall:
    """One `call_tool`: its span, the request it sent, its attempts, and how it ends.

    It holds its request's replay facts too (the spec's RequestReplay), in two layers kept apart:
    the series tells what HTTP showed (sent, no response at all, the status the SDK was handed),
    the answer watcher (answers.py) whether the JSON-RPC answer to its id arrived. Each fact is
    written once by its owner; for the delivered status, the first word stands. Not thread-safe:
    one call's owners take turns on one event loop.
    """

    # What most calls never change starts as a class attribute (one store fewer per call each).
    # The request, once the HTTP seam saw it leave (bind), or the id stdio sent it under:
    request_id: object = None
    declaration: Declaration | None = None
    endpoint = UNKNOWN_ENDPOINT  # the declared label, else the origin: never a path
    attempt: Attempt | None = None  # the open one
    attempts = 0
    final_error: BaseException | None = None  # the transport error of the last unanswered attempt
    abandoned = False
    effect: Effect = "none"  # of the whole series so far: series_effect of its attempts
    _abandoned_event: anyio.Event | None = None  # made by the first wait that needs one
    scope: anyio.CancelScope | None = None  # set while the seam can stop the call
    stopped_with: BaseException | None = None  # why the seam stopped the call, if it did
    fingerprint: bytes | None = None  # the repeat guard's hash, for a changing call without its key
    # What the guard remembered of it as it ended, for its store: True armed, False cleared.
    guard_armed: bool | None = None
    repeat_confirmed = False  # begun inside repeat_confirmed(): the repeat guard lets it go
    _releases: list[Callable[[], object]] | None = None
    app_call: AppCall | None = None  # the app's call this is a round of, when the SDK drives rounds
    round = 1  # its round (SEP-2322): 1 for the first, and for every call that is not a round
    # The request's replay facts:
    sent = 0  # times the request was sent
    unanswered = False  # an attempt got no response at all (a received refusal is never this)
    delivered: int | None = None  # the status of the response the SDK was handed
    answer_came = False  # the JSON-RPC response to its id arrived
    error_answered = False  # ... and it was a JSON-RPC error (its code, the SDK's error's, is the server's)
    refusal: Any = None  # the error status response the SDK was handed (its body may be a JSON-RPC error)
    route: Route | None = None  # where its request went, once the HTTP seam saw it
    http_version: str | None = None  # of the latest response
    server_code: int | None = None  # the JSON-RPC error code the server failed it with, if it did
    may_have_run = False  # it failed as "may have run" (UnknownEffectError)
    local = False  # it went another way than HTTP (stdio, in-process)

    def __init__(self, runtime: Runtime, tool: str, session: object, app_call: AppCall | None = None) -> None:
        self.runtime = runtime
        self.tool = tool
        self.session = session
        # Read here, in the caller's context: mcp 1.x sends the request from its transport's task.
        if CONFIRMED.get():
            self.repeat_confirmed = True
        if app_call is None:
            self.started_ns = time.perf_counter_ns()
            self.span = _call_span(runtime, tool)
            self.context: Context = trace.set_span_in_context(self.span)
        else:  # a round of the app's call: its span, its next round number
            self.app_call = app_call
            self.round, self.span, self.context = app_call.next_round()
        self.rows: list[AttemptRow] = []

    def bind(self, request_id: object, declaration: Declaration, endpoint: str, route: Route) -> None:
        """The HTTP seam saw this call's request leave, under `declaration`, by `route`."""
        self.request_id, self.declaration, self.endpoint = request_id, declaration, endpoint
        self.route = route  # its span says it as the call ends (end_call_span), in one write
        if self.session is not None:
            self.runtime.session_endpoints[self.session] = (declaration, endpoint)
        if self.app_call is not None:
            self.app_call.route = route

    # -- the request's facts --

    def sent_one(self) -> None:
        """The series sent the request once more."""
        self.sent += 1

    def no_answer(self) -> None:
        """The series: an attempt got no response at all."""
        self.unanswered = True

    def delivered_status(self, status: int) -> None:
        """The series handed the MCP SDK a response with this status. The first word stands."""
        if self.delivered is None:
            self.delivered = status

    def refused_with(self, response: Any) -> None:
        """The series hands the SDK this error status response (its body is read as the call ends)."""
        self.refusal = response

    def answer_arrived(self) -> None:
        """The answer watcher: the JSON-RPC response to this request's id arrived."""
        self.answer_came = True

    @property
    def app_authorized(self) -> bool:
        """Its series runs under `app-authorized` (the declaration it was bound under says so)."""
        declaration = self.declaration
        return declaration is not None and declaration.policy == "app-authorized"

    @property
    def accepted_without_answer(self) -> bool:
        """The HTTP layer took the request (a 2xx), and its JSON-RPC answer never arrived."""
        return self.delivered is not None and 200 <= self.delivered < 300 and not self.answer_came

    @property
    def uncertain(self) -> bool:
        """Under `app-authorized`: the call genuinely lacked an answer somewhere (an attempt got no
        response, or a 2xx whose answer never came), so if it fails it fails as "may have run".
        A chain of received refusals and errors is an answer throughout: it keeps the server's error.
        """
        return self.app_authorized and (self.unanswered or self.accepted_without_answer)

    # -- the series' log --

    def opened(self, permission: Permission | None) -> Attempt:
        attempt = self.attempt
        if permission is None and attempt is not None and attempt.state == "redirected":
            attempt.state = "sending"  # the next hop of a followed redirect: the same attempt
            return attempt
        self.attempt = Attempt(self, permission, self._attempt_span(permission))
        return self.attempt

    def _attempt_span(self, permission: Permission | None) -> Span:
        """The span of the call's next attempt, begun now: the HTTP client span of its POST."""
        self.attempts += 1
        if self.route is None:  # not over HTTP (stdio, in-process): no HTTP span, only its row
            return trace.INVALID_SPAN
        number = self.attempts  # a redirect's follow-up continues the numbering
        attributes: dict[str, str | int] = {
            t.HTTP_REQUEST_METHOD: "POST",
            t.MCP_METHOD_NAME: t.TOOLS_CALL_METHOD,
            t.GEN_AI_TOOL_NAME: self.tool,
            t.JSONRPC_REQUEST_ID: str(self.request_id),
            t.ATTEMPT: number,
        }
        endpoint = self.route.endpoint if self.route is not None else None
        if endpoint is not None:
            attributes[t.URL_FULL] = endpoint.url_full
            attributes[t.SERVER_ADDRESS] = endpoint.address
            attributes[t.SERVER_PORT] = endpoint.port
        if number > 1:
            attributes[t.HTTP_RESEND_COUNT] = number - 1
        if permission is not None:
            attributes[t.PERMISSION_BY] = permission.by
            attributes[t.PERMISSION_ON] = permission.on
            if permission.assumes is not None:
                attributes[t.PERMISSION_ASSUMES] = permission.assumes
        return self.runtime.tracer.start_span(t.ATTEMPT_SPAN_NAME, self.context, SpanKind.CLIENT, attributes)

    def answered(self, kind: Answer) -> None:
        """The answer to this call's request was seen on the connection's own stream (SSE)."""
        if self.attempt is not None:
            self.attempt.answered(kind)
        else:
            self.answer_arrived()

    def stream_ended(self, cut: bool) -> None:
        """The connection's own stream (SSE) ended (`cut`: was lost) before this call's answer came:
        it never will."""
        if self.attempt is not None:
            self.attempt.stream_cut = cut
            self.attempt.abandon()

    # -- giving up --

    def when_ended(self, release: Callable[[], object]) -> None:
        """Run `release` when the call ends (what a seam holds for it only while it runs)."""
        if self._releases is None:
            self._releases = []
        self._releases.append(release)

    def abandon(self) -> None:
        """The call ended: a series waiting to repeat it stops waiting and sends nothing more, and
        an attempt still open is settled as what is known of it."""
        self.abandoned = True
        if self._abandoned_event is not None:
            self._abandoned_event.set()
        releases, self._releases = self._releases, None
        if releases is not None:
            for release in releases:
                release()
        if self.attempt is not None:
            self.attempt.abandon()

    async def wait_unless_abandoned(self, delay_ms: int) -> bool:
        """Sleep `delay_ms`; False (at once) when the call is abandoned first, or already was."""
        if self.abandoned:
            return False
        event = self._abandoned_event
        if event is None:  # most calls never wait: the event is made only here
            event = self._abandoned_event = anyio.Event()
        with anyio.move_on_after(delay_ms / 1000):
            await event.wait()
            return False
        return True

    def stop(self, error: BaseException, *, declined: CallDeclinedReason | None = None) -> None:
        """The seam ends this call now, and only this call, with `error` (the SDK would wait for an
        answer that will never come, or must not send at all); `declined` says why it was not sent."""
        self.stopped_with = error
        if declined is not None:
            self.span.set_attribute(t.DECLINED, declined)
        if self.scope is not None:
            self.scope.cancel()

    def handled(self) -> None:
        """The SDK is done reading this call's response without tearing the session down (mcp 1.x
        tells it: patches/carrier.py). A 2xx whose answer never came leaves the SDK's call waiting,
        for its read timeout or for ever; where the caller is owed `UnknownEffectError`
        (app-authorized), the call is ended now."""
        if not self.abandoned and self.app_authorized and self.accepted_without_answer:
            self.stop(self.final_error if self.final_error is not None else lost_answer())

    # -- the end --

    def completed(self, result: Any) -> None:
        """The SDK returned `result`: settle, file the record, end the span."""
        self.abandon()
        is_error = getattr(result, "is_error", None)  # 2.x; 1.x names it isError
        if is_error is None:
            is_error = getattr(result, "isError", False)
        if _asks_for_input(result):
            verdict: CallVerdict = "input-required"
        else:
            verdict = "tool-error" if is_error is True else "completed"
        if self.app_call is not None and _claimed(result):
            # A client extension's own shape: its claim's resolver finishes it after this returns, so
            # the round is filed as the app's call ends (AppCall.ended): failed if the resolver raised.
            self.app_call.round_ended(self, verdict, filed=False)
            return
        self.settled(verdict)
        if self.app_call is not None:
            self.app_call.round_ended(self, verdict)
        else:
            self._end(verdict, t.TOOL_ERROR if verdict == "tool-error" else None)

    def settled(self, verdict: CallVerdict) -> None:
        """Its result came (`verdict` says how the call ended): file it; tell the repeat guard."""
        self._file(verdict, False)
        if self.fingerprint is not None and self.runtime.guard is not None:
            failed = verdict == "failed"
            self.guard_armed = self.runtime.guard.ended(self.fingerprint, self.effect, failed=failed)

    def failed(self, exc: BaseException) -> BaseException | None:
        """The SDK's call ended with `exc`: settle and file. Returns what the caller sees instead of
        `exc` (None: `exc` itself). A caller's own cancellation or timeout is never replaced."""
        self.abandon()
        seen: BaseException | None = None
        # The caller's own: its cancellation, or the SDK's error for its read timeout.
        cancelled = isinstance(exc, anyio.get_cancelled_exc_class()) or LINE.is_callers_timeout(exc)
        stopped = self.stopped_with
        if stopped is not None and not self.rows:  # refused before anything was sent
            self._file("failed", False)
            seen = None if cancelled else stopped
        else:
            # A caller that gave up sees its own cancellation, never "may have run".
            uncertain = self.uncertain and not cancelled
            self._file("failed", uncertain)
            if uncertain:
                seen = UnknownEffectError(self.tool)
                seen.__cause__ = self.final_error if self.final_error is not None else exc
            elif stopped is not None and not cancelled:
                seen = stopped  # the server's refusal, which the SDK would not have raised in time
            guard = self.runtime.guard
            if self.fingerprint is not None and guard is not None:
                self.guard_armed = guard.ended(self.fingerprint, self.effect, failed=True)
        self.server_code = self._server_code(exc) if seen is None else None
        if self.app_call is not None:  # the app's call ends the span, as its final round ended
            self.app_call.round_ended(self, "failed")
        else:
            self._end("failed", error_type(seen or exc, self.server_code))
        return seen

    def _server_code(self, exc: BaseException) -> int | None:
        """The JSON-RPC error code of the SDK's `exc` when the server answered this call with that
        error (on its 2xx stream, or in an error status's body the SDK read), else None: the SDK's
        own errors (a timeout, a closed connection, a status's stand-in) are no server's code."""
        code = getattr(getattr(exc, "error", None), "code", None)
        if type(code) is not int or not isinstance(exc, LINE.error_base()):
            return None
        if self.error_answered:
            return code
        refusal = self.refusal
        try:
            body = refusal.content if refusal is not None else None
        except Exception:  # not read by the SDK: no answer it could have raised
            return None
        found = answer_of(body) if body else None
        return code if found is not None and found[1] == "error" else None

    def _end(self, verdict: CallVerdict, failure_type: str | None) -> None:
        """The call (not a round of an app's call) ends: its outcome on its span, which ends."""
        declaration = self.declaration or COMPATIBILITY
        outcome: dict[str, str | int | bool] = {
            t.JSONRPC_REQUEST_ID: str(self.request_id),
            t.POLICY: declaration.policy,
            t.SENT: self.sent,
            t.EFFECT: self.effect,
            t.VERDICT: verdict,
            t.MAY_HAVE_RUN: self.may_have_run,
        }
        end_call_span(
            self.runtime,
            self.span,
            self.tool,
            self.started_ns,
            self.route,
            outcome,
            failure_type,
            self.server_code,
            self.http_version,
            self.local,
        )

    def _file(self, verdict: CallVerdict, may_have_run: bool) -> None:
        self.may_have_run = may_have_run
        try:
            self._file_record(verdict, may_have_run)
        except Exception:  # the record must never break the caller's call
            self.runtime.logger.exception("otel-mcp-replay: could not file the request_attempts record")

    def _file_record(self, verdict: CallVerdict, may_have_run: bool) -> None:
        if self.declaration is None:
            self._without_http(verdict)
        declaration = self.declaration or COMPATIBILITY
        effect = self.effect
        try:
            record = call_record(
                policy=declaration.policy,
                sent=self.sent,
                effect=effect,
                verdict=verdict,
                may_have_run=may_have_run,
                endpoint=self.endpoint,
                tool=self.tool,
                request_id=str(self.request_id),
                rows=self.rows,
                call_round=self.round,
            )
        except RecordRefused:  # e.g. a tool name with control characters: refused whole, never trimmed
            self.span.add_event(t.RECORD_REFUSED_EVENT)
            self.runtime.instruments.records_refused.add(1)
        else:
            self.runtime.vouches.file(self.span, record)
        if self.app_call is None:  # a round is counted with its app's call, once (AppCall.ended)
            metric: dict[str, str] = {t.VERDICT: verdict, t.EFFECT: effect, t.POLICY: declaration.policy}
            metric[t.GEN_AI_TOOL_NAME] = self.tool
            self.runtime.instruments.calls.add(1, metric)

    def _without_http(self, verdict: CallVerdict) -> None:
        """No HTTP request of this call was seen. Failed before anything left: nothing sent, effect
        none, under its session's known policy and endpoint. Else it went another way (stdio,
        in-process): one attempt, never repeated, as it ran."""
        if self.request_id is None and verdict == "failed":
            known = self.runtime.session_endpoints.get(self.session) if self.session is not None else None
            if known is None:
                known = (COMPATIBILITY, UNKNOWN_ENDPOINT)
            self.declaration, self.endpoint = known
            self.request_id = UNKNOWN_REQUEST_ID
            return
        if self.request_id is None:
            self.request_id = UNKNOWN_REQUEST_ID
        self.endpoint = LOCAL_ENDPOINT
        self.local = True
        self.opened(None)
        assert self.attempt is not None
        applied = verdict != "failed"
        self.attempt.exchanged(classify(0, "result" if applied else "other"))  # no HTTP status: 0
        self.attempt.decided(0, None if applied else "not-retryable")


class AppCall:
    """One `Client.call_tool` of the app's (mcp 2.x), which the SDK's round driver (SEP-2322) sends
    as one `ClientSession.call_tool` per round: one call all the same. Its span is made by its first
    round and holds every round's attempts and records; it ends, counted once in the metrics, when
    the app's call returns or raises, its verdict the final round's."""

    # Class attributes until a round changes them (one store fewer per call each).
    span: Span | None = None  # made by the first round: a call that sent none has none
    context: Context | None = None
    rounds = 0
    last: tuple[ToolCall, CallVerdict] | None = None  # the latest round ended, as it ended
    effect: Effect = "none"  # of the whole call: unknown if any round's is, else applied if any
    mismatched = False  # the latest round was rejected with HEADER_MISMATCH: the SDK resends it
    unfiled: ToolCall | None = None  # the latest round, a claimed result the client finishes
    route: Route | None = None  # where its rounds' requests went (the latest's)
    sent = 0  # requests sent over all its rounds

    def __init__(self, runtime: Runtime, tool: str, arguments: object, session: object) -> None:
        self.runtime, self.tool, self.arguments, self.session = runtime, tool, arguments, session

    def is_round(self, session: object, tool: str, arguments: object) -> bool:
        """Whether this `ClientSession.call_tool` is one of this call's rounds: the very arguments
        the app gave, on its Client's session (not a call an input callback makes meanwhile)."""
        return session is self.session and tool == self.tool and arguments is self.arguments

    @property
    def continues(self) -> bool:
        """The latest round was answered with InputRequiredResult: the next one continues it, and is
        never a repeat of it."""
        return self.last is not None and self.last[1] == "input-required"

    def next_round(self) -> tuple[int, Span, Context]:
        if self.span is None:
            self.started_ns = time.perf_counter_ns()
            self.span = _call_span(self.runtime, self.tool)
            self.context = trace.set_span_in_context(self.span)
        assert self.context is not None
        self.rounds += 1
        return self.rounds, self.span, self.context

    def round_ended(self, call: ToolCall, verdict: CallVerdict, *, filed: bool = True) -> None:
        self.last = (call, verdict)
        self.unfiled = None if filed else call
        self.effect = series_effect(self.effect, call.effect)
        self.sent += call.sent

    def ended(self, error: BaseException | None, result: object = None) -> None:
        """The app's call returned `result` (`error` None) or raised `error`: end its span, count it
        once, and file a round the client finished itself (a claimed result) as the call ended."""
        span, last = self.span, self.last
        if span is None:
            return  # no round began: nothing was sent, nothing to say
        if last is None:  # not reached: every round ends (patches/session.py), but never leave a span open
            span.end()
            return
        call, verdict = last
        # The app's call is over: its last round, which refers back to it, is let go now, so both
        # are freed as the app drops this call, not left as a cycle for the garbage collector.
        self.last = None
        if error is None and self.unfiled is not None:  # the claim's resolver made the final result
            verdict = "tool-error" if getattr(result, "is_error", None) is True else "completed"
        if error is not None:
            verdict = "failed"  # the final round's own failure, or what the SDK raised after it
        unfiled, self.unfiled = self.unfiled, None
        if unfiled is not None:
            unfiled.settled(verdict)
        policy = (call.declaration or COMPATIBILITY).policy
        outcome: dict[str, str | int | bool] = {
            t.SENT: self.sent,
            t.EFFECT: self.effect,
            t.VERDICT: verdict,
            t.MAY_HAVE_RUN: call.may_have_run and error is not None,
            t.POLICY: policy,
            t.JSONRPC_REQUEST_ID: str(call.request_id),
        }
        code = call.server_code if error is not None else None
        if error is not None:
            failure_type: str | None = error_type(error, code)
        else:
            failure_type = t.TOOL_ERROR if verdict == "tool-error" else None
        end_call_span(
            self.runtime,
            span,
            self.tool,
            self.started_ns,
            self.route,
            outcome,
            failure_type,
            code,
            call.http_version,
            call.local,
        )
        self.runtime.instruments.calls.add(
            1, {t.VERDICT: verdict, t.EFFECT: self.effect, t.POLICY: policy, t.GEN_AI_TOOL_NAME: self.tool}
        )


def _call_span(runtime: Runtime, tool: str) -> Span:
    """The MCP conventions' client span of one tool call (it stands in for the SDK's own)."""
    return runtime.tracer.start_span(
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


def _claimed(result: object) -> bool:
    """A result of a client extension's own shape (mcp 2.x): neither a CallToolResult nor an
    InputRequiredResult, whose claim's resolver finishes it after the session's call returned."""
    found = sys.modules.get("mcp_types")  # imported by the SDK that returned `result`
    return found is not None and not isinstance(result, (found.CallToolResult, found.InputRequiredResult))


def _asks_for_input(result: object) -> bool:
    """An `InputRequiredResult` (mcp 2.x, SEP-2322): the server asks for input before it completes."""
    return getattr(result, "result_type", None) == "input_required"
