"""The budget: attempts, waits, Retry-After, jitter, and the retry budget shared per endpoint."""

from __future__ import annotations

import random
import threading
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_mcp_replay.declaration import COMPATIBILITY
from otel_mcp_replay.evidence import MAX_RETRY_AFTER_MS, Outcome, retry_after_ms
from otel_mcp_replay.law import Declined, Target
from otel_mcp_replay.policy import (
    BACKOFF_CAP_MS,
    ENDPOINTS_KEPT,
    ReplayPolicy,
    RetryBudget,
    RetryBudgets,
    Wait,
    backoff_ms,
)
from otel_mcp_replay.settings import Settings

NOW = datetime(2026, 5, 1, 12, 0, 0, tzinfo=timezone.utc)
NOW_S = NOW.timestamp()

# --- Retry-After -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "ms"),
    [
        ("0", 0),
        ("1", 1000),
        ("120", 120_000),
        (" 3 ", 3000),
        ("007", 7000),
        ("86400", MAX_RETRY_AFTER_MS),
        ("86401", MAX_RETRY_AFTER_MS),  # clamped, not refused: it passes any cap and declines there
        ("9" * 5000, MAX_RETRY_AFTER_MS),
        ("0" * 5000 + "5", 5000),
    ],
)
def test_retry_after_in_delta_seconds(value: str, ms: int) -> None:
    assert retry_after_ms(value, NOW_S) == ms


@pytest.mark.parametrize(
    "value", [None, "", " ", "-1", "+1", "1.5", "1e3", "0x10", "١٢", "soon", "5,6", "1 2", "Fri, 32 Foo 2026"]
)
def test_a_malformed_or_negative_retry_after_is_absent(value: str | None) -> None:
    assert retry_after_ms(value, NOW_S) is None


def test_retry_after_as_an_imf_fixdate() -> None:
    later = format_datetime(NOW + timedelta(seconds=30), usegmt=True)  # "Fri, 01 May 2026 12:00:30 GMT"
    assert retry_after_ms(later, NOW_S) == 30_000
    assert retry_after_ms(later, NOW_S + 0.25) == 29_750


def test_retry_after_in_the_obsolete_date_forms() -> None:
    assert retry_after_ms("Friday, 01-May-26 12:00:10 GMT", NOW_S) == 10_000  # RFC 850
    assert retry_after_ms("Fri May  1 12:00:20 2026", NOW_S) == 20_000  # asctime


def test_a_retry_after_date_in_the_past_is_now() -> None:
    assert retry_after_ms("Wed, 21 Oct 2015 07:28:00 GMT", NOW_S) == 0
    assert retry_after_ms(format_datetime(NOW, usegmt=True), NOW_S) == 0


def test_a_far_retry_after_date_is_clamped() -> None:
    assert retry_after_ms("Fri, 31 Dec 9999 23:59:59 GMT", NOW_S) == MAX_RETRY_AFTER_MS


@settings(max_examples=500)
@given(st.text())
def test_retry_after_never_raises_on_any_text(value: str) -> None:
    ms = retry_after_ms(value, NOW_S)
    assert ms is None or (type(ms) is int and 0 <= ms <= MAX_RETRY_AFTER_MS)


date_like = st.builds(
    "{}, {:02d} {} {} {:02d}:{:02d}:{:02d} {}".format,
    st.sampled_from(("Mon", "Fri", "Sunday", "", "X")),
    st.integers(-5, 40),
    st.sampled_from(("Jan", "May", "Dec", "Foo")),
    st.integers(-10, 100_000),
    st.integers(0, 99),
    st.integers(0, 99),
    st.integers(0, 99),
    st.sampled_from(("GMT", "UTC", "+0000", "-9999", "", "PST")),
)


@settings(max_examples=300)
@given(date_like, st.floats(min_value=-1e12, max_value=1e12))
def test_retry_after_never_raises_on_date_like_text(value: str, now: float) -> None:
    ms = retry_after_ms(value, now)
    assert ms is None or 0 <= ms <= MAX_RETRY_AFTER_MS


# --- backoff ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("repeat", "base"), [(1, 200), (2, 400), (3, 800), (6, 6400), (7, 10_000), (1000, 10_000)]
)
def test_backoff_is_equal_jitter_from_200_ms_capped(repeat: int, base: int) -> None:
    rng = random.Random(repeat)
    waits = [backoff_ms(repeat, rng) for _ in range(200)]
    assert all(base // 2 <= w <= base for w in waits)
    assert max(waits) - min(waits) > base // 4  # the jitter spreads over the upper half
    assert base <= BACKOFF_CAP_MS


def test_backoff_takes_its_randomness_from_the_caller() -> None:
    assert [backoff_ms(3, random.Random(9)) for _ in range(3)] == [backoff_ms(3, random.Random(9))] * 3


def test_backoff_counts_repeats_from_one() -> None:
    with pytest.raises(ValueError):
        backoff_ms(0, random.Random())


# --- one request's budget, asked through its policy ------------------------------------------------


class Series:
    """A 429'd tool call under compatibility (which repeats it), asking its policy after each."""

    def __init__(self, settings: Settings) -> None:
        self.policy = ReplayPolicy(COMPATIBILITY, Target(tool="search"), settings)

    def next_wait_ms(self, server_wait_ms: int | None, rng: random.Random) -> int | None:
        decision, self.policy = self.policy.after(Outcome(429, "throttle", "unknown", server_wait_ms), rng)
        if isinstance(decision, Wait):
            return decision.ms
        assert decision == Declined("budget")
        return None

    @property
    def waited_ms(self) -> int:
        return self.policy.waited_ms


def test_attempts_include_the_first() -> None:
    budget = Series(Settings(max_attempts=3))
    rng = random.Random(1)
    assert budget.next_wait_ms(0, rng) == 0
    assert budget.next_wait_ms(0, rng) == 0
    assert budget.next_wait_ms(0, rng) is None
    assert budget.policy.attempts == 3


def test_one_attempt_means_no_repeat() -> None:
    assert Series(Settings(max_attempts=1)).next_wait_ms(0, random.Random()) is None


def test_the_server_s_wait_is_honoured_and_counted() -> None:
    budget = Series(Settings(max_attempts=5, max_wait_ms=10_000))
    assert budget.next_wait_ms(4000, random.Random()) == 4000
    assert budget.next_wait_ms(6000, random.Random()) == 6000
    assert budget.waited_ms == 10_000
    assert budget.next_wait_ms(1, random.Random()) is None


def test_a_retry_after_past_the_cap_declines_and_is_never_shortened() -> None:
    budget = Series(Settings(max_attempts=5, max_wait_ms=10_000))
    assert budget.next_wait_ms(10_001, random.Random()) is None
    assert budget.waited_ms == 0  # a declined wait is not spent
    assert budget.next_wait_ms(10_000, random.Random()) == 10_000


def test_our_own_backoff_past_the_cap_declines_too() -> None:
    assert Series(Settings(max_wait_ms=0)).next_wait_ms(None, random.Random()) is None
    assert Series(Settings(max_wait_ms=0)).next_wait_ms(0, random.Random()) == 0
    budget = Series(Settings(max_wait_ms=99))  # the first backoff is 100..200 ms
    assert budget.next_wait_ms(None, random.Random()) is None


def test_without_a_server_wait_the_backoff_is_used() -> None:
    budget = Series(Settings(max_attempts=4))
    rng, twin = random.Random(5), random.Random(5)
    waits = [budget.next_wait_ms(None, rng) for _ in (1, 2, 3)]
    assert waits == [backoff_ms(n, twin) for n in (1, 2, 3)]
    assert budget.waited_ms == sum(w for w in waits if w is not None)


def test_a_policy_is_never_changed_only_replaced() -> None:
    first = ReplayPolicy(COMPATIBILITY, Target(tool="search"), Settings())
    decision, second = first.after(Outcome(429, "throttle", "unknown", 5), random.Random())
    assert decision == Wait(5, decision.permission) and decision.permission is not None  # type: ignore[union-attr]
    assert (first.attempts, first.waited_ms) == (1, 0)
    assert (second.attempts, second.waited_ms) == (2, 5)
    done, same = second.after(Outcome(200, None, "applied"), random.Random())
    assert done is None and same is second


def test_a_failure_the_law_does_not_permit_is_declined_before_the_budget_is_asked() -> None:
    policy = ReplayPolicy(COMPATIBILITY, Target(tool="search"), Settings())
    decision, after = policy.after(Outcome(503, "error", "unknown"), random.Random())
    assert decision == Declined("not-retryable") and after is policy
    closed = ReplayPolicy(COMPATIBILITY, Target(tool="search"), Settings(), fail_closed=True)
    assert closed.after(Outcome(429, "throttle", "unknown", 0), random.Random())[0] == Declined(
        "not-permitted"
    )


@settings(max_examples=200)
@given(
    st.integers(1, 8),
    st.integers(0, 5000),
    st.lists(st.one_of(st.none(), st.integers(0, 3000)), min_size=1, max_size=10),
)
def test_total_waiting_never_passes_the_cap(
    max_attempts: int, cap: int, server_waits: list[int | None]
) -> None:
    budget = Series(Settings(max_attempts=max_attempts, max_wait_ms=cap))
    rng = random.Random(0)
    for sent, server in enumerate(server_waits, start=1):
        wait = budget.next_wait_ms(server, rng)
        if wait is None:
            break
        assert sent < max_attempts
        if server is not None:
            assert wait == server
    assert budget.waited_ms <= cap


# --- the retry budget, per endpoint, shared ---------------------------------------------------


def test_a_storm_of_failures_stops_repeats_at_half() -> None:
    budget = RetryBudget(10, 0.1)
    assert budget.tokens == 10 and budget.allows_repeat()
    for _ in range(4):
        budget.on_failure()
    assert budget.tokens == 6 and budget.allows_repeat()
    budget.on_failure()
    assert budget.tokens == 5 and not budget.allows_repeat()  # at half: no repeat
    for _ in range(100):
        budget.on_failure()
    assert budget.tokens == 0 and not budget.allows_repeat()


def test_successes_refill_by_the_ratio_up_to_full() -> None:
    budget = RetryBudget(10, 0.5)
    for _ in range(5):
        budget.on_failure()
    assert not budget.allows_repeat()
    budget.on_success()
    assert budget.tokens == 5.5 and budget.allows_repeat()
    for _ in range(100):
        budget.on_success()
    assert budget.tokens == 10


def test_at_the_default_ten_answers_pay_for_one_failure_exactly() -> None:
    """100 tokens, 0.1 back per answer: kept in thousandths, so no float drift moves the line."""
    budget = RetryBudget(100, 0.1)
    for _ in range(51):
        budget.on_failure()
    assert budget.tokens == 49
    for _ in range(10):
        budget.on_success()
    assert budget.tokens == 50 and not budget.allows_repeat()  # back at half: still no repeat
    budget.on_success()
    assert budget.tokens == 50.1 and budget.allows_repeat()


@pytest.mark.parametrize(
    ("tokens", "ratio"),
    [(0, 0.1), (-1, 0.1), (10, 0.0), (10, 0.0009), (10, 11.0), (10, float("inf")), (10, float("nan"))],
)
def test_a_retry_budget_out_of_range_is_refused(tokens: int, ratio: float) -> None:
    with pytest.raises(ValueError):
        RetryBudget(tokens, ratio)
    with pytest.raises(ValueError):
        RetryBudgets((tokens, ratio))


def test_the_retry_budget_is_thread_safe() -> None:
    budget = RetryBudget(100_000, 0.5)
    start = threading.Barrier(8)

    def storm() -> None:
        start.wait()
        for _ in range(2000):
            budget.on_failure()
            budget.allows_repeat()
        for _ in range(1000):
            budget.on_success()

    threads = [threading.Thread(target=storm) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert budget.tokens == 100_000 - 8 * 2000 + 8 * 1000 * 0.5


def test_one_budget_per_endpoint_shared_by_every_call() -> None:
    budgets = RetryBudgets((10, 0.1))
    a = budgets.for_endpoint("http://a:80")
    assert a is not None and a is budgets.for_endpoint("http://a:80")
    assert budgets.for_endpoint("billing") is not a


def test_no_budget_when_off() -> None:
    assert RetryBudgets(None).for_endpoint("http://a:80") is None


def test_the_registry_is_bounded_forgetting_the_least_recently_used() -> None:
    budgets = RetryBudgets((10, 0.1))
    first = budgets.for_endpoint("e0")
    for i in range(1, ENDPOINTS_KEPT):
        budgets.for_endpoint(f"e{i}")
    assert budgets.for_endpoint("e0") is first  # used again: now the most recent
    budgets.for_endpoint("new")
    assert len(budgets) == ENDPOINTS_KEPT
    assert budgets.for_endpoint("e0") is first
    assert budgets.for_endpoint("e1") is not None  # e1 was forgotten and starts afresh


def test_the_registry_is_thread_safe() -> None:
    budgets = RetryBudgets((10, 0.1))
    seen: list[RetryBudget | None] = []
    start = threading.Barrier(8)

    def fetch() -> None:
        start.wait()
        seen.extend(budgets.for_endpoint(f"e{i % 50}") for i in range(500))

    threads = [threading.Thread(target=fetch) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(budgets) == 50
    assert len({id(b) for b in seen}) == 50


ANSWER = Outcome(200, None, "applied")
FAILURE = Outcome(503, "error", "unknown")


def test_an_answer_charges_the_registry_only_where_a_bucket_is_below_full() -> None:
    budgets = RetryBudgets((10, 0.1))
    budgets.charge("http://a:80", ANSWER)
    assert len(budgets) == 0  # an answer to a full bucket: no bucket looked up, none made
    budgets.charge("http://a:80", FAILURE)
    a = budgets.for_endpoint("http://a:80")
    assert a is not None and a.tokens == 9
    for answers in range(1, 11):
        budgets.charge("http://a:80", ANSWER)
        assert a.tokens == pytest.approx(min(10, 9 + answers * 0.1))
    budgets.charge("http://b:80", FAILURE)  # another endpoint's failure is its own
    b = budgets.for_endpoint("http://b:80")
    assert b is not None and b.tokens == 9 and a.tokens == 10
    budgets.charge("http://a:80", Outcome(0, None, "none"))  # never sent: neither cost nor credit
    budgets.charge("http://b:80", Outcome(0, None, "none"))
    assert (a.tokens, b.tokens) == (10, 9)


def test_a_bucket_made_full_again_is_charged_as_a_full_one() -> None:
    budgets = RetryBudgets((1, 0.5))
    budgets.charge("e", FAILURE)
    budget = budgets.for_endpoint("e")
    assert budget is not None and budget.tokens == 0
    budgets.charge("e", ANSWER)
    budgets.charge("e", ANSWER)
    assert budget.tokens == 1
    budgets.charge("e", FAILURE)  # drawn again after it was full: charged as before
    assert budget.tokens == 0
    budgets.charge("e", ANSWER)
    assert budget.tokens == 0.5


def test_a_drawn_bucket_forgotten_starts_full_and_answers_make_none() -> None:
    budgets = RetryBudgets((10, 0.1))
    budgets.charge("e0", FAILURE)
    for i in range(1, ENDPOINTS_KEPT + 1):  # e0, the least recently used, is forgotten
        budgets.for_endpoint(f"e{i}")
    assert len(budgets) == ENDPOINTS_KEPT
    budgets.charge("e0", ANSWER)
    assert len(budgets) == ENDPOINTS_KEPT  # no bucket made again for an answer
    fresh = budgets.for_endpoint("e0")
    assert fresh is not None and fresh.tokens == 10


def test_the_registry_charges_nothing_when_the_budget_is_off() -> None:
    budgets = RetryBudgets(None)
    budgets.charge("e", FAILURE)
    budgets.charge("e", ANSWER)
    assert len(budgets) == 0 and budgets.for_endpoint("e") is None


def test_the_registry_charges_a_bucket_from_many_threads_and_answers_refill_it() -> None:
    budgets = RetryBudgets((10, 0.1))
    start = threading.Barrier(8)

    def storm() -> None:
        start.wait()
        for _ in range(50):
            budgets.charge("e", FAILURE)
            for _ in range(3):
                budgets.charge("e", ANSWER)

    threads = [threading.Thread(target=storm) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    budget = budgets.for_endpoint("e")
    assert budget is not None and budget.tokens < 10  # 400 failures, 1,200 answers: drawn
    for _ in range(100):  # 100 answers at 0.1 refill any bucket of 10 from empty
        budgets.charge("e", ANSWER)
    assert budget.tokens == 10  # every answer to a bucket below full was credited
