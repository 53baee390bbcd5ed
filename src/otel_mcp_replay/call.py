"""One tool call, and an app's call of rounds: the request it sent, its attempts (attempt.py), and
how it ends.

The rule: a call ends in one place (`ToolCall.ended`), which reads its request's ledger
(ledger.RequestReplay, which its attempts write and it only reads) once into its `Ending`: its record
is filed from it, the repeat guard told, and its span's outcome and its point of the calls metric
are built from it (call_span.CallSpan.end), or from its app's call's, whose rounds it is one of
(SEP-2322: `AppCall`, one span and one count however many rounds). A call is given up (`abandon`)
when the caller has its outcome or stopped waiting: nothing more is sent for it, and an attempt
still open is settled as what is known of it. Nothing here reads a value of the call: no arguments,
no result, no key, no URL path.
"""

from __future__ import annotations

import contextvars
import sys
import time
from collections.abc import Callable
from typing import Any, Final, Protocol

import anyio

from otel_mcp_replay import telemetry as t
from otel_mcp_replay.attempt import Attempt
from otel_mcp_replay.call_span import AppCall, CallSpan, Ending, Route, error_type, record_operation
from otel_mcp_replay.call_span import hashed_session_id as hashed_session_id
from otel_mcp_replay.call_span import route_of as route_of
from otel_mcp_replay.declaration import COMPATIBILITY, Declaration
from otel_mcp_replay.endpoints import LOCAL_ENDPOINT, UNKNOWN_ENDPOINT
from otel_mcp_replay.errors import UnknownEffectError, lost_answer
from otel_mcp_replay.evidence import Answer, classify
from otel_mcp_replay.guard import CONFIRMED, CallGuard
from otel_mcp_replay.law import NOT_RETRYABLE
from otel_mcp_replay.ledger import SERIES_EFFECT, RequestReplay
from otel_mcp_replay.lines import LINE
from otel_mcp_replay.patches.wire import answer_of
from otel_mcp_replay.record import RecordRefused, call_record
from otel_mcp_replay.runtime import Runtime
from otel_mcp_replay.telemetry import CallDeclinedReason, CallVerdict, Effect, TaskStatus


class Task(Protocol):
    """What a call reads of its task, when it is task-backed (tasks.CallTask)."""

    @property
    def hash(self) -> str: ...  # its id's keyed hash, as the record says it

    @property
    def status(self) -> TaskStatus: ...  # the last status seen of it

    def let_go(self, call: ToolCall) -> None:
        """`call` ended: its task's polls are no longer its."""


# The call in progress in this context: set by the call_tool seam, read by the HTTP and stdio seams
# (the SDK carries the context into the task that sends the request).
CURRENT_CALL: contextvars.ContextVar[ToolCall | None] = contextvars.ContextVar(
    "otel_mcp_replay_call", default=None
)

# The request id of a call none of whose requests was seen (its record and span say it).
UNKNOWN_REQUEST_ID: Final = "unknown"


class ToolCall:
    """One `call_tool`: its span, the request it sent, its attempts, and how it ends.

    Its request's replay facts are its ledger's (`ledger`, ledger.RequestReplay), written by its
    attempts; the seams tell the call what they saw through its named steps. Not thread-safe: one
    call's owners take turns on one event loop.
    """

    # What most calls never change starts as a class attribute (one store fewer per call each).
    # The request, once the HTTP seam saw it leave (bind):
    request_id: object = None  # its JSON-RPC id
    declaration: Declaration | None = None
    heard: Answer | None = None  # its answer, as its connection's own stream (legacy SSE) carried it
    attempt: Attempt | None = None  # the latest
    abandoned = False  # given up: nothing more is sent for it
    scope: anyio.CancelScope | None = None  # set while the seam can stop the call
    stopped_with: BaseException | None = None  # why the seam stopped the call, if it did
    guarded: CallGuard | None = None  # what the repeat guard knows of it, when it has a word on it
    _releases: list[Callable[[], object]] | None = None
    app_call: AppCall | None = None  # the app's call this is a round of, when the SDK drives rounds
    refusal: Any = None  # the error status response the SDK was handed (its body may be a JSON-RPC error)
    task: Task | None = None  # a task-backed call's task (tasks.py)

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
        if continues or CONFIRMED.get():  # the repeat guard lets it go
            self.guarded = CallGuard(confirmed=True)
        self.started_ns = time.perf_counter_ns()  # its request's operation duration (a round's own)
        if app_call is None:
            self.call_span = CallSpan(runtime.tracer, tool)
        else:  # a round of the app's call: its span
            self.app_call = app_call
            self.call_span = app_call.next_round()
        self.ledger = RequestReplay()

    def bind(
        self, request_id: object, declaration: Declaration | None = None, route: Route | None = None
    ) -> None:
        """Its request left under `request_id`: seen by the HTTP seam, under `declaration`, by
        `route`; or (no declaration) by a way the HTTP seam does not see (stdio)."""
        self.request_id = request_id
        if declaration is None:
            return
        self.declaration = declaration
        self.call_span.route = route  # its span says it as the call ends, in one write

    # -- what the seams tell it --

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
        """The answer to this call's request was seen on the connection's own stream (SSE), or on a
        stream the client resumed for it: kept, for its attempt to read as it is settled; a POST
        still exchanging (cut before its response) is told now, for it waits for this."""
        if self.heard is None:
            self.heard = kind
        attempt = self.attempt
        if attempt is not None and attempt.state == "sending":
            attempt.heard()

    def connection_ended(self, cut: bool) -> None:
        """The connection's own stream (SSE) ended (`cut`: was lost) before this call's answer came:
        it never will."""
        attempt = self.attempt
        if attempt is not None and attempt.state != "done":
            attempt.heard(lost=cut)

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
        releases = self._releases
        if releases is not None:
            self._releases = None
            for release in releases:
                release()
        attempt = self.attempt
        if attempt is not None and attempt.state != "done":
            attempt.abandon()

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
        if attempt is not None and watch is not None and seen and attempt.state == "awaiting":
            attempt.abandon()  # its stream is over: settled as what it said
        ledger = self.ledger
        if not self.abandoned and self.app_authorized and ledger.accepted_without_answer and seen:
            self.stop(ledger.final_error if ledger.final_error is not None else lost_answer())

    # -- the end --

    def completed(self, result: Any) -> None:
        """The SDK returned `result`: it ends; a claimed result (a client extension's own shape,
        whose resolver finishes it after this returns) ends as its app's call does (AppCall.ended),
        its request timed now."""
        if self.app_call is not None:
            found = sys.modules.get("mcp_types")  # imported by the SDK that returned `result`
            if found is not None and not isinstance(
                result, (found.CallToolResult, found.InputRequiredResult)
            ):
                self.went_on()
                return
        if getattr(result, "result_type", None) == "input_required":  # SEP-2322: input asked first
            self.ended("input-required", None)
            return
        is_error = getattr(result, "is_error", None)  # 2.x; 1.x names it isError
        if is_error is None:
            is_error = getattr(result, "isError", False)
        if is_error is True:
            self.ended("tool-error", t.TOOL_ERROR)
        else:
            self.ended("completed", None)

    def failed(self, exc: BaseException) -> BaseException | None:
        """The SDK's call ended with `exc`: it ends. Returns what the caller sees instead of `exc`
        (None: `exc` itself). A caller's own cancellation or timeout is never replaced."""
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
        code = self._server_code(exc) if seen is None else None
        if not ledger.rows:  # never attempted (refused before it was sent): no request to time
            self.started_ns = 0
        self.ended("failed", error_type(seen or exc, code), may_have_run=uncertain, code=code)
        return seen

    def app_call_ended(self, error: BaseException | None, result: object) -> None:
        """Its app's call ended with it handed on unended (a claimed result, or a task still open):
        it ends now, failed if the app's call raised, else as its result says; a task's polls are
        no longer its."""
        if self.task is not None:
            self.task.let_go(self)
        if error is not None:
            self.ended("failed", error_type(error))
        elif getattr(result, "is_error", None) is True:
            self.ended("tool-error", t.TOOL_ERROR)
        else:
            self.ended("completed", None)

    def _server_code(self, exc: BaseException) -> int | None:
        """The JSON-RPC error code of the SDK's `exc` when the server answered this call with that
        error (on its 2xx stream, or in an error status's body the SDK read), else None: the SDK's
        own errors (a timeout, a closed connection, a status's stand-in) are no server's code."""
        code = getattr(getattr(exc, "error", None), "code", None)
        if type(code) is not int or not isinstance(exc, LINE.error_base()):
            return None
        if self.ledger.answer == "error":
            return code
        refusal = self.refusal
        try:
            body = refusal.content if refusal is not None else None
        except Exception:  # not read by the SDK: no answer it could have raised
            return None
        found = answer_of(body) if body else None
        return code if found is not None and found[1] == "error" else None

    def went_on(self) -> None:
        """Its request is over and the call goes on (a task, tasks.py; a claimed result): its
        attempts settled, its point of the operation duration now, once (`started_ns` 0: timed),
        and handed on to its app's call, which ends it if nothing else does (AppCall.ended)."""
        self.abandon()
        route = self.call_span.route
        local = route is None and self.declaration is None  # it went another way than HTTP
        http_version = self.ledger.http_version
        record_operation(self.runtime, self.tool, self.started_ns, route, None, None, http_version, local)
        self.started_ns = 0
        if self.app_call is not None:
            self.app_call.handed_on(self)

    def ended(
        self,
        verdict: CallVerdict,
        failure_type: str | None,
        *,
        may_have_run: bool = False,
        code: int | None = None,
    ) -> None:
        """The one end of a call, read in order: its `Ending` (`_ending`), and its record built from
        it and filed once (`_file_record`); the repeat guard told; its request's point of the operation
        duration, unless timed already; and its span's outcome and the calls metric built from it
        (CallSpan.end), or, for a round, its app's call told, which ends the span once."""
        ending = self._ending(verdict, failure_type, may_have_run, code)
        self._file_record(ending)
        runtime, guarded, app_call = self.runtime, self.guarded, self.app_call
        if guarded is not None and guarded.fingerprint is not None and self.ledger.rows:
            guard = runtime.guard  # (a call refused before it was sent arms nothing)
            if guard is not None:
                guarded.armed = guard.ended(guarded.fingerprint, ending.effect, failed=verdict == "failed")
        if self.started_ns:
            route, code, local = self.call_span.route, ending.code, ending.local
            record_operation(
                runtime, self.tool, self.started_ns, route, failure_type, code, ending.http_version, local
            )
        if app_call is None:
            self.call_span.end(runtime, self.tool, ending)
            return
        # A round: its app's call ends the span, with every round's sent and effect (counted once).
        if app_call.pending is self:  # counted as it was handed on
            app_call.pending = None
        else:
            app_call.sent += ending.sent
        app_call.ending, app_call.continues = ending, verdict == "input-required"
        app_call.effect = SERIES_EFFECT[app_call.effect, ending.effect]  # uncertainty survives

    def _ending(
        self, verdict: CallVerdict, failure_type: str | None, may_have_run: bool, code: int | None
    ) -> Ending:
        """How it ended, read once (asked first, before anything of others is called): its attempts
        settled (one still awaiting its answer reads what its streams said), and its ledger read into
        an `Ending`."""
        route, ledger, task = self.call_span.route, self.ledger, self.task
        # Where it went: its route's endpoint when the HTTP seam saw it (asked here: the usual case).
        endpoint, local = (route.record_endpoint, False) if route is not None else self._where(verdict)
        self.abandon()  # (a call ended already, as it failed: nothing more to settle)
        self.attempt = None  # its latest attempt, which refers back to it, let go with it
        # A task-backed call left before its task's end: unknown, its task may run on.
        effect: Effect = "unknown" if task is not None and may_have_run else ledger.effect
        return Ending(
            UNKNOWN_REQUEST_ID if self.request_id is None else str(self.request_id),
            (self.declaration or COMPATIBILITY).policy,
            ledger.sent,
            effect,
            verdict,
            may_have_run,
            failure_type,
            None if failure_type is None else code,
            ledger.http_version,
            local,
            endpoint,
        )

    def _file_record(self, ending: Ending) -> None:
        """Its record, built from `ending` and its ledger's rows, filed once where it went, vouched for
        to the redaction (a record that cannot be filed never breaks the caller's call)."""
        runtime, span, task, app_call = self.runtime, self.call_span.span, self.task, self.app_call
        try:
            record = call_record(
                policy=ending.policy,
                sent=ending.sent,
                effect=ending.effect,
                verdict=ending.verdict,
                may_have_run=ending.may_have_run,
                endpoint=ending.endpoint,
                tool=self.tool,
                request_id=ending.request_id,
                rows=self.ledger.rows,
                call_round=1 if app_call is None else app_call.rounds,  # (a round ends before the next)
                task=None if task is None else (task.hash, task.status),
            )
            runtime.file_record(span, record)
        except RecordRefused:  # e.g. a tool name with control characters: refused whole, never trimmed
            span.add_event(t.RECORD_REFUSED_EVENT)
            runtime.instruments.records_refused.add(1)
        except Exception:
            runtime.logger.exception("otel-mcp-replay: could not file the request_attempts record")

    def _where(self, verdict: CallVerdict) -> tuple[str, bool]:
        """Where its record says it went, and whether it went another way than HTTP. No HTTP request
        of it seen (it has no route: `_ending` reads a route's endpoint itself): failed before
        anything left, under its session's known policy and endpoint (nothing sent, effect none);
        else it went another way (stdio, in-process): one attempt, never repeated, as it ran."""
        if self.declaration is not None:  # (bound with no route: never by the HTTP seam)
            return UNKNOWN_ENDPOINT, False
        if self.request_id is None and verdict == "failed":
            known = self.runtime.session_endpoints.get(self.session) if self.session is not None else None
            self.declaration, endpoint = known or (COMPATIBILITY, UNKNOWN_ENDPOINT)
            return endpoint, False
        # No HTTP status: 0; the call's own end is its one attempt's outcome.
        failed = verdict == "failed"
        Attempt(self, None, outcome=classify(0, "other" if failed else "result")).close(
            NOT_RETRYABLE if failed else None
        )
        return LOCAL_ENDPOINT, True
