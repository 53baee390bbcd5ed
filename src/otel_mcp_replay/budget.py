"""How much repeating the law's permission may spend: attempts, waits, and a shared retry budget.

The rule: a permitted repeat still needs budget. One call gets at most `max_attempts` attempts and
`max_wait_ms` of waiting; a wait that would pass the cap (the server's `Retry-After` or our own
backoff) declines the repeat, it is never shortened. Each endpoint has one token bucket shared by
every call (gRPC's retryThrottling), so a storm of 429s over many calls cannot multiply the load.
Pure: the clock and the randomness are passed in.
"""

from __future__ import annotations

import math
import random
import re
import threading
from collections import OrderedDict
from datetime import timezone
from email.utils import parsedate_to_datetime
from typing import Final

from otel_mcp_replay.declaration import MIN_RATIO, Settings

# A Retry-After longer than this is as good as never: it is held here, so it passes any sane cap
# (and declines the repeat) without overflowing anything on the way.
MAX_RETRY_AFTER_MS: Final = 86_400_000  # one day
_DELTA_SECONDS: Final = re.compile(r"[0-9]+", re.ASCII)

BACKOFF_BASE_MS: Final = 200
BACKOFF_CAP_MS: Final = 10_000
ENDPOINTS_KEPT: Final = 1024
_MILLI: Final = 1000


def retry_after_ms(value: str | None, now_epoch_s: float) -> int | None:
    """A `Retry-After` header value as milliseconds to wait, or None when absent or malformed.

    RFC 9110 §10.2.3: delta-seconds (a non-negative integer; a fraction or a sign is malformed)
    or an HTTP-date (IMF-fixdate, and the obsolete RFC 850 and asctime forms). A date in the past
    is 0. Never raises, whatever the text.
    """
    if type(value) is not str:
        return None
    text = value.strip(" \t")
    if _DELTA_SECONDS.fullmatch(text):
        digits = text.lstrip("0") or "0"
        # Enough digits to pass a day are a day: int() of a huge string would be slow or refused.
        if len(digits) > 8:
            return MAX_RETRY_AFTER_MS
        return min(int(digits) * 1000, MAX_RETRY_AFTER_MS)
    try:
        when = parsedate_to_datetime(text)
        if when.tzinfo is None:  # an HTTP-date is always GMT
            when = when.replace(tzinfo=timezone.utc)
        delta_s = when.timestamp() - now_epoch_s
    except Exception:  # the stdlib parser's errors differ across versions (TypeError, ValueError, ...)
        return None
    if not math.isfinite(delta_s):
        return None
    if delta_s <= 0:
        return 0
    return min(math.ceil(delta_s * 1000), MAX_RETRY_AFTER_MS)


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

    def on_success(self) -> None:
        with self._lock:
            self._tokens = min(self._max, self._tokens + self._ratio)

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

    __slots__ = ("_budgets", "_lock", "_retry_budget")

    def __init__(self, retry_budget: tuple[int, float] | None) -> None:
        if retry_budget is not None:
            RetryBudget(*retry_budget)  # checked now, not at the first call
        self._retry_budget = retry_budget
        self._budgets: OrderedDict[str, RetryBudget] = OrderedDict()
        self._lock = threading.Lock()

    def for_endpoint(self, key: str) -> RetryBudget | None:
        """The budget shared by every call to endpoint `key`; None when the retry budget is off."""
        if self._retry_budget is None:
            return None
        with self._lock:
            budget = self._budgets.get(key)
            if budget is None:
                budget = self._budgets[key] = RetryBudget(*self._retry_budget)
                if len(self._budgets) > ENDPOINTS_KEPT:
                    self._budgets.popitem(last=False)
            else:
                self._budgets.move_to_end(key)
            return budget

    def __len__(self) -> int:
        with self._lock:
            return len(self._budgets)


class SeriesBudget:
    """One call's budget: attempts including the first, and the cap on its total waiting."""

    __slots__ = ("_max_attempts", "_max_wait_ms", "_waited_ms")

    def __init__(self, settings: Settings) -> None:
        self._max_attempts = settings.max_attempts
        self._max_wait_ms = settings.max_wait_ms
        self._waited_ms = 0

    def next_wait_ms(self, attempts_sent: int, server_wait_ms: int | None, rng: random.Random) -> int | None:
        """The wait before the next attempt, recorded as spent; None when there is no next attempt.

        None when `attempts_sent` has reached `max_attempts`, or when the wait (the server's when
        it sent one, else backoff_ms(attempts_sent)) would take the call's total waiting past
        `max_wait_ms`: a wait past the cap declines, it is never shortened. Our own backoff is held
        to the same rule, so `max_wait_ms=0` repeats only when the server says to ask now.
        """
        if attempts_sent < 1:
            raise ValueError("attempts_sent counts from 1")
        if server_wait_ms is not None and server_wait_ms < 0:
            raise ValueError("server_wait_ms is never negative")
        if attempts_sent >= self._max_attempts:
            return None
        wait = server_wait_ms if server_wait_ms is not None else backoff_ms(attempts_sent, rng)
        if self._waited_ms + wait > self._max_wait_ms:
            return None
        self._waited_ms += wait
        return wait

    @property
    def waited_ms(self) -> int:
        return self._waited_ms
