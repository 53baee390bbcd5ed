"""What is known of an attempt's and a series' effect, and the facts of one request."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_mcp_replay import telemetry as t
from otel_mcp_replay.declaration import COMPATIBILITY, declaration_of
from otel_mcp_replay.law import (
    Effect,
    RequestFacts,
    SeriesKnowledge,
    attempt_effect,
    needs_series,
)

# --- one attempt ------------------------------------------------------------------------------


def test_an_attempt_never_sent_has_no_effect() -> None:
    assert attempt_effect(sent=False, result_came=False) == "none"


def test_an_attempt_answered_with_a_result_applied() -> None:
    """A JSON-RPC result came back, isError or not: the tool ran."""
    assert attempt_effect(sent=True, result_came=True) == "applied"


def test_an_attempt_sent_without_a_result_is_unknown() -> None:
    """A 429, a 5xx, a JSON-RPC error, a drop: none of them proves the tool did not run."""
    assert attempt_effect(sent=True, result_came=False) == "unknown"


# --- a series: uncertainty survives, evidence is never erased ---------------------------------


def knowledge_of(effects: list[Effect]) -> Effect:
    knowledge = SeriesKnowledge()
    for effect in effects:
        knowledge.note(effect)
    return knowledge.effect


def test_a_series_that_noted_nothing_has_no_effect() -> None:
    assert SeriesKnowledge().effect == "none"


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
        SeriesKnowledge().note("maybe")  # type: ignore[arg-type]


# --- the facts of one request -----------------------------------------------------------------


def test_facts_count_what_was_sent() -> None:
    facts = RequestFacts(7, watched=True)
    assert facts.id == 7 and facts.sent == 0
    facts.sent_one()
    facts.sent_one()
    assert facts.sent == 2


def test_under_compatibility_nothing_is_uncertain() -> None:
    facts = RequestFacts("a", watched=True)
    facts.sent_one()
    facts.no_answer()
    assert not facts.uncertain


def test_an_attempt_without_a_response_makes_an_app_authorized_call_uncertain() -> None:
    facts = RequestFacts(1, watched=True)
    facts.app_authorized_policy()
    facts.sent_one()
    facts.no_answer()
    facts.sent_one()
    facts.delivered_status(500)
    facts.answered()  # a later error answer does not undo the attempt that lacked one
    assert facts.uncertain


def test_a_2xx_whose_answer_never_came_is_accepted_without_answer() -> None:
    facts = RequestFacts(1, watched=True)
    facts.app_authorized_policy()
    facts.sent_one()
    facts.delivered_status(202)
    assert facts.accepted_without_answer and facts.uncertain
    facts.answered()
    assert not facts.accepted_without_answer and not facts.uncertain


def test_an_unwatched_connection_never_decides_by_its_answers() -> None:
    facts = RequestFacts(1, watched=False)
    facts.app_authorized_policy()
    facts.sent_one()
    facts.delivered_status(200)
    assert not facts.accepted_without_answer and not facts.uncertain


def test_a_chain_of_received_refusals_is_an_answer_throughout() -> None:
    facts = RequestFacts(1, watched=True)
    facts.app_authorized_policy()
    for _ in range(3):
        facts.sent_one()
    facts.delivered_status(429)
    assert not facts.uncertain


def test_the_first_delivered_status_stands() -> None:
    facts = RequestFacts(1, watched=True)
    facts.app_authorized_policy()
    facts.delivered_status(503)
    facts.delivered_status(200)
    assert not facts.accepted_without_answer


def test_the_first_settlement_stands() -> None:
    facts = RequestFacts(1, watched=True)
    assert facts.verdict is None and not facts.may_have_run
    facts.settle("failed", True)
    facts.settle("completed", False)
    assert facts.verdict == "failed" and facts.may_have_run


def test_only_a_failed_call_may_have_run() -> None:
    with pytest.raises(ValueError):
        RequestFacts(1, watched=True).settle("completed", True)


# --- when a series is needed ------------------------------------------------------------------


def test_needs_series() -> None:
    assert not needs_series(COMPATIBILITY)
    assert not needs_series(declaration_of({"tools": {"charge": {"changes": True}}}))
    assert needs_series(declaration_of({"tools": {"search": {"on": ["network"]}}}))
    assert needs_series(declaration_of({"policy": "app-authorized"}))
    assert needs_series(declaration_of({"adapter": "agentcore-runtime"}))
