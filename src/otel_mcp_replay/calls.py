"""One tool call's facts, shared by the call, its series and the ledger: each written by its owner.

The call (the `call_tool` patch) opens the call's span and settles the verdict; the series (the
httpx2 patch) opens and closes attempts; the ledger notes the answer it saw. They meet in this
object, which rides the call's context into the task that POSTs it. Nothing here reads a value of
the call: no arguments, no result, no key, no URL path.
"""

from __future__ import annotations

import contextvars
import time
import weakref
from dataclasses import dataclass

import anyio
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from otel_mcp_replay import telemetry as t
from otel_mcp_replay.declaration import COMPATIBILITY, Declaration
from otel_mcp_replay.law import CallVerdict, Effect, FailureKind, Permission, RequestFacts, SeriesKnowledge
from otel_mcp_replay.ledger import Answer
from otel_mcp_replay.record import AttemptRow, RecordRefused, build_record, is_vouching, vouch
from otel_mcp_replay.runtime import Runtime, count_refused
from otel_mcp_replay.series import Outcome

# What each session's sent calls were declared under: a call given up before it was sent files
# its record under the same policy and endpoint. Weak: a session gone is forgotten.
SESSION_ENDPOINTS: weakref.WeakKeyDictionary[object, tuple[Declaration, str]] = weakref.WeakKeyDictionary()

# The call in progress in this context: set by the call_tool patch, read by the httpx2 patch.
CURRENT_CALL: contextvars.ContextVar[CallState | None] = contextvars.ContextVar(
    "otel_mcp_replay_call", default=None
)


@dataclass
class _Open:
    """The attempt being made or waiting for its answer."""

    number: int
    permission: Permission | None
    span: Span
    outcome: Outcome | None = None  # set when its exchange ended
    wait_ms: int = 0
    declined: str | None = None
    repeated: bool = False  # a repeat followed this attempt (its wait is written, even when 0)


class ToolRequest:
    """The series of one `tools/call` request: its attempts, its facts, what is known of its effect."""

    def __init__(self, call: CallState, request_id: object, declaration: Declaration, endpoint: str) -> None:
        self.call = call
        self.request_id = request_id
        self.declaration = declaration
        self.endpoint = endpoint  # the declared label, else the origin: never a path
        self.facts = RequestFacts(request_id if isinstance(request_id, int | str) else str(request_id), True)
        if declaration.policy == "app-authorized":
            self.facts.app_authorized_policy()
        self.knowledge = SeriesKnowledge()
        self.rows: list[AttemptRow] = []
        self.attempts = 0
        self._open: _Open | None = None
        self._early_answer: Answer | None = None  # an answer that beat its attempt's close (SSE transport)
        self.final_error: BaseException | None = None
        self.sse_key: tuple[int, object] | None = None  # where the SSE ledger waits for its answer

    # -- the series writes these (AttemptLog) --

    def opened(self, number: int, permission: Permission | None) -> None:
        self.attempts += 1
        number = self.attempts  # a redirect's follow-up continues the numbering
        call = self.call
        attributes: dict[str, str | int] = {
            t.MCP_METHOD_NAME: "tools/call",
            t.GEN_AI_TOOL_NAME: call.tool,
            t.JSONRPC_REQUEST_ID: str(self.request_id),
            t.ATTEMPT: number,
        }
        if number > 1:
            attributes[t.HTTP_RESEND_COUNT] = number - 1
        if permission is not None:
            attributes[t.PERMISSION_BY] = permission.by
            attributes[t.PERMISSION_ON] = permission.on
            if permission.assumes is not None:
                attributes[t.PERMISSION_ASSUMES] = permission.assumes
        span = call.runtime.tracer.start_span(
            f"{t.ATTEMPT_SPAN_PREFIX} {call.tool}",
            context=call.context,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
        )
        self._open = _Open(number, permission, span)

    def exchanged(self, outcome: Outcome) -> None:
        """The attempt's exchange ended (before any wait): what it sent is counted now."""
        current = self._open
        if current is None or current.outcome is not None:
            return  # cut short already: what it does now is not this call's record
        current.outcome = outcome
        if outcome.effect != "none":
            self.facts.sent_one()
        if outcome.failure == "network" and outcome.status == 0 and outcome.effect != "none":
            self.facts.no_answer()
        if outcome.error is not None:
            self.final_error = outcome.error

    def closed(self, outcome: Outcome, *, wait_ms: int, declined: str | None) -> None:
        current = self._open
        if current is None:
            return
        current.outcome, current.wait_ms, current.declined = outcome, wait_ms, declined
        current.repeated = outcome.failure is not None and declined is None
        if not current.repeated and outcome.status:  # the attempt the SDK was handed
            self.facts.delivered_status(outcome.status)
        if outcome.effect is None:  # delivered; the answer is still to come on a stream
            if self._early_answer is not None:
                self.answered(self._early_answer)
            return
        self._finish(current)

    def cut_short(self) -> None:
        """The call ended while the open attempt's exchange was under way (a cancel, a read
        timeout): it was sent, and no answer came. Whatever it does later is not recorded."""
        current = self._open
        if current is None or current.outcome is not None:
            return
        outcome = Outcome(0, "network", "unknown", ended_ns=time.time_ns())
        self.exchanged(outcome)
        self.closed(outcome, wait_ms=0, declined="budget")

    def attempt_context(self) -> Context | None:
        """The context that makes the open attempt's span the parent of the HTTP client's span."""
        current = self._open
        return None if current is None else trace.set_span_in_context(current.span)

    # -- the ledger writes these --

    def answered(self, kind: Answer) -> None:
        """The JSON-RPC response to this request's id was seen."""
        self.facts.answered()
        current = self._open
        if current is None or current.outcome is None or current.outcome.effect is not None:
            self._early_answer = kind
            return
        if kind == "result":
            current.outcome.failure, current.outcome.effect = None, "applied"
        else:
            current.outcome.failure, current.outcome.effect = "error", "unknown"
        self._finish(current)

    def stream_ended(self, error: BaseException | None) -> None:
        """The delivered attempt's stream ended; if its answer never came, its effect is unknown."""
        current = self._open
        if current is None or current.outcome is None or current.outcome.effect is not None:
            return
        current.outcome.failure, current.outcome.effect = "network", "unknown"
        if error is not None:
            self.final_error = error
        self._finish(current)

    # -- the call writes these --

    def settle_open(self) -> None:
        """The call ended: an attempt still under way, or waiting for its answer, never got it; one
        waiting to be repeated will not be."""
        current = self._open
        if current is None:
            return
        if current.outcome is None:
            self.cut_short()
        elif current.outcome.effect is None:
            self.stream_ended(None)
        else:
            self.closed(current.outcome, wait_ms=0, declined="budget")

    def _finish(self, current: _Open) -> None:
        outcome = current.outcome
        assert outcome is not None and outcome.effect is not None
        self._open = None if self._open is current else self._open
        self.knowledge.note(outcome.effect)
        span = current.span
        attributes: dict[str, str | int] = {t.EFFECT: outcome.effect}  # one call: the SDK locks per call
        if outcome.status:
            attributes[t.HTTP_STATUS_CODE] = outcome.status
        if outcome.failure is not None:
            attributes[t.FAILURE] = outcome.failure
            span.set_status(Status(StatusCode.ERROR))
        if current.declined is not None:
            attributes[t.DECLINED] = current.declined
        if current.repeated:
            attributes[t.WAIT_MS] = current.wait_ms
        span.set_attributes(attributes)
        span.end(end_time=outcome.ended_ns or None)
        permission = current.permission
        self.rows.append(
            AttemptRow(
                status=outcome.status,
                failure=outcome.failure or "",
                effect=outcome.effect,
                permission="first" if permission is None else permission.by,
                wait_ms=current.wait_ms,
            )
        )
        self.call.counted(outcome.failure, permission, current.declined, current.wait_ms, current.repeated)


def file_record(span: Span, record: dict[str, AttributeValue]) -> None:
    """Add build_record's `record` to the call's span, vouched for as stored (see record.vouch)."""
    span.add_event(t.RECORD_EVENT, record)
    if is_vouching():
        events = getattr(span, "events", None)  # an SDK span's; a non-recording one has none
        if events:
            vouch(events[-1].attributes, record)


@dataclass(eq=False)
class CallState:
    """One `call_tool`: its span, the request it sent, and how it can be given up."""

    runtime: Runtime
    tool: str
    span: Span
    context: Context | None = None  # the OTel context whose current span is the call's
    request: ToolRequest | None = None
    given_up: bool = False  # the caller has its outcome, or gave up: nothing more is sent for it
    _given_up_event: anyio.Event | None = None  # made by the first wait that needs one
    scope: anyio.CancelScope | None = None
    unavailable: bool = False
    local_request_id: object = None  # the id a non-HTTP transport (stdio) sent the call under
    session: object = None  # the ClientSession the call was made on
    failed_without_answer: BaseException | None = None

    def give_up(self) -> None:
        """The call ended: a series waiting to repeat it stops waiting, and sends nothing more."""
        self.given_up = True
        if self._given_up_event is not None:
            self._given_up_event.set()

    async def wait_unless_given_up(self, delay_ms: int) -> bool:
        """Sleep `delay_ms`; False (at once) when the call is given up first, or already was."""
        if self.given_up:
            return False
        event = self._given_up_event
        if event is None:  # most calls never wait: the event is made only here
            event = self._given_up_event = anyio.Event()
        with anyio.move_on_after(delay_ms / 1000):
            await event.wait()
            return False
        return True

    def bind(self, request_id: object, declaration: Declaration, endpoint: str) -> ToolRequest:
        self.request = ToolRequest(self, request_id, declaration, endpoint)
        if self.session is not None:
            SESSION_ENDPOINTS[self.session] = (declaration, endpoint)
        self.span.set_attributes({t.JSONRPC_REQUEST_ID: str(request_id), t.POLICY: declaration.policy})
        return self.request

    def counted(
        self,
        failure: FailureKind | None,
        permission: Permission | None,
        declined: str | None,
        wait_ms: int,
        repeated: bool,
    ) -> None:
        attributes: dict[str, str] = {t.GEN_AI_TOOL_NAME: self.tool}
        if failure is not None:
            attributes[t.FAILURE] = failure
        if permission is not None:
            attributes[t.PERMISSION_BY] = permission.by
        if declined is not None:
            attributes[t.DECLINED] = declined
        instruments = self.runtime.instruments
        instruments.attempts.add(1, attributes)
        if repeated:
            instruments.wait.record(wait_ms / 1000.0, {t.GEN_AI_TOOL_NAME: self.tool})

    def fail_without_answer(self, error: BaseException) -> None:
        """The series gave up on an attempt with no answer, on a transport where the SDK would wait
        for one forever (SSE): end this call now, and only this call."""
        self.failed_without_answer = error
        if self.scope is not None:
            self.scope.cancel()

    def file(self, verdict: CallVerdict, may_have_run: bool) -> None:
        """Settle the call and add its one record to its span."""
        request = self.request
        if request is None and self.local_request_id is None and verdict == "failed":
            request = self._unsent_request()  # given up before anything we saw was sent
        elif request is None:
            request = self._local_request(verdict)
        else:
            request.settle_open()
        request.facts.settle(verdict, may_have_run)
        effect: Effect = request.knowledge.effect
        try:
            record = build_record(
                policy=request.declaration.policy,
                sent=request.facts.sent,
                effect=effect,
                verdict=verdict,
                may_have_run=may_have_run,
                endpoint=request.endpoint,
                tool=self.tool,
                request_id=str(request.request_id),
                rows=request.rows,
            )
        except RecordRefused:  # e.g. a tool name with control characters: refused whole, never trimmed
            self.span.add_event(t.RECORD_REFUSED_EVENT)
            count_refused()
        else:
            file_record(self.span, record)
        self.runtime.instruments.calls.add(
            1, {t.VERDICT: verdict, t.EFFECT: effect, t.POLICY: request.declaration.policy}
        )

    def _unsent_request(self) -> ToolRequest:
        """A call that failed before any request of it was seen leaving: nothing sent, effect none."""
        known = SESSION_ENDPOINTS.get(self.session) if self.session is not None else None
        declaration, endpoint = known if known is not None else (COMPATIBILITY, "unknown")
        request = ToolRequest(self, "unknown", declaration, endpoint)
        self.span.set_attributes({t.JSONRPC_REQUEST_ID: "unknown", t.POLICY: declaration.policy})
        return request

    def _local_request(self, verdict: CallVerdict) -> ToolRequest:
        """A call that sent no HTTP (stdio, in-process): one attempt, never repeated, as it ran."""
        request_id = self.local_request_id if self.local_request_id is not None else "unknown"
        request = ToolRequest(self, request_id, COMPATIBILITY, "local")
        self.span.set_attribute(t.JSONRPC_REQUEST_ID, str(request_id))
        self.span.set_attribute(t.POLICY, COMPATIBILITY.policy)
        request.opened(1, None)
        applied = verdict in ("completed", "tool-error")
        outcome = Outcome(
            status=0,
            failure=None if applied else "error",
            effect="applied" if applied else "unknown",
            ended_ns=time.time_ns(),
        )
        request.exchanged(outcome)
        if applied:
            request.facts.answered()
        request.closed(outcome, wait_ms=0, declined=None if applied else "not-retryable")
        return request
