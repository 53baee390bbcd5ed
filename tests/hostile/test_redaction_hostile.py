"""Redaction on hostile or unusual input: linear time, per-entry rules, secret shapes.

- F1/F8: every rule runs in time linear in the text, on server text and on the user's patterns: the
  work is counted (tests/growth.py), never timed; the user's patterns run on RE2, linear by
  construction (the timed figures: benchmarks/hostile_redaction.py).
- F6: a bad user entry drops that entry only; no silent count or length caps; `\\,` and commas in
  groups stay in their pattern.
- F7: a user key rule reaches the `mcp.tool.request_attempts` record's keys too.
- F9: secrets written into free text (status descriptions, exception messages) are masked.
- F11: vendor authentication headers are sensitive keys (listed in test_redaction.SENSITIVE_KEYS);
  others are added with REDACT_KEYS.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
import re2  # type: ignore[import-untyped]
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode
from tests.support.growth import assert_linear, work_of
from tests.support.records import full_record
from tests.support.redaction import Pipeline, every_string, span_with

from otel_mcp_replay import telemetry as t
from otel_mcp_replay.record import validate_record
from otel_mcp_replay.redaction import (
    ENV_REDACT_KEYS,
    ENV_REDACT_VALUES,
    MASK,
    RedactingSpanProcessor,
    RedactionRules,
    split_patterns,
)
from otel_mcp_replay.redaction.user_rules import UserRules

CANARY = "CANARY-5d1c"


def ended(text: str) -> ReadableSpan:
    """An ended span carrying `text` as its status description and an exception message."""
    span = TracerProvider().get_tracer("hostile").start_span("tools/call")
    span.add_event("exception", {"exception.message": text})
    span.set_status(Status(StatusCode.ERROR, text))
    span.end()
    return span  # type: ignore[return-value]


def redaction_of(rules: RedactionRules, make: Callable[[int], str]) -> Callable[[int], Callable[[], object]]:
    """`case(n)` for assert_linear: the redaction of one span holding `make(n)` twice (its status
    and an event)."""

    def case(n: int) -> Callable[[], object]:
        processor = RedactingSpanProcessor(SimpleSpanProcessor(InMemorySpanExporter()), rules)
        span = ended(make(n))
        return lambda: processor.on_end(span)

    return case


def assert_redacted_in_linear_work(rules: RedactionRules, make: Callable[[int], str]) -> None:
    assert_linear(redaction_of(rules, make), 100_000)


# -- F1: the URL-in-text rule on server text ----------------------------------------------------


def test_an_error_message_of_letters_before_a_bare_scheme_separator_is_redacted_in_linear_time() -> None:
    assert_redacted_in_linear_work(RedactionRules(), lambda n: "a" * n + " ://")


def test_many_urls_in_one_text_are_redacted_in_linear_time() -> None:
    assert_redacted_in_linear_work(RedactionRules(), lambda n: "see https://h/p?token=x " * (n // 24))


# -- F8: the user's patterns run on a linear-time engine ----------------------------------------


@pytest.mark.parametrize("pattern", [r"(a{1,30}){1,30}$", r"(a?){25}a{25}", r"(a+)+b", r"(\w+)+$"])
def test_nested_repeats_in_a_user_pattern_cannot_stall(pattern: str) -> None:
    # A backtracking engine stalls on these (2**n steps on n letters: a hang, which pytest's
    # timeout ends); RE2 never backtracks: the pattern must be RE2's, its redaction linear work.
    (compiled,) = UserRules.given((), [pattern], None).value_patterns
    assert type(compiled) is type(re2.compile("a"))
    rules = RedactionRules(redact_values=[pattern])
    assert_redacted_in_linear_work(rules, lambda n: "a" * n + "!")


def test_a_pattern_too_large_for_the_engine_is_dropped_alone(caplog: pytest.LogCaptureFixture) -> None:
    too_large = r"(((a{100}){100}){100})"
    with caplog.at_level(logging.ERROR, logger="otel_mcp_replay"):
        rules = RedactionRules.from_env_or_builtin(
            {ENV_REDACT_VALUES: f"CUST-[0-9]+,{too_large},acct_[a-z]+"}
        )
    errors = [record.getMessage() for record in caplog.records if record.levelno == logging.ERROR]
    assert len(errors) == 1 and ENV_REDACT_VALUES in errors[0] and "entry 2" in errors[0]
    assert "{100}" not in caplog.text
    assert span_with({"note": "CUST-1 acct_abc"}, rules) == {"note": f"{MASK} {MASK}"}


# -- F6: a bad entry drops that entry only; no silent caps ---------------------------------------


def test_one_bad_entry_drops_that_entry_only(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="otel_mcp_replay"):
        rules = RedactionRules.from_env_or_builtin(
            {
                ENV_REDACT_VALUES: f"CUST-[0-9]+,{CANARY}**,acct_[a-z]+",
                ENV_REDACT_KEYS: f"^app\\.x$,{CANARY}\\",
            }
        )
    errors = [record.getMessage() for record in caplog.records if record.levelno == logging.ERROR]
    assert len(errors) == 2
    assert any(ENV_REDACT_VALUES in error and "entry 2" in error for error in errors)
    assert any(ENV_REDACT_KEYS in error and "entry 2" in error for error in errors)
    assert CANARY not in caplog.text and CANARY[:4] not in caplog.text
    got = span_with({"note": "CUST-1 and acct_abc", "app.x": "kept?", "db.password": "pw"}, rules)
    assert got == {"note": f"{MASK} and {MASK}", "app.x": MASK, "db.password": MASK}


def test_from_env_still_raises_for_the_first_bad_entry() -> None:
    with pytest.raises(ValueError, match=rf"^{ENV_REDACT_VALUES}: entry 2 is not a valid regular expression"):
        RedactionRules.from_env({ENV_REDACT_VALUES: f"ok,{CANARY}**"})


def test_more_than_32_entries_all_apply() -> None:
    words = [f"word{index:02d}x" for index in range(40)]
    rules = RedactionRules.from_env({ENV_REDACT_VALUES: ",".join(words)})
    got = span_with({"note": " ".join(words)}, rules)
    assert got == {"note": " ".join([MASK] * 40)}


def test_an_entry_longer_than_256_characters_applies() -> None:
    long_entry = "|".join(f"secret{index:03d}" for index in range(40))  # 399 characters
    assert len(long_entry) > 256
    rules = RedactionRules.from_env({ENV_REDACT_VALUES: long_entry})
    assert span_with({"note": "a secret039 b"}, rules) == {"note": f"a {MASK} b"}


def test_commas_inside_groups_and_escaped_commas_stay_in_their_pattern() -> None:
    assert split_patterns(r"(foo,bar),x\,y,[,;]z,q{1,2}") == ["(foo,bar)", r"x\,y", "[,;]z", "q{1,2}"]
    assert split_patterns(r"[],]a,b") == ["[],]a", "b"]  # a ] first in a class is a literal
    rules = RedactionRules.from_env({ENV_REDACT_VALUES: r"(foo,bar),x\,y"})
    assert span_with({"note": "foo,bar x,y foo"}, rules) == {"note": f"{MASK} {MASK} foo"}


def test_an_oversized_variable_is_reported_and_its_first_entries_still_apply(
    caplog: pytest.LogCaptureFixture,
) -> None:
    value = "CUST-[0-9]+," + ",".join(["zzzz"] * 400_000)  # about 2 MB
    with caplog.at_level(logging.ERROR, logger="otel_mcp_replay"):
        rules = RedactionRules.from_env_or_builtin({ENV_REDACT_VALUES: value})
    errors = [record.getMessage() for record in caplog.records if record.levelno == logging.ERROR]
    assert len(errors) == 1 and ENV_REDACT_VALUES in errors[0] and "ignored" in errors[0]
    assert span_with({"note": "CUST-12"}, rules) == {"note": MASK}
    # Read up to its cap: twice the variable is no more work at all.
    small = work_of(lambda: RedactionRules.from_env_or_builtin({ENV_REDACT_VALUES: value}))
    large = work_of(lambda: RedactionRules.from_env_or_builtin({ENV_REDACT_VALUES: value + "," + value}))
    assert 0 < large <= small * 1.01, (small, large)


# -- F7: user key rules reach the record's keys ---------------------------------------------------


def test_a_user_key_rule_masks_a_record_text_value_and_keeps_the_record_valid() -> None:
    pipeline = Pipeline(RedactionRules(redact_keys=[r"tool\.name$"]))
    with pipeline.tracer.start_as_current_span("tools/call") as span:
        span.set_attribute(t.GEN_AI_TOOL_NAME, "charge_card")
        span.add_event(t.RECORD_EVENT, full_record(rows=2, tool="charge_card"))
    exported = pipeline.spans()[0]
    assert (exported.attributes or {})[t.GEN_AI_TOOL_NAME] == MASK
    (event,) = exported.events
    attributes = dict(event.attributes or {})
    assert event.name == t.RECORD_EVENT and attributes[t.GEN_AI_TOOL_NAME] == "REDACTED"
    assert validate_record(attributes) == attributes
    assert "charge_card" not in list(every_string(exported))
    assert pipeline.processor.refused_count == 0


@pytest.mark.parametrize("pattern", [r"^mcp\.replay\.effect$", r"attempts\.status", r"may_have_run"])
def test_a_user_key_rule_on_a_record_count_or_word_refuses_the_record_whole(pattern: str) -> None:
    # Those values cannot be masked and stay inside the allow-list: the record goes, counted.
    pipeline = Pipeline(RedactionRules(redact_keys=[pattern]))
    with pipeline.tracer.start_as_current_span("tools/call") as span:
        span.add_event(t.RECORD_EVENT, full_record(rows=2))
    (event,) = pipeline.spans()[0].events
    assert event.name == t.RECORD_REFUSED_EVENT and not event.attributes
    assert pipeline.processor.refused_count == pipeline.refused_hook_calls == 1


# -- F9: secrets in free text ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (
            "401 Unauthorized: Authorization: Bearer brr-Canary1",
            "401 Unauthorized: Authorization: Bearer [REDACTED]",
        ),
        ("sent header bearer eyJhbGciOi.x-y_z", "sent header bearer [REDACTED]"),
        ("bad request: token=tok-Canary2&x=1", "bad request: token=[REDACTED]&x=1"),
        ("login failed, password: pw-Canary3", "login failed, password: [REDACTED]"),
        ("config api_key=ak-Canary4 rejected", "config api_key=[REDACTED] rejected"),
        ('body {"password": "pw Canary5", "user": "ann"}', 'body {"password": "[REDACTED]", "user": "ann"}'),
        ("x-api-key: ak-Canary6", "x-api-key: [REDACTED]"),
        ("client_secret='cs-Canary7'", "client_secret='[REDACTED]'"),
        ("Basic dXNlcjpwYXNzd29yZA==", "Basic [REDACTED]"),
    ],
)
def test_secret_shapes_in_free_text_are_masked(given: str, expected: str) -> None:
    pipeline = Pipeline()
    with pipeline.tracer.start_as_current_span("work") as span:
        span.set_attribute("error.message", given)
        span.add_event("exception", {"exception.message": given})
        span.set_status(Status(StatusCode.ERROR, given))
    exported = pipeline.spans()[0]
    assert exported.status.description == expected
    assert (exported.attributes or {})["error.message"] == expected
    assert dict(exported.events[0].attributes or {})["exception.message"] == expected


@pytest.mark.parametrize(
    "plain",
    [
        "gen_ai.usage.input_tokens=12",
        "max_tokens: 100",
        "Server returned an error response",
        "https://h/p?token=REDACTED",
        "basic validation failed",
        "tokens are counted",
        "author: Ann",
    ],
)
def test_free_text_without_a_secret_shape_is_left_alone(plain: str) -> None:
    assert span_with({"note": plain}) == {"note": plain}


# -- F11: vendor authentication headers (the built-in ones: test_redaction.SENSITIVE_KEYS) ---------------


def test_more_headers_are_added_with_redact_keys() -> None:
    rules = RedactionRules.from_env({ENV_REDACT_KEYS: r"\.x_my_vendor_id$"})
    got: dict[str, Any] = span_with({"http.request.header.x_my_vendor_id": ("v",), "app.x_my": "y"}, rules)
    assert got == {"http.request.header.x_my_vendor_id": (MASK,), "app.x_my": "y"}
