"""One HTTP attempt of a tool call, from the moment it is sent until its effect is known.

The rule: an attempt's life is one path, SENDING -> EXCHANGED -> (AWAITING its answer) -> DONE
(a redirect the client follows, SENDING -> REDIRECTED -> SENDING, stays the same attempt), entered
only through the named transitions below; at DONE its span ends, its row is written and it
is counted, once. It is the only writer of its own state and of its call's per-attempt facts
(what was sent, what got no response, the status the SDK was handed, whether the answer came).
"""

from __future__ import annotations

import time
from contextvars import Token
from types import TracebackType
from typing import Final, Literal, Protocol

import anyio
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import _SUPPRESS_HTTP_INSTRUMENTATION_KEY, Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from otel_mcp_replay import telemetry as t
from otel_mcp_replay.call_span import Route, type_name
from otel_mcp_replay.evidence import GIVEN_UP, NO_RESPONSE, Answer, Outcome, classify
from otel_mcp_replay.http_conventions import Attributes
from otel_mcp_replay.law import Permission
from otel_mcp_replay.record import AttemptRow
from otel_mcp_replay.runtime import Runtime
from otel_mcp_replay.telemetry import DeclinedReason, Effect

State = Literal["sending", "redirected", "exchanged", "awaiting", "done"]


class AttemptsCall(Protocol):
    """What an attempt reads and writes of the call it is an attempt of (call.ToolCall)."""

    tool: str
    request_id: object
    runtime: Runtime
    context: Context  # its span's: its attempts' spans are its children
    route: Route | None
    records_http_duration: bool  # its attempts record the HTTP request duration (attempt._http_duration)
    attempt: Attempt | None
    attempts: int
    effect: Effect
    rows: list[AttemptRow]
    final_error: BaseException | None
    http_version: str | None
    error_answered: bool
    # The request's replay facts (call.ToolCall says what each means):
    sent: int
    unanswered: bool
    delivered: int | None
    answer_came: bool

    async def wait_unless_abandoned(self, delay_ms: int) -> bool:
        """Sleep `delay_ms` before its next attempt; False when it was given up meanwhile."""
        ...


def next_attempt(call: AttemptsCall, permission: Permission | None) -> Attempt:
    """The call's next attempt, its span begun: repeated with `permission` (None: the first, or a
    redirect's next hop, which continues the attempt it follows)."""
    attempt = call.attempt
    if permission is None and attempt is not None and attempt.state == "redirected":
        attempt.hop_followed()
        return attempt
    attempt = call.attempt = Attempt(call, permission, _span_of(call, permission))
    return attempt


def _span_of(call: AttemptsCall, permission: Permission | None) -> Span:
    """The span of the call's next attempt, begun now: the HTTP client span of its POST."""
    call.attempts += 1
    route = call.route
    if route is None:  # not over HTTP (stdio, in-process): no HTTP span, only its row
        return trace.INVALID_SPAN
    number = call.attempts  # a redirect's follow-up continues the numbering
    # Its POST in the HTTP conventions in force (read once per route), then the replay's facts.
    attributes: Attributes = {
        **route.post_span_attributes,
        t.GEN_AI_TOOL_NAME: call.tool,
        t.JSONRPC_REQUEST_ID: str(call.request_id),
        t.ATTEMPT: number,
    }
    if number > 1:
        call.runtime.instruments.http.resend(attributes, number - 1)
    if permission is not None:
        attributes[t.PERMISSION_BY] = permission.by
        attributes[t.PERMISSION_ON] = permission.on
        if permission.assumes is not None:
            attributes[t.PERMISSION_ASSUMES] = permission.assumes
    return call.runtime.tracer.start_span(t.ATTEMPT_SPAN_NAME, call.context, SpanKind.CLIENT, attributes)


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
    wire = 0  # times its request was handed to the connection (patches/wire.py)
    stream_cut = False  # its answer's stream was cut, not ended
    # Whether its answer's absence can be known: an event stream's only once its watch saw the SDK
    # read it to the end (the plugin turned off or on again meanwhile, the SDK reads it unseen).
    reading_seen = True
    body_cut = False  # its response's body was cut as the exchange read it (a JSON body, a stream read ahead)
    http_version: str | None = None  # the HTTP version of its response (network.protocol.version)
    error_type: str | None = None  # the type of the error it got no response with
    _token: Token[Context] | None = None  # its context, attached while it is exchanged

    def __init__(self, call: AttemptsCall, permission: Permission | None, span: Span) -> None:
        self.call = call
        self.permission = permission
        self.span = span

    # -- its exchange: `async with attempt as context:` around sending it --

    async def __aenter__(self) -> Context:
        """Its exchange begins under its span, the HTTP client span of its POST, current, and the
        HTTP client instrumentation makes no second span for it (OpenTelemetry's suppress-HTTP key,
        as the botocore instrumentation sets it under its client span). Returns that context, whose
        trace context goes in the POST's headers."""
        context = trace.set_span_in_context(self.span)
        context = otel_context.set_value(_SUPPRESS_HTTP_INSTRUMENTATION_KEY, True, context)
        self._token = otel_context.attach(context)
        return context

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        """Its exchange is over. A caller that gave up (or a client that failed) mid-exchange
        leaves it settled as what is known of it."""
        if error is not None:
            self.abandon()
        if self._token is not None:
            otel_context.detach(self._token)

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
        hop continues this attempt (next_attempt)."""
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
        self.span = _span_of(call, self.permission)
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
        if error is not None:
            if outcome.status:  # a response came, and its body was cut
                self.body_cut = True
            else:
                self.error_type = type_name(error)
        if outcome.effect != "none":
            call.sent += 1
            if outcome.failure == "network":  # (at an exchange's end: no whole response)
                call.unanswered = True  # none at all, or its body cut (a received refusal is never this)
        if outcome.answered:
            call.answer_came = True
        call.final_error = error  # the final error is the latest attempt's (None: a response)

    def decided(self, wait_ms: int, declined: DeclinedReason | None) -> None:
        """EXCHANGED -> DONE, or -> AWAITING when the answer is still to come on a stream."""
        if self.state != "exchanged":
            return
        self.wait_ms, self.declined = wait_ms, declined
        self.repeated = self.outcome.failure is not None and declined is None
        call = self.call
        if not self.repeated and self.outcome.status and call.delivered is None and not self.body_cut:
            # The attempt the SDK was handed: the first word stands. A body cut is never handed on
            # (the SDK gets the error, or what ends this one call).
            call.delivered = self.outcome.status
        if self.outcome.effect is not None:
            self._done()
        else:
            self.state = "awaiting"
            if self.early is not None:
                self.answered(self.early)

    def answered(self, kind: Answer) -> None:
        """The JSON-RPC answer to the request's id was seen on a stream: AWAITING -> DONE."""
        self.call.answer_came = True
        if self.state != "awaiting":
            self.early = kind
            if self._answer_seen is not None:
                self._answer_seen.set()
            return
        self.outcome = self.outcome.after_stream(kind)
        self._done()

    def stream_ended(self, error: BaseException | None, declined: DeclinedReason | None = None) -> None:
        """The delivered attempt's stream ended before its answer (`error`: it was cut; `declined`:
        why the law repeats no cut of it). The client may resume it on a new stream where the answer
        still comes, so it stays AWAITING until the call ends (abandon)."""
        self.reading_seen = True
        if self.state == "awaiting" and error is not None:
            if declined is not None:
                self.declined = declined
            self.call.final_error = error
            self.stream_cut = True

    def stream_lost(self, cut: bool) -> None:
        """The connection's own stream (SSE) ended (`cut`: was lost) before the answer: it never
        comes, and the attempt is settled as what is known of it."""
        self.stream_cut = cut
        self.abandon()

    def hop_followed(self) -> None:
        """REDIRECTED -> SENDING: the next hop of a followed redirect, the same attempt."""
        self.state = "sending"

    def reaching_connection(self, previous: int) -> None:
        """Its request goes to the connection once more (the client's door, patches/wire.py), after
        a response with status `previous` to it there (0: none yet): after one that was no
        redirect, the client sent it again of itself."""
        if previous and not 300 <= previous < 400:  # not a redirect's next hop: a re-send
            self.resent_by_client(previous)
        self.wire += 1

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
            self.call.unanswered = True
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
        attributes: Attributes = {t.EFFECT: outcome.effect}  # one call: the SDK locks per call
        status = outcome.status
        # The HTTP conventions' error.type: the status from 400, else the type of the error that
        # left it without a response.
        error_type = str(status) if status >= 400 else self.error_type
        call.runtime.instruments.http.response(attributes, status, self.http_version, error_type)
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
        if call.records_http_duration:
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
        """The HTTP client duration for this attempt's POST, which the HTTP client instrumentation,
        suppressed under the attempt's span, no longer records itself."""
        call = self.call
        started = getattr(self.span, "start_time", None)  # the SDK's span: the POST began there
        route = call.route
        if route is None or route.endpoint is None or not started or not self.ended_ns:
            return
        call.runtime.instruments.http.record(
            max(self.ended_ns - started, 0) / 1e9,
            route.post_metric_attributes,
            self.outcome.status,
            self.http_version,
            error_type,
        )
