"""The redaction's shortcuts export what the full reading exports.

- Known keys: a RedactionRules decides each key's action once and caches it; a span whose every key
  it already knows as plain is read in one pass over its values (text.py's
  TextRules.may_change_any), and a record this library filed has its free-text values read the
  same way. A first span through a pipeline teaches its rules the keys, then the span under test
  with the same keys must leave as it leaves rules meeting those keys for the first time.
- The key=value rule's finer test: a short ASCII text is searched for the secret words one by one
  (lower-cased), any other text by one RE2 pass; both must find the same words.
"""

from __future__ import annotations

import string
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.trace import Status, StatusCode, Tracer
from tests.support.growth import work_of
from tests.support.records import full_record
from tests.support.redaction import Capture, Pipeline, every_string

from otel_mcp_replay import telemetry as t
from otel_mcp_replay.instrumentor import McpReplayInstrumentor
from otel_mcp_replay.record import validate_record
from otel_mcp_replay.redaction import MASK, URL_MASK, RedactingSpanProcessor, RedactionRules
from otel_mcp_replay.redaction import text as text_rules

PLAIN_KEYS = ("app.note", "app.count", "mcp.replay.word", t.GEN_AI_TOOL_NAME, t.JSONRPC_REQUEST_ID)
CLEAN: dict[str, Any] = {key: "clean" for key in PLAIN_KEYS}
SECRET = "Zq7secretBody"  # appears in no key, mask or clean value here


def exported(pipeline: Pipeline, attributes: dict[str, Any], *, warm: bool) -> ReadableSpan:
    """The span carrying `attributes` as `pipeline` exports it; `warm`: after a first span of the same
    keys with clean values has taught the rules those keys."""
    if warm:
        pipeline.one(**dict.fromkeys(attributes, "clean"))
    return pipeline.one(**attributes)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (f"Bearer {SECRET}", f"Bearer {MASK}"),
        (f"Bearer\t{SECRET}", f"Bearer\t{MASK}"),  # a tab: the trigger a value's repr would hide
        (f"failed: token={SECRET}", f"failed: token={MASK}"),
        (f"password: {SECRET}", f"password: {MASK}"),
        (
            f"see https://user:{SECRET}@host/path?q=1",
            f"see https://{URL_MASK}:{URL_MASK}@host/path?q={URL_MASK}",
        ),
        ((f"Bearer\t{SECRET}",), (f"Bearer\t{MASK}",)),  # one item: no separator in its text
        (("ok", f"token={SECRET}"), ("ok", f"token={MASK}")),
    ],
)
def test_a_value_under_known_plain_keys_is_masked_as_the_first_time(value: Any, expected: Any) -> None:
    attributes = {**CLEAN, "app.note": value}
    cold = exported(Pipeline(), attributes, warm=False)
    pipeline = Pipeline()
    warm = exported(pipeline, attributes, warm=True)
    assert set(PLAIN_KEYS) <= pipeline.processor.rules._plain_keys  # the rules did know the keys
    assert (warm.attributes or {})["app.note"] == (cold.attributes or {})["app.note"] == expected
    assert dict(warm.attributes or {}) == dict(cold.attributes or {})
    assert not any(SECRET in text for text in every_string(warm))


def test_a_user_value_pattern_reaches_values_under_known_plain_keys() -> None:
    pipeline = Pipeline(RedactionRules(redact_values=[r"acct-\d+"]))
    warm = exported(pipeline, {**CLEAN, "app.note": "for acct-12345 only", "app.count": 3}, warm=True)
    assert (warm.attributes or {})["app.note"] == f"for {MASK} only"
    assert (warm.attributes or {})["app.count"] == 3


def test_known_plain_keys_leave_numbers_bools_and_huge_ints_alone() -> None:
    values = {"app.count": 10**5000, "app.note": 1.5e300, "mcp.replay.word": True, t.JSONRPC_REQUEST_ID: 7}
    pipeline = Pipeline()
    warm = exported(pipeline, values, warm=True)
    assert dict(warm.attributes or {}) == values


def side_by_side() -> tuple[Capture, Capture, Tracer]:
    """A tracer whose spans reach `raw` as they are and `redacted` through the redaction."""
    raw, redacted = Capture(), Capture()
    provider = TracerProvider()
    provider.add_span_processor(raw)
    vouches = McpReplayInstrumentor().vouches  # as the configurator passes them
    provider.add_span_processor(RedactingSpanProcessor(redacted, RedactionRules(), vouches=vouches))
    return raw, redacted, provider.get_tracer("x")


def test_a_clean_span_of_known_keys_is_passed_as_the_very_same_object() -> None:
    raw, redacted, tracer = side_by_side()
    for request_id in ("1", "2"):  # the second: every key already known
        with tracer.start_as_current_span("tools/call search") as span:
            span.set_attributes({**CLEAN, t.JSONRPC_REQUEST_ID: request_id, "app.count": 2, "n": (1, 2)})
    assert redacted.ended[1] is raw.ended[1]


def test_a_clean_span_of_known_keys_costs_the_same_work_whatever_its_attribute_count() -> None:
    # Counted, not timed (tests/growth.py): no Python line runs per attribute, its text is tested in C.
    rules = RedactionRules()

    def work_for(count: int) -> int:
        def ended(value: str) -> ReadableSpan:
            attributes = {f"app.k{i}": value if i % 2 else i for i in range(count)}
            span = TracerProvider().get_tracer("x").start_span("work", attributes=attributes)
            span.end()
            return span  # type: ignore[return-value]

        rules.redact(ended("first"))  # teaches the rules the keys
        clean = ended("clean")
        assert rules.redact(clean)[0] is clean
        return work_of(lambda: rules.redact(clean))

    assert work_for(50) == work_for(5)


def test_a_sensitive_key_among_known_plain_keys_is_still_masked() -> None:
    pipeline = Pipeline()
    pipeline.one(**CLEAN)
    warm = pipeline.one(**CLEAN, **{"app.token": SECRET, "url.full": f"https://h/p?k={SECRET}"})
    assert (warm.attributes or {})["app.token"] == MASK
    assert (warm.attributes or {})["url.full"] == f"https://h/p?k={URL_MASK}"


def test_event_link_and_status_text_is_masked_after_the_keys_are_known() -> None:
    pipeline = Pipeline()
    for secret in ("clean", SECRET):  # the first span teaches the event's keys
        with pipeline.tracer.start_as_current_span("work") as span:
            span.add_event("exception", {"exception.message": f"failed: token={secret}"})
            span.set_status(Status(StatusCode.ERROR, f"Bearer {secret}"))
    last = pipeline.spans()[-1]
    assert dict(last.events[0].attributes or {}) == {"exception.message": f"failed: token={MASK}"}
    assert last.status.description == f"Bearer {MASK}"


# -- the record this library filed -------------------------------------------------------------------


def filed(pipeline: Pipeline, **overrides: Any) -> ReadableSpan:
    """A span holding a record filed as the plugin files it (vouched for), through `pipeline`."""
    with pipeline.tracer.start_as_current_span("tools/call search") as span:
        McpReplayInstrumentor().vouches.file(span, full_record(rows=3, **overrides))
    return pipeline.spans()[-1]


@pytest.mark.parametrize(
    ("field", "key"),
    [("tool", t.GEN_AI_TOOL_NAME), ("request_id", t.JSONRPC_REQUEST_ID), ("endpoint", t.ENDPOINT)],
)
def test_a_filed_record_text_value_a_rule_would_change_is_replaced_whole(field: str, key: str) -> None:
    value = "https://origin.example:8443" if field == "endpoint" else f"Bearer {SECRET}"
    rules = RedactionRules(redact_values=[r"origin\.example"]) if field == "endpoint" else None
    pipeline = Pipeline(rules, vouches=McpReplayInstrumentor().vouches)
    filed(pipeline)  # a clean one first
    (event,) = filed(pipeline, **{field: value}).events
    attributes = dict(event.attributes or {})
    assert attributes[key] == URL_MASK
    assert validate_record(attributes) == attributes
    assert pipeline.processor.refused_count == 0


def test_a_clean_filed_record_is_passed_as_the_very_same_event() -> None:
    raw, redacted, tracer = side_by_side()
    with tracer.start_as_current_span("tools/call search") as span:
        McpReplayInstrumentor().vouches.file(span, full_record(rows=3))
    assert redacted.ended[0] is raw.ended[0]


# -- the property ------------------------------------------------------------------------------------

TEXT = st.one_of(
    st.text(alphabet=string.ascii_letters + string.digits + " \t:=/@?#.-_", max_size=30),
    st.sampled_from(
        [f"Bearer {SECRET}", f"token={SECRET}", f"https://u:{SECRET}@h/p?q=1", f"Basic\tQWxh{SECRET}9/"]
    ),
)
VALUE = st.one_of(
    TEXT,
    st.integers(-(10**30), 10**30),
    st.floats(allow_nan=False),
    st.booleans(),
    st.lists(TEXT, min_size=1, max_size=3).map(tuple),
    st.lists(st.integers(0, 9), min_size=1, max_size=3).map(tuple),
)
KEY = st.sampled_from([*PLAIN_KEYS, "http.url", "app.secret", t.MCP_SESSION_ID, "url.query"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(KEY, VALUE, min_size=1, max_size=6))
def test_known_keys_export_what_unknown_keys_export(attributes: dict[str, Any]) -> None:
    cold = exported(Pipeline(), attributes, warm=False)
    warm = exported(Pipeline(), attributes, warm=True)
    assert dict(warm.attributes or {}) == dict(cold.attributes or {})


# -- the key=value rule's finer test -------------------------------------------------------------------

# The words' letters in both cases, the Kelvin sign and the long s (RE2 folds them to k and s),
# separators, and a few other letters: texts that hold, split or nearly hold a secret word.
WORD_LETTERS = sorted(set("".join(text_rules._SECRET_WORDS)))
ALPHABET = "".join(WORD_LETTERS) + "".join(WORD_LETTERS).upper() + "\u212a\u017f:=/ .-_xyz\u00e9"


@settings(max_examples=500, deadline=None)
@given(
    st.one_of(
        st.text(alphabet=ALPHABET, max_size=300),
        st.builds(
            lambda head, word, tail: head + word + tail,
            st.text(alphabet=ALPHABET, max_size=140),
            st.sampled_from(text_rules._SECRET_WORDS).flatmap(
                lambda word: st.tuples(*(st.sampled_from([c, c.upper()]) for c in word)).map("".join)
            ),
            st.text(alphabet=ALPHABET, max_size=140),
        ),
    )
)
def test_the_word_by_word_search_finds_what_re2_finds(text: str) -> None:
    assert text_rules._names_a_secret(text) == (text_rules._SECRET_WORD.search(text) is not None)


@pytest.mark.parametrize("word", ["toKen", "TOKEN", "Api_Key", "\u017fecret", "to\u212aen", "PassWord"])
@pytest.mark.parametrize("padding", [0, 300])  # a short text (word by word) and a long one (RE2)
def test_a_secret_written_into_text_is_masked_in_any_case(word: str, padding: int) -> None:
    value = "Zq7Body42"  # no secret word of its own: only `word` can admit the text
    text = "x" * padding + f" failed: {word}={value} at https://h/p"
    masked = RedactionRules()._texts.apply(text)
    assert value not in masked and f"={MASK}" in masked


class _Word(str):
    """A str subclass (an enum.StrEnum member is one): the SDK keeps it as it is, OTLP exports it as text."""


@pytest.mark.parametrize("known", [False, True])
def test_a_str_subclass_value_is_redacted_as_the_text_it_is(known: bool) -> None:
    """Found leaking: a str subclass under a plain or URL key was passed through unread."""
    _, redacted, tracer = side_by_side()
    values = {
        "app.note": "failed with token=hunter2secret",
        "url.full": "http://127.0.0.1:8000/mcp?key=hunter2secret",
        "app.items": ("token=hunter2secret", "plain"),
    }
    rounds = 2 if known else 1  # the second round: every key already known
    for _ in range(rounds):
        with tracer.start_as_current_span("as exact str") as span:
            span.set_attributes(values)
        with tracer.start_as_current_span("as a str subclass") as span:
            span.set_attributes(
                {key: tuple(map(_Word, v)) if type(v) is tuple else _Word(v) for key, v in values.items()}
            )
    assert len(redacted.ended) == 2 * rounds
    as_str, as_subclass = (dict(span.attributes or {}) for span in redacted.ended[-2:])
    assert "hunter2secret" not in repr(as_subclass)
    assert as_subclass == as_str
    assert MASK in as_str["app.note"]
