"""The replay policy of one request, as one immutable value that the seam's attempt loop asks.

The rule: after a failed attempt, the request is sent again only when `permit` allows it AND the
budget still does: at most `max_attempts` attempts and `max_wait_ms` of waiting per request (a wait
past the cap declines, it is never shortened), and the endpoint's token bucket above half (gRPC's
retryThrottling, shared by every call to the endpoint). `ReplayPolicy.after` answers with a
decision and the policy for the next attempt, as urllib3's `Retry.increment` does: it changes
nothing and knows no transport; the loop that sent the attempt charges the bucket
(`RetryBudgets.charge`) before it asks. An attempt that did not fail has nothing to decide: the
loop makes a request's policy at its first failure, and an answer charges a full bucket nothing.
"""

from __future__ import annotations

import random
import threading
from collections import OrderedDict
from typing import Final, NamedTuple

from otel_mcp_replay.declaration import Declaration
from otel_mcp_replay.evidence import Outcome
from otel_mcp_replay.law import BUDGET, NOT_PERMITTED, Decision, Declined, Permission, Target, permit
from otel_mcp_replay.settings import MIN_RATIO, Settings

BACKOFF_BASE_MS: Final = 200
BACKOFF_CAP_MS: Final = 10_000
ENDPOINTS_KEPT: Final = 1024
_MILLI: Final = 1000


def backoff_ms(repeat: int, rng: random.Random) -> int:
    """Equal-jitter exponential backoff before repeat number `repeat` (1 for the first repeat).

    base = 200 ms * 2**(repeat-1), capped at 10 s; the wait is half of it fixed plus a uniform
    draw over the other half.
    """
    if repeat < 1:
        raise ValueError("repeat counts from 1")
    exponent = min(repeat - 1, 16)  # 200 * 2**16 is past the cap already: no huge powers
    base = min(BACKOFF_BASE_MS * 2**exponent, BACKOFF_CAP_MS)
    half = base / 2
    return int(half + rng.random() * half)


class RetryBudget:
    """One endpoint's token bucket, as gRPC's retryThrottling: full at start; a failed attempt costs
    one token, an answered one returns `ratio` (up to the full `tokens`); repeats are allowed only
    while the bucket holds more than half. Thread-safe: shared by all calls to the endpoint.

    Kept in thousandths of a token, as gRPC does, so ten answers at 0.1 return exactly one token.
    """

    __slots__ = ("_lock", "_max", "_ratio", "_tokens")

    def __init__(self, tokens: int, ratio: float) -> None:
        if not (isinstance(tokens, int) and not isinstance(tokens, bool) and tokens > 0):
            raise ValueError("tokens must be an int above 0")
        if not (isinstance(ratio, (int, float)) and MIN_RATIO <= ratio <= tokens):
            raise ValueError("ratio must be at least 0.001 and at most the tokens")
        self._max = tokens * _MILLI
        self._ratio = round(ratio * _MILLI)
        self._tokens = self._max
        self._lock = threading.Lock()

    def on_failure(self) -> None:
        with self._lock:
            self._tokens = max(0, self._tokens - _MILLI)

    def charge(self, outcome: Outcome) -> bool:
        """Told what one attempt came to, by the loop that sent it (never by `ReplayPolicy.after`):
        a failure costs a token, an answer returns `ratio`; one never sent is neither. True when
        the bucket is full after it."""
        if outcome.failure is not None:
            self.on_failure()
            return False  # a failure takes a whole token: the bucket is below full after it
        if outcome.effect != "none":
            return self.on_success()
        return self._tokens == self._max

    def on_success(self) -> bool:
        """An answer returns `ratio`. True when the bucket is full after it."""
        # A full bucket (nearly every answer finds it so) stays full: no lock to take. Read unlocked,
        # it is as if this answer came just before any failure being charged meanwhile.
        if self._tokens == self._max:
            return True
        with self._lock:
            self._tokens = min(self._max, self._tokens + self._ratio)
            return self._tokens == self._max

    def allows_repeat(self) -> bool:
        with self._lock:
            return self._tokens * 2 > self._max

    @property
    def tokens(self) -> float:
        with self._lock:
            return self._tokens / _MILLI


class RetryBudgets:
    """The retry budget of each endpoint, made on first use. Thread-safe.

    Bounded: at most ENDPOINTS_KEPT endpoints are kept, the least recently used forgotten first
    (a forgotten endpoint starts again with a full bucket).
    """

    __slots__ = ("_budgets", "_lock", "_retry_budget", "drawn")

    def __init__(self, retry_budget: tuple[int, float] | None) -> None:
        if retry_budget is not None:
            RetryBudget(*retry_budget)  # checked now, not at the first call
        self._retry_budget = retry_budget
        self._budgets: OrderedDict[str, RetryBudget] = OrderedDict()
        # The endpoints whose bucket is below full: an answer from any other is charged nothing,
        # and its bucket is not looked up (a full bucket forgotten is the full bucket made again).
        # The loop reads it (without the lock, as `charge` does) so that an answer costs no call.
        self.drawn: set[str] = set()
        self._lock = threading.Lock()

    def charge(self, key: str, outcome: Outcome) -> None:
        """Endpoint `key`'s bucket told what one attempt came to (`RetryBudget.charge`)."""
        if self._retry_budget is None:
            return
        if outcome.failure is None and key not in self.drawn:
            return  # an answer (or an attempt never sent) to a full bucket: it stays full
        with self._lock:  # the bucket and the drawn set change together
            if self._budget(key).charge(outcome):
                self.drawn.discard(key)
            else:
                self.drawn.add(key)

    def for_endpoint(self, key: str) -> RetryBudget | None:
        """The budget shared by every call to endpoint `key`; None when the retry budget is off."""
        if self._retry_budget is None:
            return None
        with self._lock:
            return self._budget(key)

    def policy(
        self,
        key: str,
        declaration: Declaration,
        target: Target,
        settings: Settings,
        fail_closed: bool,
        on_network: Decision | None = None,
    ) -> ReplayPolicy:
        """A request's replay policy, made at its first failure, with endpoint `key`'s budget: shared
        by every call to the endpoint's origin, as gRPC's is per server. `on_network`: the law's
        word on a network failure of the request, when it was asked already (law.permit_on_network)."""
        budget = self.for_endpoint(key)
        return ReplayPolicy(declaration, target, settings, budget, fail_closed, on_network=on_network)

    def _budget(self, key: str) -> RetryBudget:
        """Endpoint `key`'s bucket, made on first use, now the most recently used (lock held)."""
        assert self._retry_budget is not None
        budget = self._budgets.get(key)
        if budget is None:
            budget = self._budgets[key] = RetryBudget(*self._retry_budget)
            if len(self._budgets) > ENDPOINTS_KEPT:
                forgotten, _ = self._budgets.popitem(last=False)
                self.drawn.discard(forgotten)
        else:
            self._budgets.move_to_end(key)
        return budget

    def __len__(self) -> int:
        with self._lock:
            return len(self._budgets)


class Wait(NamedTuple):
    """Repeat after `ms`, under `permission` (None: a protocol request's repeat, recorded nowhere).
    A named tuple: one is made per repeat, and it is built in C."""

    ms: int
    permission: Permission | None


class ReplayPolicy(NamedTuple):
    """What may still be spent on one request: a new value after every attempt, never changed.
    A named tuple: one is made per request, and it is built in C."""

    declaration: Declaration
    target: Target
    settings: Settings
    endpoint_budget: RetryBudget | None = None  # the endpoint's, shared: read here, charged by the loop
    fail_closed: bool = False  # a configuration error: record everything, repeat nothing
    attempts: int = 1  # attempts made, the one just answered included
    waited_ms: int = 0
    # The law's word on a network failure, asked once as the request was read (None: asked here).
    on_network: Decision | None = None

    def after(self, outcome: Outcome, rng: random.Random) -> tuple[Wait | Declined | None, ReplayPolicy]:
        """The decision after the attempt that came to `outcome` (None: it did not fail, nothing to
        repeat), and the policy for the next attempt. Writes nothing: the endpoint's bucket, read
        here, was charged for this attempt by the loop (`RetryBudgets.charge`) before it asked."""
        if outcome.failure is None:  # it did not fail (or was never sent): nothing to repeat
            return None, self
        # What the budgets allow, read before the law is asked: its word is the last thing read.
        wait = self._next_wait_ms(outcome.server_wait_ms, rng)
        budget = self.endpoint_budget
        spent = wait is None or (budget is not None and not budget.allows_repeat())
        decision = (
            self.on_network
            if outcome.failure == "network" and self.on_network is not None
            else NOT_PERMITTED
            if self.fail_closed
            else permit(
                self.declaration,
                self.target,
                outcome.failure,
                retry_on_throttle=self.settings.retry_on_throttle,
                status=outcome.status,
            )
        )
        if isinstance(decision, Declined):
            return decision, self
        if spent or wait is None:
            return BUDGET, self
        return Wait(wait, decision.permission), self._replace(
            attempts=self.attempts + 1, waited_ms=self.waited_ms + wait
        )

    def _next_wait_ms(self, server_wait_ms: int | None, rng: random.Random) -> int | None:
        """The wait before the next attempt, or None when there is none: `max_attempts` reached, or
        the wait (the server's when it sent one, else our backoff) would take the total past
        `max_wait_ms`. Our own backoff is held to the same cap, so `max_wait_ms=0` repeats only
        when the server says to ask now."""
        if self.attempts >= self.settings.max_attempts:
            return None
        if server_wait_ms is not None and server_wait_ms < 0:
            raise ValueError("server_wait_ms is never negative")
        wait = server_wait_ms if server_wait_ms is not None else backoff_ms(self.attempts, rng)
        return None if self.waited_ms + wait > self.settings.max_wait_ms else wait
