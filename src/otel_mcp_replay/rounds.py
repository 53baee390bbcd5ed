"""The rounds of an app's call (mcp 2.x, SEP-2322): one call all the same.

The rule: an app's `Client.call_tool` that the SDK's round driver sends as one
`ClientSession.call_tool` per round is one call: its span is made (or, under an outer instrumentation's
span of the same call, found) by its first round and holds every round's attempts and records; it
ends, counted once in the calls metric, when the app's call returns or raises, its verdict the final
round's (each round is its own point of the operation duration: call.py).
"""

from __future__ import annotations

from typing import Protocol

from otel_mcp_replay import telemetry as t
from otel_mcp_replay.call_span import CallSpan, error_type
from otel_mcp_replay.declaration import COMPATIBILITY, Declaration
from otel_mcp_replay.ledger import SERIES_EFFECT, RequestReplay
from otel_mcp_replay.runtime import Runtime
from otel_mcp_replay.telemetry import CallVerdict, Effect


class EndedTask(Protocol):
    """What the app's call reads of a round's task (call.CallTask)."""

    @property
    def failure(self) -> str | None:
        """The error.type of its task that ended failed or cancelled."""
        ...


class Round(Protocol):
    """What the app's call reads of one of its rounds (call.ToolCall) as the round ends."""

    ledger: RequestReplay  # its request's ledger
    declaration: Declaration | None
    server_code: int | None
    local: bool
    fingerprint: bytes | None  # the repeat guard's, told to its store as the app's call ends
    guard_armed: bool | None

    @property
    def task(self) -> EndedTask | None:
        """A task-backed round's task (tasks.py)."""
        ...

    def settled(self, verdict: CallVerdict) -> None: ...


class AppCall:
    """One `Client.call_tool` of the app's (mcp 2.x), which the SDK's round driver (SEP-2322) sends
    as one `ClientSession.call_tool` per round: one call all the same. Its span is made by its first
    round and holds every round's attempts and records; it ends, counted once in the calls metric,
    when the app's call returns or raises, its verdict the final round's."""

    # Class attributes until a round changes them (one store fewer per call each).
    # Made by the first round and shared by all of them: a call that sent none has none.
    call_span: CallSpan | None = None
    rounds = 0
    last: tuple[Round, CallVerdict] | None = None  # the latest round ended, as it ended
    effect: Effect = "none"  # of the whole call: unknown if any round's is, else applied if any
    mismatched = False  # the latest round was rejected with HEADER_MISMATCH: the SDK resends it
    unfiled: Round | None = None  # the latest round, a claimed result the client finishes
    sent = 0  # requests sent over all its rounds
    # The latest round was answered with InputRequiredResult: the next one continues it, and is never
    # a repeat of it.
    continues = False

    def __init__(self, runtime: Runtime, tool: str, arguments: object, session: object) -> None:
        self.runtime, self.tool, self.arguments, self.session = runtime, tool, arguments, session

    def next_round(self) -> tuple[int, CallSpan]:
        """A round begins: its number, and the span all its rounds share."""
        if self.call_span is None:
            self.call_span = CallSpan(self.runtime.tracer, self.tool)
        self.rounds += 1
        return self.rounds, self.call_span

    def round_ended(self, call: Round, verdict: CallVerdict, *, filed: bool = True) -> None:
        self.last = (call, verdict)
        self.continues = verdict == "input-required"
        self.unfiled = None if filed else call
        self.effect = SERIES_EFFECT[self.effect, call.ledger.effect]  # uncertainty survives
        self.sent += call.ledger.sent

    def ended(self, error: BaseException | None, result: object = None) -> None:
        """The app's call returned `result` (`error` None) or raised `error`: end its span, count it
        once, and file a round the client finished itself (a claimed result) as the call ended."""
        call_span, last = self.call_span, self.last
        if call_span is None:
            return  # no round began: nothing was sent, nothing to say
        if last is None:  # not reached: every round ends (patches/session.py), but never leave a span open
            if call_span.owned:
                call_span.span.end()
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
            t.MAY_HAVE_RUN: call.ledger.may_have_run and error is not None,
            t.POLICY: policy,
            t.JSONRPC_REQUEST_ID: str(call.ledger.id),
        }
        task_failed = error is None and verdict == "failed"  # its task ended failed or cancelled
        code = call.server_code if error is not None or task_failed else None
        task = call.task
        failure_type = task.failure if task_failed and task is not None else None
        if error is not None:
            failure_type = error_type(error, code)
        elif verdict == "tool-error":
            failure_type = t.TOOL_ERROR
        metric = {t.VERDICT: verdict, t.EFFECT: self.effect, t.POLICY: policy, t.GEN_AI_TOOL_NAME: self.tool}
        call_span.end(self.runtime, metric, outcome, failure_type, code, call.ledger.http_version, call.local)
