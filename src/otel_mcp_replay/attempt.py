"""One HTTP attempt of a request, from the moment it is sent until its effect is known.

The rule: an attempt owns its exchange, and its life is one path, told one step at a time by the
loop that sends it (patches/series.py): `open_attempt` (SENDING, its span begun), `send` (its
exchange: -> EXCHANGED, or a redirect the client follows: -> REDIRECTED, the next hop the same
attempt), `close` with the policy's decision (-> DONE, or -> AWAITING its answer on a stream), and
from the stream `heard` (-> DONE); `abandon` settles it as what is known when its request ends
first. At DONE its span ends, its row is written and it is counted, once. It is the only writer of
its request's per-attempt facts, the ledger (ledger.RequestReplay). A request the HTTP client sent
again of itself (an auth flow's re-send) is a new attempt, which `send` hands the loop.
"""

from __future__ import annotations

import sys
import time
from typing import Final, Literal, Protocol

import anyio
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.context import _SUPPRESS_HTTP_INSTRUMENTATION_KEY
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from otel_mcp_replay import telemetry as t
from otel_mcp_replay.call_span import CallSpan
from otel_mcp_replay.evidence import GIVEN_UP, NO_RESPONSE, Answer, Outcome, classify
from otel_mcp_replay.http_conventions import Attributes
from otel_mcp_replay.law import BUDGET, NOT_RETRYABLE, Declined, Permission
from otel_mcp_replay.ledger import SERIES_EFFECT, RequestReplay
from otel_mcp_replay.lines import LINE
from otel_mcp_replay.patches.libraries import HttpLibrary
from otel_mcp_replay.patches.wire import Door, Exchange, Exchanging, RequestWatch, exchange, followed
from otel_mcp_replay.policy import Wait
from otel_mcp_replay.record import AttemptRow
from otel_mcp_replay.runtime import Runtime
from otel_mcp_replay.telemetry import AttemptPermission, DeclinedReason

State = Literal["sending", "redirected", "exchanged", "awaiting", "done"]

_NOT_EXCHANGED: Final = Exchange(NO_RESPONSE, None, None)  # an attempt's exchange, until it ends

# How long a cut SSE POST's answer is awaited on the connection's stream: a server that took the
# request answers there within milliseconds; past this the attempt's effect stays unknown.
SSE_ANSWER_GRACE_S = 1.0


class AttemptsOwner(Protocol):
    """What an attempt reads of the request it is an attempt of (call.ToolCall, tasks.TaskPoll)."""

    tool: str
    runtime: Runtime
    call_span: CallSpan  # its attempts' spans are children of the call's span
    ledger: RequestReplay  # its ledger, which its attempts write
    attempt: Attempt | None  # the latest
    request_id: object  # its JSON-RPC id
    heard: Answer | None  # its answer, as its connection's own stream (legacy SSE) carried it


async def open_attempt(owner: AttemptsOwner, after: Wait | None) -> Attempt | None:
    """The request's next attempt, its span begun: the first (or a redirect's next hop, which
    continues the attempt it follows), or a repeat once the policy's wait (`after`) is over, the
    attempt before it closed then as repeated. None: its request ended during the wait (`abandon`
    of the attempt before), and nothing more is sent."""
    attempt = owner.attempt
    if after is None:
        if attempt is not None and attempt.state == "redirected":
            attempt.state = "sending"  # the next hop of a followed redirect: the same attempt
            return attempt
        return Attempt(owner, None)
    assert attempt is not None  # the one the policy decided on
    if attempt.state == "exchanged":  # (else its request ended already)
        event = attempt._repeat_due = anyio.Event()
        with anyio.move_on_after(after.ms / 1000):
            await event.wait()  # set by `abandon`: its request ended meanwhile
    if attempt.state != "exchanged":
        return None
    attempt.close(after)
    return Attempt(owner, after.permission)


class Attempt:
    """One HTTP attempt of a request, from the moment it is sent until its effect is known."""

    # What most attempts never change starts as a class attribute (one store fewer per attempt each).
    state: State = "sending"
    outcome = NO_RESPONSE  # replaced when the exchange ends
    ended_ns = 0  # the exchange's end: the span ends there, not after a wait
    wait_ms = 0
    declined: DeclinedReason | None = None
    _answer_seen: anyio.Event | None = None  # made only by a cut SSE POST's wait for its answer
    _repeat_due: anyio.Event | None = None  # made only by a wait before a repeat: set, it is given up
    hop_status = 0  # the redirect the client is following, while REDIRECTED
    repeated = False  # a repeat followed this attempt (its wait is written, even when 0)
    door: Door | None = None  # its request at the client's door (patches/wire.py), while sent
    stream_cut = False  # its answer's stream was cut, not ended
    # What its exchange came to (its response's HTTP version, the error it raised: its response's
    # body cut, or none came; its event stream's watch), kept as its exchange ended.
    got: Exchange = _NOT_EXCHANGED
    # Its POST's response, as the HTTP conventions say it on its span: made as its exchange ended.
    http_attributes: Attributes
    timed: Attributes | None = None  # its POST's HTTP duration attributes, when it records the duration
    span: Span
    declined_on_cut: DeclinedReason | None = None  # why a cut of its stream is not repeated: the law's word

    def __init__(
        self,
        owner: AttemptsOwner,
        permission: Permission | None,
        start_ns: int | None = None,
        outcome: Outcome | None = None,  # an exchange not sent through `send` (stdio, in-process)
    ) -> None:
        self.owner = owner
        self.permission = permission
        call_span = owner.call_span
        route = call_span.route
        if route is None:  # not over HTTP (stdio, in-process): no HTTP span, only its row
            self.span = trace.INVALID_SPAN
        else:
            # Its POST's point of the HTTP client duration is its to record where the HTTP client
            # instrumentation, suppressed under its span, no longer records it (asked as it opens).
            if route.endpoint is not None and _http_instrumented():
                self.timed = route.post_metric_attributes
            # Its span, begun now (or at `start_ns`): the HTTP client span of its POST, in the HTTP
            # conventions in force (read once per route), then the replay's facts.
            number = len(owner.ledger.rows) + 1
            attributes: Attributes = {
                **route.post_span_attributes,
                t.GEN_AI_TOOL_NAME: owner.tool,
                t.JSONRPC_REQUEST_ID: str(owner.request_id),
                t.ATTEMPT: number,
            }
            if number > 1 and route.resend_count is not None:
                attributes[route.resend_count] = number - 1
            if permission is not None:
                attributes[t.PERMISSION_BY] = permission.by
                attributes[t.PERMISSION_ON] = permission.on
                if permission.assumes is not None:
                    attributes[t.PERMISSION_ASSUMES] = permission.assumes
            self.span = owner.runtime.tracer.start_span(
                t.ATTEMPT_SPAN_NAME, call_span.context, SpanKind.CLIENT, attributes, start_time=start_ns
            )
        owner.attempt = self  # its request's latest
        if outcome is not None:
            self._exchanged(outcome)

    @property
    def watch(self) -> RequestWatch | None:
        """Its event stream's watch: sees whether the SDK read it to the end (what its exchange got)."""
        return self.got.watch

    # -- the steps the loop tells it --

    async def send(self, http: HttpLibrary, sending: Exchanging) -> tuple[Attempt, Exchange]:
        """SENDING -> EXCHANGED: its exchange, under its span, the HTTP client span of its POST,
        current: its trace context goes in the POST's headers, and the HTTP client instrumentation
        makes no second span for it (OpenTelemetry's suppress-HTTP key, as the botocore
        instrumentation sets it under its client span). A caller that gives up mid-exchange leaves
        it settled as what is known of it. Returns the attempt the exchange ended in: this one, or
        the latest the client sent again of itself (`_resent`), and what the exchange came to."""
        context = trace.set_span_in_context(self.span)
        context = otel_context.set_value(_SUPPRESS_HTTP_INSTRUMENTATION_KEY, True, context)
        token = otel_context.attach(context)
        request = sending.request
        try:
            propagate.inject(request.headers, context=context)
            door = self.door
            if door is None:  # (a redirect's next hop goes through the same door)
                door = self.door = Door()
            door.request = request
            got = await exchange(http, sending, door)
        except BaseException:
            self.abandon()
            raise
        finally:
            otel_context.detach(token)
        # The client sent it again of itself: each response an attempt, the last one goes on.
        attempt = self._resent() if door.resends else self
        status = got.outcome.status
        if 300 <= status < 400 and followed(got.response, request):
            attempt.state, attempt.hop_status = "redirected", status
            return attempt, got
        if sending.sse is not None and status == 0 and got.outcome.effect == "unknown":
            got = await attempt._answer_on_connection(http, got, request)
        if attempt.state == "sending":  # -> EXCHANGED (else cut short already: not this request's record)
            ended_ns = time.time_ns()
            attempt.state, attempt.got, attempt.outcome = "exchanged", got, got.outcome
            attempt.ended_ns = ended_ns
            # What its POST came to, as the HTTP conventions say it, where its exchange ended.
            attempt.http_attributes = attempt.owner.runtime.instruments.http.exchanged(
                got.outcome.status, got.version, got.error, attempt.span, ended_ns, attempt.timed
            )
            if got.watch is not None and isinstance(sending.on_network, Declined):
                attempt.declined_on_cut = sending.on_network.reason  # a cut of its stream: not repeated
        return attempt, got

    def close(self, decision: Wait | Declined | None) -> None:
        """EXCHANGED -> DONE with the policy's decision: a wait (it was repeated after it: the next
        attempt waited it out, `open_attempt`), why it is not repeated, or None (it did not fail);
        or -> AWAITING when its answer is still to come on a stream."""
        if self.state != "exchanged":
            return  # a redirect the client follows, or cut short already
        if decision is not None:  # (none: its wait is 0, and it is not declined)
            if isinstance(decision, Wait):
                self.wait_ms = decision.ms
            else:
                self.declined = decision.reason
        outcome, got, ledger = self.outcome, self.got, self.owner.ledger
        # What its exchange showed, written to the ledger once.
        if outcome.failure is not None:
            self.repeated = self.declined is None
            if outcome.failure == "network" and outcome.effect != "none":  # (at an exchange's end)
                ledger.unanswered = True  # no whole response: none at all, or its body cut
        if got.version is not None:
            ledger.http_version = got.version
        if outcome.answered:
            ledger.answer = "error" if outcome.failure == "error" else "result"
        ledger.final_error = got.error  # the final error is the latest attempt's (None: a response)
        if not self.repeated and outcome.status and got.error is None and ledger.delivered is None:
            # The attempt the SDK was handed: the first word stands. A response whose body was cut
            # (an error with a status) is never handed on (the SDK gets the error, or what ends
            # this one call).
            ledger.delivered = outcome.status
        if outcome.effect is not None:
            self._done()
            return
        self.state = "awaiting"
        watch = got.watch
        answer = watch.answer if watch is not None else None
        if answer is not None or self.owner.heard is not None:  # it came already (read ahead, or SSE)
            self._done(heard=True)

    def heard(self, *, lost: bool | None = None) -> None:
        """Its connection's own stream (legacy SSE) carried its request's answer, which its call
        keeps (`heard`): a POST cut before its response waits for it no longer; or (`lost` not None)
        that stream ended (`lost`: was lost) before it: it never comes, and it is settled now. What
        its own event stream says, its watch keeps (wire.RequestWatch): both are read as it is
        settled (`_done`), so that its stream's news never calls it meanwhile."""
        if lost is not None:
            self.stream_cut = lost
            self.abandon()
        elif self._answer_seen is not None:
            self._answer_seen.set()

    def abandon(self) -> None:
        """Its request ended with it open: sent and unanswered, or never to be repeated."""
        if self.state == "redirected":  # the redirect was not followed after all
            self.state = "sending"
            self._exchanged(classify(self.hop_status, None))
            self.close(None)
        elif self.state == "sending":  # a cancel or a read timeout mid-exchange: the caller's
            door = self.door
            attempt = self._resent() if door is not None and door.resends else self
            if door is None or not door.hops:
                attempt._exchanged(classify(0, None, sent=False))  # never sent
                attempt.close(None)
                return
            # Sent, and given up before any response: the caller's timeout is no failure below the
            # SDK (`network`), so it is `error` (the law's word for anything else), as it is when the
            # caller gives up after the response's headers came (below) and over stdio: one word.
            attempt._exchanged(GIVEN_UP)
            attempt.owner.ledger.unanswered = True
            attempt.close(NOT_RETRYABLE)
        elif self.state == "exchanged":  # its policy not yet told, or waiting to repeat it
            self.close(BUDGET)
            if self._repeat_due is not None:
                self._repeat_due.set()
        elif self.state == "awaiting":  # its answer never came: its effect is unknown
            self._done(heard=True)

    # -- within --

    async def _answer_on_connection(self, http: HttpLibrary, got: Exchange, request: object) -> Exchange:
        """A POST cut after the server took it (legacy SSE): its answer may come on the connection's
        own stream all the same, within a grace; an answer seen is the answer, whichever was told
        first (the POST got none)."""
        if self.owner.heard is None:
            self._answer_seen = anyio.Event()
            with anyio.move_on_after(SSE_ANSWER_GRACE_S):
                await self._answer_seen.wait()
        heard = self.owner.heard
        if heard is None:
            return got
        return Exchange(got.outcome.after_stream(heard), http.module.Response(202, request=request), None)

    def _resent(self) -> Attempt:
        """The HTTP client sent this attempt's request again of itself (its auth flow, after a 401):
        each response it had before is an attempt of its own, filed as one and ended as the re-send
        began; each re-send is a new attempt, sent by the app's own client (permission `app`, on
        what that response was), begun then, through the same door. Returns the latest, open."""
        door = self.door
        assert door is not None
        resends, door.resends = door.resends, ()
        attempt, owner = self, self.owner
        for status, at_ns in resends:
            # The response went back to the flow: no answer reached the SDK.
            outcome = classify(status, "other")
            attempt._exchanged(outcome, at_ns)
            attempt.close(None)  # repeated, by the client: not declined
            attempt = Attempt(owner, Permission("app", outcome.failure or "error"), at_ns)
            attempt.door = door
        return attempt

    def _exchanged(self, outcome: Outcome, ended_ns: int | None = None) -> None:
        """SENDING -> EXCHANGED without a response's facts (never sent, given up, a client's
        re-send, no HTTP at all), ended now or at `ended_ns`: what it came to is written to the
        ledger as it closes, and said as the HTTP conventions say it now."""
        if self.state != "sending":  # (else cut short already: not this request's record)
            return
        ended_ns = time.time_ns() if ended_ns is None else ended_ns
        self.state, self.got, self.outcome, self.ended_ns = "exchanged", _NOT_EXCHANGED, outcome, ended_ns
        http = self.owner.runtime.instruments.http
        self.http_attributes = http.exchanged(outcome.status, None, None, self.span, ended_ns, self.timed)

    def _done(self, *, heard: bool = False) -> None:
        """-> DONE: its span ended, its row written, it is counted, once. `heard`: it was AWAITING its
        answer, and what its streams said of it is read now: its own stream's watch (the answer, or
        its cut), else its connection's (its call's `heard`); none: it never came."""
        self.state = "done"
        owner, outcome = self.owner, self.outcome
        ledger = owner.ledger
        if heard:  # (read here, where its end goes on: nothing of the attempt's is called after it)
            watch = self.got.watch
            answer = watch.answer if watch is not None else None
            if answer is None:
                answer = owner.heard
            if answer is not None:
                ledger.answer = answer
            elif watch is not None and watch.cut is not None:  # its stream was cut before it
                if self.declined_on_cut is not None:
                    self.declined = self.declined_on_cut
                ledger.final_error = watch.cut
                self.stream_cut = True
            outcome = self.outcome = outcome.after_stream(answer, cut=self.stream_cut and answer is None)
            if answer is None and outcome.failure == "error" and self.declined is None:
                self.declined = "not-retryable"  # a response without its answer: the law's `error`
        failure, effect, declined, repeated = outcome.failure, outcome.effect, self.declined, self.repeated
        assert effect is not None
        # Its span's last attributes and its count's, each fact written in both as it is read.
        attributes: Attributes = {**self.http_attributes, t.EFFECT: effect}
        metric: dict[str, str] = {t.GEN_AI_TOOL_NAME: owner.tool}
        if failure is not None:
            attributes[t.FAILURE] = metric[t.FAILURE] = failure
            self.span.set_status(Status(StatusCode.ERROR))
        permission = self.permission
        by: AttemptPermission
        if permission is None:
            by = "first"
        else:
            by = metric[t.PERMISSION_BY] = permission.by
        if declined is not None:
            attributes[t.DECLINED] = metric[t.DECLINED] = declined
        if repeated:
            attributes[t.WAIT_MS] = self.wait_ms
        self.span.set_attributes(attributes)  # one call: the SDK locks per call
        self.span.end(end_time=self.ended_ns or None)
        ledger.rows += (AttemptRow(outcome.status, failure or "", effect, by, self.wait_ms),)
        if effect != "none":
            ledger.sent += 1
        ledger.effect = SERIES_EFFECT[ledger.effect, effect]  # uncertainty survives
        instruments = owner.runtime.instruments
        instruments.attempts.add(1, metric)
        if repeated:
            instruments.wait.record(self.wait_ms / 1000.0, {t.GEN_AI_TOOL_NAME: owner.tool})


_HTTP_INSTRUMENTATION = "opentelemetry.instrumentation.httpx"


def _http_instrumented() -> bool:
    """Whether the installed line's HTTP client instrumentation is on (its instrumentor's singleton
    says so; never imported here: an app that did not import it has none on)."""
    module = sys.modules.get(_HTTP_INSTRUMENTATION)
    instrumentor = getattr(getattr(module, LINE.http_instrumentor, None), "_instance", None)
    return instrumentor is not None and instrumentor.is_instrumented_by_opentelemetry is True
