"""One tool call: the request it sent, its attempts (attempt.py), its record, and how it ends.

The rule: a call is given up (`abandon`) when the caller has its outcome or stopped waiting:
nothing more is sent for it, and an attempt still open is settled as what is known of it. It ends
in one place (`ended`): its record filed once, from its request's ledger (ledger.RequestReplay,
which its attempts write and it only reads), its request's point of the operation duration, and
its span's outcome (call_span.CallSpan.end), or its app's call's, which it is a round of
(rounds.py). Nothing here reads a value of the call: no arguments, no result, no key, no URL path.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable
from typing import Any, Final

import anyio

from otel_mcp_replay import telemetry as t
from otel_mcp_replay.answers import answer_of
from otel_mcp_replay.attempt import Attempt, open_attempt
from otel_mcp_replay.call_span import (
    CallSpan,
    Route,
    error_type,
    record_operation,
    type_name,
)
from otel_mcp_replay.call_span import hashed_session_id as hashed_session_id
from otel_mcp_replay.call_span import route_of as route_of
from otel_mcp_replay.declaration import COMPATIBILITY, Declaration
from otel_mcp_replay.endpoints import LOCAL_ENDPOINT, UNKNOWN_ENDPOINT
from otel_mcp_replay.errors import UnknownEffectError, lost_answer
from otel_mcp_replay.evidence import Answer, classify
from otel_mcp_replay.guard import CONFIRMED
from otel_mcp_replay.ledger import RequestReplay, series_effect
from otel_mcp_replay.lines import LINE, http_instrumented, verdict_of
from otel_mcp_replay.record import RecordRefused, call_record
from otel_mcp_replay.rounds import AppCall as AppCall
from otel_mcp_replay.runtime import Runtime
from otel_mcp_replay.telemetry import CallDeclinedReason, CallVerdict, Effect, TaskStatus

# The call in progress in this context: set by the call_tool seam, read by the HTTP and stdio seams
# (the SDK carries the context into the task that sends the request).
CURRENT_CALL: contextvars.ContextVar[ToolCall | None] = contextvars.ContextVar(
    "otel_mcp_replay_call", default=None
)

# The request id of a call none of whose requests was seen (its record and span say it).
UNKNOWN_REQUEST_ID: Final = "unknown"


class CallTask:
    """A task-backed call's task (tasks.py): its id as the server named it (never exported), its
    keyed hash as the record says it, the last status seen of it, and the error.type of a task that
    ended failed or cancelled."""

    __slots__ = ("failure", "hash", "id", "status")

    def __init__(self, task_id: str, hashed: str, status: TaskStatus) -> None:
        self.id, self.hash, self.status = task_id, hashed, status
        self.failure: str | None = None


class ToolCall:
    """One `call_tool`: its span, the request it sent, its attempts, and how it ends.

    Its request's replay facts are its ledger's (`ledger`, ledger.RequestReplay), written by its
    attempts; the seams tell the call what they saw through its named steps. Not thread-safe: one
    call's owners take turns on one event loop.
    """

    # What most calls never change starts as a class attribute (one store fewer per call each).
    # The request, once the HTTP seam saw it leave (bind):
    declaration: Declaration | None = None
    endpoint = UNKNOWN_ENDPOINT  # the declared label, else the origin: never a path
    attempt: Attempt | None = None  # the open one
    abandoned = False
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
    refusal: Any = None  # the error status response the SDK was handed (its body may be a JSON-RPC error)
    server_code: int | None = None  # the JSON-RPC error code the server failed it with, if it did
    task: CallTask | None = None  # a task-backed call's task (tasks.py)
    local = False  # it went another way than HTTP (stdio, in-process)

    def __init__(
        self,
        runtime: Runtime,
        tool: str,
        session: object,
        app_call: AppCall | None = None,
        *,
        continues: bool = False,  # it continues its app's call's latest round (never a repeat of it)
    ) -> None:
        self.runtime = runtime
        self.tool = tool
        self.session = session
        # Read here, in the caller's context: mcp 1.x sends the request from its transport's task.
        if continues or CONFIRMED.get():
            self.repeat_confirmed = True
        self.started_ns = time.perf_counter_ns()  # its request's operation duration (a round's own)
        if app_call is None:
            self.call_span = CallSpan(runtime.tracer, tool)
        else:  # a round of the app's call: its span, its next round number
            self.app_call = app_call
            self.round, self.call_span = app_call.next_round()
        self.ledger = RequestReplay()

    def bind(self, request_id: object, declaration: Declaration, endpoint: str, route: Route) -> None:
        """The HTTP seam saw this call's request leave, under `declaration`, by `route`."""
        self.declaration, self.endpoint = declaration, endpoint
        ledger = self.ledger
        ledger.id = request_id
        ledger.records_http_duration = http_instrumented()
        self.call_span.route = route  # its span says it as the call ends, in one write
        if self.session is not None:
            self.runtime.session_endpoints[self.session] = (declaration, endpoint)

    # -- what the seams tell it --

    def sent_as(self, request_id: object) -> None:
        """Its request left under `request_id` by a way the HTTP seam does not see (stdio)."""
        self.ledger.id = request_id

    def fingerprinted(self, fingerprint: bytes | None) -> None:
        """The repeat guard's hash of it (a changing call without its key), told as it ends."""
        self.fingerprint = fingerprint

    def stoppable_in(self, scope: anyio.CancelScope) -> None:
        """The SDK's call runs in `scope`, which `stop` cancels."""
        self.scope = scope

    def refused_with(self, response: Any) -> None:
        """The series hands the SDK this error status response (its body is read as the call ends)."""
        self.refusal = response

    @property
    def app_authorized(self) -> bool:
        """Its series runs under `app-authorized` (the declaration it was bound under says so)."""
        declaration = self.declaration
        return declaration is not None and declaration.policy == "app-authorized"

    # -- its answer, on the connection's own stream --

    def answered(self, kind: Answer) -> None:
        """The answer to this call's request was seen on the connection's own stream (SSE)."""
        if self.attempt is not None:
            self.attempt.heard(kind)
        else:
            self.ledger.answer_came = True

    def connection_ended(self, cut: bool) -> None:
        """The connection's own stream (SSE) ended (`cut`: was lost) before this call's answer came:
        it never will."""
        if self.attempt is not None:
            self.attempt.heard(None, lost=cut)

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
            self.call_span.span.set_attribute(t.DECLINED, declined)
        if self.scope is not None:
            self.scope.cancel()

    def handled(self) -> None:
        """The SDK is done reading this call's response without tearing the session down (mcp 1.x
        tells it: patches/carrier.py). A 2xx whose answer never came leaves the SDK's call waiting,
        for its read timeout or for ever; where the caller is owed `UnknownEffectError`
        (app-authorized), the call is ended now."""
        attempt = self.attempt
        # An event stream's missing answer is known only once its watch saw the SDK read it to the end.
        watch = attempt.watch if attempt is not None else None
        seen = watch is None or watch.ended
        ledger = self.ledger
        if not self.abandoned and self.app_authorized and ledger.accepted_without_answer and seen:
            self.stop(ledger.final_error if ledger.final_error is not None else lost_answer())

    # -- the end --

    def completed(self, result: Any) -> None:
        """The SDK returned `result`: settle, file the record, end the span."""
        self.abandon()
        verdict, claimed = verdict_of(result)
        if self.app_call is not None and claimed:
            # A client extension's own shape: its claim's resolver finishes it after this returns, so
            # the round is filed as the app's call ends (AppCall.ended): failed if the resolver raised.
            self.ended(verdict, None, filed=False)  # its request itself was answered
            return
        self.ended(verdict, t.TOOL_ERROR if verdict == "tool-error" else None)

    def settled(self, verdict: CallVerdict, *, may_have_run: bool = False) -> None:
        """Its result came (`verdict` says how the call ended): file it; tell the repeat guard, and
        nothing more (its request's end and its span's are told apart)."""
        self.ended(verdict, None, may_have_run=may_have_run, request=False, ends=False)

    def task_ended(self, verdict: CallVerdict, error: BaseException | None = None) -> None:
        """Its task reached its terminal status (`verdict` says how; its task's `failure` its
        error.type, `server_code` its JSON-RPC code), or its call failed with `error` while polling it
        (an UnknownEffectError: it may have run): settled and ended, or with the app's call it is a
        round of (rounds.py), whose span ends with this verdict. Its request was timed as it ended."""
        if not self.call_span.span.is_recording():  # an outer span, which timed its creating request, ended
            self.call_span.outlives_its_request(self.runtime.tracer, self.tool)
        if error is not None:
            failure_type: str | None = type_name(error)
        else:
            failure = self.task.failure if self.task is not None else None
            failure_type = t.TOOL_ERROR if verdict == "tool-error" else failure
        app_call = self.app_call
        may_have_run = isinstance(error, UnknownEffectError)
        self.ended(verdict, failure_type, may_have_run=may_have_run, request=False, ends=app_call is None)
        if app_call is not None:  # filed: its app's call ends the span with this verdict
            app_call.last, app_call.unfiled = (self, verdict), None
            app_call.effect = series_effect(app_call.effect, self.effect)

    @property
    def effect(self) -> Effect:
        """What is known of its effect: its request's (its ledger's); a task-backed call that ended
        as one that may have run (its task's terminal status unseen): unknown, the task may run."""
        if self.task is not None and self.ledger.may_have_run:
            return "unknown"
        return self.ledger.effect

    def failed(self, exc: BaseException) -> BaseException | None:
        """The SDK's call ended with `exc`: settle and file. Returns what the caller sees instead of
        `exc` (None: `exc` itself). A caller's own cancellation or timeout is never replaced."""
        self.abandon()
        seen: BaseException | None = None
        ledger = self.ledger
        # The caller's own: its cancellation, or the SDK's error for its read timeout.
        cancelled = isinstance(exc, anyio.get_cancelled_exc_class()) or LINE.is_callers_timeout(exc)
        stopped = self.stopped_with
        refused = stopped is not None and not ledger.rows  # refused before anything was sent
        # A caller that gave up sees its own cancellation, never "may have run".
        uncertain = not refused and ledger.uncertain(self.app_authorized) and not cancelled
        if refused:
            seen = None if cancelled else stopped
        elif uncertain:
            seen = UnknownEffectError(self.tool)
            seen.__cause__ = ledger.final_error if ledger.final_error is not None else exc
        elif stopped is not None and not cancelled:
            seen = stopped  # the server's refusal, which the SDK would not have raised in time
        self.server_code = self._server_code(exc) if seen is None else None
        failure_type = error_type(seen or exc, self.server_code)
        # Its request was attempted (one refused before it was sent is no request, and arms nothing).
        self.ended(
            "failed", failure_type, may_have_run=uncertain, request=bool(ledger.rows), guard=not refused
        )
        return seen

    def _server_code(self, exc: BaseException) -> int | None:
        """The JSON-RPC error code of the SDK's `exc` when the server answered this call with that
        error (on its 2xx stream, or in an error status's body the SDK read), else None: the SDK's
        own errors (a timeout, a closed connection, a status's stand-in) are no server's code."""
        code = getattr(getattr(exc, "error", None), "code", None)
        if type(code) is not int or not isinstance(exc, LINE.error_base()):
            return None
        if self.ledger.error_answered:
            return code
        refusal = self.refusal
        try:
            body = refusal.content if refusal is not None else None
        except Exception:  # not read by the SDK: no answer it could have raised
            return None
        found = answer_of(body) if body else None
        return code if found is not None and found[1] == "error" else None

    def ended(
        self,
        verdict: CallVerdict,
        failure_type: str | None,
        *,
        may_have_run: bool = False,
        filed: bool = True,  # its record filed (from its ledger), once
        guard: bool = True,  # the repeat guard told how it ended
        request: bool = True,  # its request's point of the operation duration
        ends: bool = True,  # its span's outcome written, and the span ended (or its app's call told)
    ) -> None:
        """The one end of a call, and of each part of it: its record, the repeat guard, its request's
        operation point, its span (call_span.CallSpan.end, the call counted there) or, for a round,
        its app's call told (rounds.AppCall.round_ended), which writes the span once."""
        ledger = self.ledger
        if filed:
            self._file(verdict, may_have_run)
            if guard and self.fingerprint is not None and self.runtime.guard is not None:
                failed = verdict == "failed"
                self.guard_armed = self.runtime.guard.ended(self.fingerprint, self.effect, failed=failed)
        if request:
            code = self.server_code if failure_type is not None else None
            route, runtime = self.call_span.route, self.runtime
            http_version = ledger.http_version
            record_operation(
                runtime, self.tool, self.started_ns, route, failure_type, code, http_version, self.local
            )
        if not ends:
            return
        if self.app_call is not None:
            self.app_call.round_ended(self, verdict, filed=filed)
            return
        policy, effect = (self.declaration or COMPATIBILITY).policy, self.effect
        outcome: dict[str, str | int | bool] = {
            t.JSONRPC_REQUEST_ID: str(ledger.id),
            t.POLICY: policy,
            t.SENT: ledger.sent,
            t.EFFECT: effect,
            t.VERDICT: verdict,
            t.MAY_HAVE_RUN: ledger.may_have_run,
        }
        metric = {t.VERDICT: verdict, t.EFFECT: effect, t.POLICY: policy, t.GEN_AI_TOOL_NAME: self.tool}
        code, http_version = self.server_code, ledger.http_version
        self.call_span.end(self.runtime, metric, outcome, failure_type, code, http_version, self.local)

    def _file(self, verdict: CallVerdict, may_have_run: bool) -> None:
        """Its record, built from its ledger and filed once, vouched for to the redaction; a record
        that cannot be filed never breaks the caller's call."""
        ledger, task = self.ledger, self.task
        ledger.may_have_run = may_have_run
        if task is not None and self.session is not None:  # its task's polls end with it
            open_calls = self.runtime.open_tasks.get(self.session)  # tasks.OpenCalls
            if open_calls is not None:
                open_calls.discard(self)
        span = self.call_span.span
        try:
            if self.declaration is None:
                self._without_http(verdict)
            record = call_record(
                policy=(self.declaration or COMPATIBILITY).policy,
                sent=ledger.sent,
                effect=self.effect,
                verdict=verdict,
                may_have_run=may_have_run,
                endpoint=self.endpoint,
                tool=self.tool,
                request_id=str(ledger.id),
                rows=ledger.rows,
                call_round=self.round,
                task=None if task is None else (task.hash, task.status),
            )
            self.runtime.file_record(span, record)
        except RecordRefused:  # e.g. a tool name with control characters: refused whole, never trimmed
            span.add_event(t.RECORD_REFUSED_EVENT)
            self.runtime.instruments.records_refused.add(1)
        except Exception:  # the record must never break the caller's call
            self.runtime.logger.exception("otel-mcp-replay: could not file the request_attempts record")

    def _without_http(self, verdict: CallVerdict) -> None:
        """No HTTP request of this call was seen. Failed before anything left: nothing sent, effect
        none, under its session's known policy and endpoint. Else it went another way (stdio,
        in-process): one attempt, never repeated, as it ran."""
        ledger = self.ledger
        if ledger.id is None and verdict == "failed":
            known = self.runtime.session_endpoints.get(self.session) if self.session is not None else None
            if known is None:
                known = (COMPATIBILITY, UNKNOWN_ENDPOINT)
            self.declaration, self.endpoint = known
            ledger.id = UNKNOWN_REQUEST_ID
            return
        if ledger.id is None:
            ledger.id = UNKNOWN_REQUEST_ID
        self.endpoint, self.local = LOCAL_ENDPOINT, True
        applied = verdict != "failed"
        # No HTTP status: 0; the call's own end is its one attempt's outcome.
        open_attempt(self, None).close(
            0, None if applied else "not-retryable", classify(0, "result" if applied else "other")
        )
