"""The retry series: send, and ask `permit` then the budget before every repeat. Nothing else.

The loop knows no transport: `exchange` makes one attempt and reports what came of it, `discard`
releases an attempt that will not be delivered, `wait` sleeps unless the call was given up. What
an attempt permitted, and what is known of its effect, is written beside it by the caller's
`AttemptLog`; the loop never reads an effect to decide a permission.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from otel_mcp_replay.budget import RetryBudget, SeriesBudget
from otel_mcp_replay.declaration import Declaration, Settings
from otel_mcp_replay.law import Declined, Effect, FailureKind, Permission, Repeat, Target, permit


@dataclass
class Outcome:
    """What one attempt came to, as the series reads it."""

    status: int  # 0: no response
    failure: (
        FailureKind | None
    )  # None: the JSON-RPC result came back (or, for a protocol request, no failure)
    effect: Effect | None  # None: still open (the answer may yet come on a stream)
    server_wait_ms: int | None = None  # Retry-After, when the server sent one
    error: BaseException | None = None  # the transport error of an attempt without a response
    payload: object = None  # what the transport delivers to the SDK if this attempt is the last
    ended_ns: int = 0  # when the exchange ended: an attempt's span ends there, not after the wait


class AttemptLog(Protocol):
    """Where the series writes each attempt: spans, the record's rows, metrics."""

    def opened(self, number: int, permission: Permission | None) -> None: ...

    def closed(self, outcome: Outcome, *, wait_ms: int, declined: str | None) -> None: ...


class NoLog:
    """A protocol request's series: it files nothing."""

    def opened(self, number: int, permission: Permission | None) -> None:
        pass

    def closed(self, outcome: Outcome, *, wait_ms: int, declined: str | None) -> None:
        pass


@dataclass(frozen=True)
class SeriesRules:
    declaration: Declaration
    target: Target
    settings: Settings
    endpoint_budget: RetryBudget | None
    fail_closed: bool
    rng: random.Random


async def run_series(
    rules: SeriesRules,
    exchange: Callable[[int], Awaitable[Outcome]],
    discard: Callable[[Outcome], Awaitable[None]],
    wait: Callable[[int], Awaitable[bool]],
    log: AttemptLog,
) -> Outcome:
    """Attempt until an attempt succeeds or a repeat is declined; return the last attempt's outcome."""
    budget = SeriesBudget(rules.settings)
    permission: Permission | None = None
    number = 1
    while True:
        log.opened(number, permission)
        outcome = await exchange(number)
        if outcome.failure is None:
            if rules.endpoint_budget is not None:
                rules.endpoint_budget.on_success()
            log.closed(outcome, wait_ms=0, declined=None)
            return outcome
        if rules.endpoint_budget is not None:
            rules.endpoint_budget.on_failure()
        decision = _decide(rules, outcome)
        delay: int | None = None
        if isinstance(decision, Repeat):
            delay = budget.next_wait_ms(number, outcome.server_wait_ms, rules.rng)
            if delay is None or (
                rules.endpoint_budget is not None and not rules.endpoint_budget.allows_repeat()
            ):
                decision = Declined("budget")
        if isinstance(decision, Declined) or delay is None:
            log.closed(
                outcome, wait_ms=0, declined=decision.reason if isinstance(decision, Declined) else None
            )
            return outcome
        if not await wait(delay):  # the caller gave up during the wait: nothing more is sent
            log.closed(outcome, wait_ms=0, declined="budget")
            return outcome
        log.closed(outcome, wait_ms=delay, declined=None)
        await discard(outcome)
        permission = decision.permission
        number += 1


def _decide(rules: SeriesRules, outcome: Outcome) -> Repeat | Declined:
    assert outcome.failure is not None
    if rules.fail_closed:  # a configuration error: record everything, repeat nothing
        return Declined("not-permitted")
    return permit(
        rules.declaration, rules.target, outcome.failure, retry_on_throttle=rules.settings.retry_on_throttle
    )
