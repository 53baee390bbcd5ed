"""What is known of an attempt's and a series' effect, and the facts of one request (its ToolCall's)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider

from otel_mcp_replay import telemetry as t
from otel_mcp_replay.attempt import Attempt
from otel_mcp_replay.call import ToolCall
from otel_mcp_replay.declaration import COMPATIBILITY, Declaration
from otel_mcp_replay.evidence import NO_RESPONSE, NOT_SENT, Outcome, classify
from otel_mcp_replay.law import BUDGET
from otel_mcp_replay.ledger import RequestReplay, series_effect
from otel_mcp_replay.policy import Wait
from otel_mcp_replay.runtime import Instruments, Runtime
from otel_mcp_replay.telemetry import Effect

# --- one attempt: what a response says (classify), without I/O ---------------------------------


def test_an_attempt_never_sent_has_no_effect_and_no_failure_kind() -> None:
    assert Outcome(0, None, "none") == NOT_SENT


def test_an_attempt_answered_with_a_result_applied() -> None:
    """A JSON-RPC result came back, isError or not: the tool ran."""
    assert classify(200, "result") == Outcome(200, None, "applied", answered=True)


@pytest.mark.parametrize(
    ("status", "reply", "failure"),
    [
        (429, None, "throttle"),
        (503, None, "error"),
        (400, None, "error"),
        (200, "error", "error"),  # a JSON-RPC error: answered, and still not proof it did not run
        (200, "other", "error"),  # a body without the answer to this id
        (202, "accepted", "error"),  # a response, and no answer will follow: never `network`
    ],
)
def test_an_attempt_sent_without_a_result_is_unknown(status: int, reply: str | None, failure: str) -> None:
    """A 429, a 5xx, a JSON-RPC error, a drop: none of them proves the tool did not run."""
    outcome = classify(status, reply)  # type: ignore[arg-type]
    assert (outcome.failure, outcome.effect) == (failure, "unknown")
    assert outcome.answered == (reply == "error")


def test_a_cut_body_keeps_its_status_as_a_cut_stream_does() -> None:
    """One truth per fact (issue 40): a response came, and its connection was lost before its
    answer, whether it was a JSON body or an event stream: its status, `network`, `unknown`."""
    assert classify(200, "cut") == Outcome(200, "network", "unknown")
    assert classify(200, "cut") == classify(200, "later").after_stream(None, cut=True)
    assert classify(200, "cut") != NO_RESPONSE  # that is no response at all: status 0


def test_an_answer_still_to_come_leaves_the_effect_open_until_the_stream_says() -> None:
    pending = classify(200, "later")
    assert pending.effect is None and pending.failure is None
    assert pending.after_stream("result") == Outcome(200, None, "applied", answered=True)
    assert pending.after_stream("error") == Outcome(200, "error", "unknown", answered=True)
    assert pending.after_stream(None) == Outcome(200, "error", "unknown")  # a response, without it
    assert pending.after_stream(None, cut=True) == Outcome(200, "network", "unknown")  # the connection lost


def test_a_call_sent_without_http_is_classified_by_what_it_came_to() -> None:
    """stdio, in-process: no HTTP status (0), and the call's own end says what it came to."""
    assert classify(0, "result") == Outcome(0, None, "applied", answered=True)
    assert classify(0, "other") == Outcome(0, "error", "unknown")  # failed without a result: may have run
    assert classify(0, None) == NO_RESPONSE  # an HTTP attempt without a response is still that


def test_a_redirect_is_unknown_and_not_a_failure() -> None:
    assert classify(307, None) == Outcome(307, None, "unknown")


def test_a_refusal_carries_the_servers_wait() -> None:
    assert classify(429, None, retry_after="3").server_wait_ms == 3000
    busy = classify(409, None, session_busy=True, retry_after="1")
    assert (busy.failure, busy.effect, busy.server_wait_ms) == ("session-busy", "unknown", 1000)
    assert classify(503, None, retry_after="3").server_wait_ms is None  # read only on a refusal


# --- a series: uncertainty survives, evidence is never erased ---------------------------------


def knowledge_of(effects: list[Effect]) -> Effect:
    known = RequestReplay.effect  # what a request knows before any attempt
    for effect in effects:
        known = series_effect(known, effect)
    return known


def test_a_series_that_noted_nothing_has_no_effect() -> None:
    assert knowledge_of([]) == "none"


def test_a_later_result_does_not_resolve_an_earlier_unknown() -> None:
    assert knowledge_of(["unknown", "applied"]) == "unknown"


def test_a_later_failure_does_not_erase_an_earlier_result() -> None:
    assert knowledge_of(["applied", "none"]) == "applied"


effects_st = st.lists(st.sampled_from(t.EFFECTS), max_size=30)


@settings(max_examples=300)
@given(effects_st)
def test_effect_precedence_for_any_sequence(effects: list[Effect]) -> None:
    """unknown if any attempt is unknown, else applied if any is, else none."""
    expected = "unknown" if "unknown" in effects else "applied" if "applied" in effects else "none"
    assert knowledge_of(effects) == expected


@settings(max_examples=200)
@given(effects_st, effects_st)
def test_knowledge_only_grows(before: list[Effect], after: list[Effect]) -> None:
    rank = {"none": 0, "applied": 1, "unknown": 2}
    assert rank[knowledge_of(before + after)] >= rank[knowledge_of(before)]


def test_a_word_that_is_not_an_effect_is_refused() -> None:
    with pytest.raises(ValueError):
        series_effect("none", "maybe")  # type: ignore[arg-type]


# --- the facts of one request -----------------------------------------------------------------


def a_call(*, app_authorized: bool = False) -> ToolCall:
    """A call on real SDK providers, its request under app-authorized or compatibility (as bind sets it)."""
    runtime = Runtime(
        TracerProvider().get_tracer(t.INSTRUMENTATION_NAME),
        Instruments.on(MeterProvider().get_meter(t.INSTRUMENTATION_NAME)),
    )
    call = ToolCall(runtime, "search", None)
    call.declaration = Declaration("app-authorized") if app_authorized else COMPATIBILITY  # as bind sets it
    return call


def came_to(call: ToolCall, outcome: Outcome, *, repeated: bool = False) -> Attempt:
    """One attempt of `call`, through the attempt's own steps: exchanged as `outcome` (an exchange
    not sent through `send`), then closed as repeated (the policy's word: a wait) or handed to the
    SDK (a failure declined by the budget)."""
    attempt = Attempt(call, None, outcome=outcome)
    attempt.close(Wait(0, None) if repeated else BUDGET if outcome.failure is not None else None)
    return attempt


def test_facts_count_what_was_sent() -> None:
    call = a_call()
    assert call.ledger.sent == 0
    came_to(call, NOT_SENT, repeated=True)  # never reached the connection: not sent
    assert call.ledger.sent == 0
    came_to(call, NO_RESPONSE, repeated=True)
    came_to(call, classify(200, "result"))
    assert call.ledger.sent == 2 and call.ledger.delivered == 200 and call.ledger.answer is not None


def test_under_compatibility_nothing_is_uncertain() -> None:
    call = a_call()
    came_to(call, NO_RESPONSE)
    assert call.ledger.unanswered and not call.ledger.uncertain(call.app_authorized)


def test_an_attempt_without_a_response_makes_an_app_authorized_call_uncertain() -> None:
    call = a_call(app_authorized=True)
    came_to(call, NO_RESPONSE, repeated=True)
    # A later error answer does not undo the attempt that lacked one.
    came_to(call, classify(200, "error"))
    assert call.ledger.answer is not None and call.ledger.uncertain(call.app_authorized)


def test_a_2xx_whose_answer_never_came_is_accepted_without_answer() -> None:
    call = a_call(app_authorized=True)
    attempt = came_to(call, classify(200, "later"))  # its answer is still to come on the stream
    assert call.ledger.delivered == 200
    assert call.ledger.accepted_without_answer and call.ledger.uncertain(call.app_authorized)
    call.answered("result")  # its connection's stream carried it (the call keeps it)
    attempt.abandon()  # its request ended: the attempt is settled as what its streams said
    assert call.ledger.answer == "result" and call.ledger.effect == "applied"
    assert not call.ledger.accepted_without_answer and not call.ledger.uncertain(call.app_authorized)


def test_a_chain_of_received_refusals_is_an_answer_throughout() -> None:
    call = a_call(app_authorized=True)
    for _ in range(2):
        came_to(call, classify(429, None), repeated=True)
    came_to(call, classify(429, None))
    assert call.ledger.sent == 3 and call.ledger.delivered == 429
    assert not call.ledger.uncertain(call.app_authorized)


def test_the_first_delivered_status_stands() -> None:
    call = a_call(app_authorized=True)
    came_to(call, classify(503, None))
    came_to(call, classify(200, "later"))
    assert call.ledger.delivered == 503
    assert not call.ledger.accepted_without_answer
