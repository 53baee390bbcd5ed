"""Redaction through the real SDK pipeline: nothing planted leaves, everything else is kept.

Spans are made by the SDK's own TracerProvider and land in its InMemorySpanExporter behind
RedactingSpanProcessor(SimpleSpanProcessor(...)) or RedactingSpanExporter(...).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import string
import traceback
from collections.abc import Iterator, Mapping, Sequence
from importlib.metadata import version
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanKind, Status, StatusCode
from tests.support.records import full_record
from tests.support.redaction import Capture, Pipeline, every_string, span_with

from otel_mcp_replay import telemetry as t
from otel_mcp_replay.record import validate_record
from otel_mcp_replay.redaction import (
    ENV_REDACT_CONTENT,
    ENV_REDACT_KEYS,
    ENV_REDACT_VALUES,
    ENV_SESSION_KEY,
    MASK,
    RedactingSpanExporter,
    RedactingSpanProcessor,
    RedactionRules,
    mask_url,
    split_patterns,
)

SESSION_KEY = "a-test-session-key-of-enough-bytes"


# -- sensitive keys --------------------------------------------------------------------------------

SENSITIVE_KEYS = [
    "http.request.header.authorization",
    "http.request.header.proxy-authorization",
    "http.request.header.cookie",
    "http.response.header.set-cookie",
    "http.response.header.set_cookie",
    "app.token",
    "oauth.access_token",
    "accessToken",
    "app.refresh-token",
    "x-csrf-token",
    "db.password",
    "db.passwd",
    "user.pwd",
    "client_secret",
    "app.secrets",
    "api key",
    "api-key",
    "api_key",
    "apikey",
    "apiKey",
    "APIKey",
    "http.request.header.x-api-key",
    "ssh.private_key",
    "tls.private-key",
    "aws.access_key",
    "aws.credentials",
    "credential",
    "session_token",
    "aws.sessionToken",
    "payment.idempotency_key",
    "db.connection_string",
    "jwt",
    "app.bearer",
    "app.passphrase",
    # Vendor authentication headers, as the HTTP instrumentations capture them.
    "http.request.header.x_auth",
    "http.request.header.x-auth",
    "http.request.header.x_auth_token",
    "http.request.header.ocp_apim_subscription_key",
    "http.request.header.ocp-apim-subscription-key",
    "http.request.header.x_api_key",
    "http.request.header.x_amz_security_token",
    "http.request.header.x_goog_api_key",
    "http.request.header.proxy_authorization",
    "http.request.header.x_csrf_token",
    "http.request.header.x_functions_key",
    "http.request.header.x_hub_signature_256",
    "http.request.header.x_amz_signature",
]

NOT_SENSITIVE_KEYS = [
    t.ATTEMPT,
    t.WAIT_MS,
    t.FAILURE,
    t.PERMISSION_BY,
    t.HTTP_RESEND_COUNT,
    t.HTTP_STATUS_CODE,
    t.MCP_METHOD_NAME,
    t.GEN_AI_TOOL_NAME,
    t.JSONRPC_REQUEST_ID,
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
    "gen_ai.request.max_tokens",
    "gen_ai.token.type",
    "http.request.method",
    "server.address",
    "url.path",
    "app.tokenizer",
    "app.secretary",
]


@pytest.mark.parametrize("key", SENSITIVE_KEYS)
def test_sensitive_keys_are_masked(key: str) -> None:
    assert span_with({key: "s3cret-value"})[key] == MASK


@pytest.mark.parametrize("key", NOT_SENSITIVE_KEYS)
def test_our_keys_and_counts_are_left_alone(key: str) -> None:
    assert span_with({key: "plain-value"})[key] == "plain-value"
    assert span_with({key: 42})[key] == 42


def test_sensitive_keys_mask_every_type_and_keep_sequence_length() -> None:
    got = span_with(
        {
            "http.request.header.authorization": ("Bearer one", "Bearer two"),
            "app.pin.password": 1234,
            "app.token.float": 1.5,
            "app.has_token": True,
            "app.api_key": "",
        }
    )
    assert got["http.request.header.authorization"] == (MASK, MASK)
    # A number or bool under a sensitive key is masked too, as the string: a PIN is still a secret.
    assert got["app.pin.password"] == MASK
    assert got["app.token.float"] == MASK
    assert got["app.has_token"] == MASK
    assert got["app.api_key"] == MASK


def test_non_sensitive_non_strings_are_untouched() -> None:
    values = {
        "app.count": 3,
        "app.ratio": 0.5,
        "app.flag": False,
        "app.list": (1, 2, 3),
        "app.words": ("a", "b"),
    }
    assert span_with(values) == values


# -- URLs ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (
            "https://user:pass@host/p?a=1&token=x",
            "https://REDACTED:REDACTED@host/p?a=REDACTED&token=REDACTED",
        ),
        ("https://user@host:8443/a/b?x=1", "https://REDACTED@host:8443/a/b?x=REDACTED"),
        ("https://host/p", "https://host/p"),
        ("https://host/p?", "https://host/p?"),
        ("https://host/p?empty=&bare", "https://host/p?empty=&REDACTED"),
        ("https://host/p?a=1;b=2#frag", "https://host/p?a=REDACTED;b=REDACTED#REDACTED"),
        ("https://host/p#access_token=abc&state=1", "https://host/p#access_token=REDACTED&state=REDACTED"),
        ("https://u:p@[::1]:80/p?q=1", "https://REDACTED:REDACTED@[::1]:80/p?q=REDACTED"),
        ("https://a@b@host/p", "https://REDACTED@host/p"),
        ("https://user:pa?ss@host/p?q=1", "https://REDACTED:REDACTED@host/p?q=REDACTED"),
        ("https://user:pa#ss@host/p", "https://REDACTED:REDACTED@host/p"),
        ("//user:pw@host/p?t=1", "//REDACTED:REDACTED@host/p?t=REDACTED"),
        ("user:pw@host/p", "REDACTED:REDACTED@host/p"),
        ("/p/q?token=x", "/p/q?token=REDACTED"),
        ("https://host/users/@me?x=1", "https://host/users/@me?x=REDACTED"),
        ("https://host:8080?email=a@b.c", "https://host:8080?email=REDACTED"),
        ("https://REDACTED:REDACTED@host/p?a=REDACTED", "https://REDACTED:REDACTED@host/p?a=REDACTED"),
    ],
)
def test_mask_url(given: str, expected: str) -> None:
    assert mask_url(given) == expected
    assert mask_url(expected) == expected  # idempotent


@pytest.mark.parametrize(
    "weird",
    [
        "",
        "://",
        "http://",
        "http://[::1",
        "@",
        "@@@",
        "?",
        "#",
        "?&&;=",
        "http://a:b:c@",
        "\ud800://x@y?z",
        "%%%",
    ],
)
def test_malformed_urls_never_raise(weird: str) -> None:
    assert isinstance(mask_url(weird), str)
    assert isinstance(span_with({"url.full": weird}).get("url.full", ""), str)


def test_url_attributes_are_masked_host_and_path_kept() -> None:
    url = "https://alice:hunter2@api.example.com:8443/v1/tools?a=1&token=tok-123#frag"
    got = span_with(
        {
            "url.full": url,
            "http.url": url,
            "url.original": url,
            "url.query": "a=1&token=tok-123",
            "url.fragment": "access_token=tok-123",
            "http.target": "/v1/tools?token=tok-123",
            "http.request.header.referer": (url,),
            "mcp.server.url": url,
            "url.path": "/v1/tools",
        }
    )
    masked = "https://REDACTED:REDACTED@api.example.com:8443/v1/tools?a=REDACTED&token=REDACTED#REDACTED"
    assert got["url.full"] == got["http.url"] == got["url.original"] == got["mcp.server.url"] == masked
    assert got["http.request.header.referer"] == (masked,)
    assert got["url.query"] == "a=REDACTED&token=REDACTED"
    assert got["url.fragment"] == "access_token=REDACTED"
    assert got["http.target"] == "/v1/tools?token=REDACTED"
    assert got["url.path"] == "/v1/tools"


def test_urls_quoted_in_free_text_and_status_are_masked() -> None:
    pipeline = Pipeline()
    with pipeline.tracer.start_as_current_span("work") as span:
        span.set_attribute("error.message", "Client error for url 'https://u:pw@h/p?token=tok-9' (401)")
        try:
            raise RuntimeError("GET https://h/p?token=tok-9 failed")
        except RuntimeError as error:
            span.record_exception(error)
            span.set_status(Status(StatusCode.ERROR, "failed: https://h/p?token=tok-9"))
    exported = pipeline.spans()[0]
    assert exported.attributes is not None
    assert (
        exported.attributes["error.message"]
        == "Client error for url 'https://REDACTED:REDACTED@h/p?token=REDACTED' (401)"
    )
    assert exported.status.status_code is StatusCode.ERROR
    assert exported.status.description == "failed: https://h/p?token=REDACTED"
    assert not any("tok-9" in text for text in every_string(exported))
    assert exported.events[0].name == "exception"


# -- session ids ---------------------------------------------------------------------------------


def expected_hash(session_id: str, key: str = SESSION_KEY) -> str:
    return "h:" + hmac.new(key.encode(), session_id.encode(), hashlib.sha256).hexdigest()[:16]


def test_session_id_is_a_keyed_hash_that_correlates() -> None:
    pipeline = Pipeline(RedactionRules(session_key=SESSION_KEY))
    first = pipeline.one(**{t.MCP_SESSION_ID: "sess-A"})
    second = pipeline.one(**{t.MCP_SESSION_ID: "sess-A"})
    other = pipeline.one(**{t.MCP_SESSION_ID: "sess-B"})
    header = pipeline.one(**{"http.response.header.mcp-session-id": ("sess-A",), "app.sessionId": "sess-A"})
    hashed = expected_hash("sess-A")
    assert first.attributes is not None and second.attributes is not None and other.attributes is not None
    assert first.attributes[t.MCP_SESSION_ID] == second.attributes[t.MCP_SESSION_ID] == hashed
    assert other.attributes[t.MCP_SESSION_ID] == expected_hash("sess-B") != hashed
    assert header.attributes == {"http.response.header.mcp-session-id": (hashed,), "app.sessionId": hashed}


def test_session_key_from_env_and_the_process_key_otherwise() -> None:
    from_env = RedactionRules.from_env({ENV_SESSION_KEY: SESSION_KEY})
    assert span_with({t.MCP_SESSION_ID: "sess-A"}, from_env)[t.MCP_SESSION_ID] == expected_hash("sess-A")
    # No key: one random key per process, so two rules objects of this process still agree.
    one = span_with({t.MCP_SESSION_ID: "sess-A"}, RedactionRules())[t.MCP_SESSION_ID]
    two = span_with({t.MCP_SESSION_ID: "sess-A"}, RedactionRules.from_env({}))[t.MCP_SESSION_ID]
    assert one == two != expected_hash("sess-A")
    assert one.startswith("h:") and len(one) == 18


def test_a_numeric_session_id_is_hashed_too() -> None:
    got = span_with({t.MCP_SESSION_ID: 12345}, RedactionRules(session_key=SESSION_KEY))
    assert got[t.MCP_SESSION_ID] == expected_hash("12345")


# -- the record ------------------------------------------------------------------------------------


def test_a_valid_record_passes_unchanged_and_is_not_counted() -> None:
    pipeline = Pipeline()
    record = full_record()
    with pipeline.tracer.start_as_current_span("tools/call search") as span:
        span.add_event(t.RECORD_EVENT, record)
    (event,) = pipeline.spans()[0].events
    assert event.name == t.RECORD_EVENT
    assert dict(event.attributes or {}) == record
    assert validate_record(dict(event.attributes or {})) == record
    assert pipeline.processor.refused_count == pipeline.refused_hook_calls == 0


@pytest.mark.parametrize(
    "spoil",
    [
        {"tool.arguments": '{"card": "4111"}'},  # a key outside the list
        {t.VERDICT: "maybe"},  # a word outside its set
        {t.ENDPOINT: "https://user:pw@host:443/path?token=x"},  # a URL with credentials and a path
        {t.ATTEMPTS_STATUS: (429,)},  # ragged columns
    ],
)
def test_a_record_outside_the_list_is_refused_whole_and_counted(spoil: dict[str, Any]) -> None:
    pipeline = Pipeline()
    record = {**full_record(rows=3), **spoil}
    with pipeline.tracer.start_as_current_span("tools/call search") as span:
        span.set_attribute(t.GEN_AI_TOOL_NAME, "search")
        span.add_event("before")
        span.add_event(t.RECORD_EVENT, record)
        span.add_event("after", {"k": "v"})
    exported = pipeline.spans()[0]
    assert [event.name for event in exported.events] == ["before", t.RECORD_REFUSED_EVENT, "after"]
    refused = exported.events[1]
    assert not refused.attributes  # no values at all: not even the allowed ones
    assert refused.timestamp == exported.events[0].timestamp or refused.timestamp > 0
    assert exported.attributes == {t.GEN_AI_TOOL_NAME: "search"}
    assert pipeline.processor.refused_count == pipeline.refused_hook_calls == 1
    strings = list(every_string(exported))
    assert not any(str(value) in strings for value in spoil.values() if isinstance(value, str))


def test_a_refused_event_written_by_anyone_carries_no_values() -> None:
    pipeline = Pipeline()
    with pipeline.tracer.start_as_current_span("work") as span:
        span.add_event(t.RECORD_REFUSED_EVENT, {"leak": "value"})
    (event,) = pipeline.spans()[0].events
    assert event.name == t.RECORD_REFUSED_EVENT and not event.attributes
    assert pipeline.processor.refused_count == 0


def test_a_user_value_rule_replaces_a_record_value_whole_and_keeps_it_valid() -> None:
    pipeline = Pipeline(RedactionRules(redact_values=[r"billing"]))
    with pipeline.tracer.start_as_current_span("tools/call") as span:
        span.add_event(t.RECORD_EVENT, full_record(rows=2, endpoint="billing-eu"))
    (event,) = pipeline.spans()[0].events
    attributes = dict(event.attributes or {})
    assert attributes[t.ENDPOINT] == "REDACTED"
    assert validate_record(attributes) == attributes
    # The same span through a second redaction stays valid (the record is not refused later).
    again = Pipeline(RedactionRules(redact_values=[r"billing"]))
    again.processor.on_end(pipeline.spans()[0])
    assert again.spans()[0].events[0].name == t.RECORD_EVENT


def test_the_hook_may_raise_without_stopping_spans() -> None:
    exporter = InMemorySpanExporter()

    def broken() -> None:
        raise RuntimeError("metrics are down")

    provider = TracerProvider()
    processor = RedactingSpanProcessor(SimpleSpanProcessor(exporter), RedactionRules(), on_refused=broken)
    provider.add_span_processor(processor)
    with provider.get_tracer("x").start_as_current_span("work") as span:
        span.add_event(t.RECORD_EVENT, {"not": "a record"})
    assert exporter.get_finished_spans()[0].events[0].name == t.RECORD_REFUSED_EVENT
    assert processor.refused_count == 1


# -- what is kept ------------------------------------------------------------------------------------


def test_everything_but_the_values_is_kept() -> None:
    raw, redacted = Capture(), Capture()
    limits = SpanLimits(max_span_attributes=4, max_events=2, max_links=1, max_event_attributes=2)
    provider = TracerProvider(resource=Resource.create({"service.name": "kept"}), span_limits=limits)
    provider.add_span_processor(raw)
    provider.add_span_processor(RedactingSpanProcessor(redacted, RedactionRules(session_key=SESSION_KEY)))
    tracer = provider.get_tracer("scope-name", "9.9", schema_url="https://schema/1")
    with tracer.start_as_current_span("parent") as parent:
        parent_context = parent.get_span_context()
    links = [
        Link(parent_context, {"x": "dropped-by-limit"}),
        Link(parent_context, {"link.token": "tok-L", "link.kind": "follows"}),
    ]
    with tracer.start_as_current_span("child", kind=SpanKind.CLIENT, links=links) as span:
        span.set_attributes({"a": 1, "b": 2, "c": 3, "d": 4, "app.secret": "sec-1"})  # one dropped
        span.add_event("e0")  # the oldest: dropped by the limit
        span.add_event("e1", {"z": 1, "p": "https://u:p@h/?q=tok-E", "password": "pw-E"})  # z dropped
        span.add_event("e2")
        span.set_status(Status(StatusCode.ERROR, "boom https://h/?token=tok-S"))
    original, copy = raw.ended[-1], redacted.ended[-1]
    assert copy is not original
    assert copy.name == original.name == "child"
    assert copy.context == original.context and copy.parent == original.parent
    assert copy.kind is SpanKind.CLIENT
    assert (copy.start_time, copy.end_time) == (original.start_time, original.end_time)
    assert copy.resource is original.resource
    assert copy.instrumentation_scope == original.instrumentation_scope
    assert (
        copy.instrumentation_scope is not None and copy.instrumentation_scope.schema_url == "https://schema/1"
    )
    assert copy.status.status_code is StatusCode.ERROR
    assert copy.status.description == "boom https://h/?token=REDACTED"
    assert (copy.dropped_attributes, copy.dropped_events, copy.dropped_links) == (
        original.dropped_attributes,
        original.dropped_events,
        original.dropped_links,
    )
    assert original.dropped_attributes == 1 and original.dropped_events == 1 and original.dropped_links == 1
    assert dict(copy.attributes or {}) == {"b": 2, "c": 3, "d": 4, "app.secret": MASK}
    assert [event.name for event in copy.events] == ["e1", "e2"]
    assert [event.timestamp for event in copy.events] == [event.timestamp for event in original.events]
    assert copy.events[0].dropped_attributes == original.events[0].dropped_attributes == 1
    assert dict(copy.events[0].attributes or {}) == {
        "p": "https://REDACTED:REDACTED@h/?q=REDACTED",
        "password": MASK,
    }
    assert copy.events[1] is original.events[1]  # nothing to change: the same event object
    (link,) = copy.links
    assert link.context == original.links[0].context == parent_context
    assert dict(link.attributes or {}) == {"link.token": MASK, "link.kind": "follows"}
    assert link.dropped_attributes == original.links[0].dropped_attributes
    for text in every_string(copy):
        assert not any(secret in text for secret in ("tok-L", "sec-1", "tok-E", "pw-E", "tok-S"))
    # The copy reads like any span: its exporter-facing forms work.
    assert '"app.secret": "[REDACTED]"' in copy.to_json()


def test_a_span_no_rule_changes_is_passed_as_the_very_same_object() -> None:
    raw, redacted = Capture(), Capture()
    provider = TracerProvider()
    provider.add_span_processor(raw)
    provider.add_span_processor(RedactingSpanProcessor(redacted, RedactionRules()))
    with provider.get_tracer("x").start_as_current_span("tools/call search") as span:
        span.set_attributes({t.MCP_METHOD_NAME: "tools/call", t.GEN_AI_TOOL_NAME: "search", "n": (1, 2)})
        span.add_event(t.RECORD_EVENT, full_record())
    assert redacted.ended[0] is raw.ended[0]


def test_redacting_twice_changes_nothing_more() -> None:
    once = Pipeline(RedactionRules(session_key=SESSION_KEY))
    with once.tracer.start_as_current_span("work") as span:
        span.set_attributes(
            {t.MCP_SESSION_ID: "sess-A", "url.full": "https://u:p@h/?t=1", "db.password": "x"}
        )
        span.add_event(t.RECORD_EVENT, full_record(rows=5))
    first = once.spans()[0]
    twice = Pipeline(RedactionRules(session_key=SESSION_KEY))
    twice.processor.on_end(first)
    second = twice.spans()[0]
    assert dict(second.attributes or {}) == dict(first.attributes or {})
    assert (second.attributes or {})[t.MCP_SESSION_ID] == expected_hash("sess-A")
    assert second.events[0].name == t.RECORD_EVENT and twice.processor.refused_count == 0


def test_a_span_that_cannot_be_redacted_is_dropped_not_passed_raw(caplog: pytest.LogCaptureFixture) -> None:
    class Hostile(Mapping[str, Any]):
        def __getitem__(self, key: str) -> Any:
            raise KeyError(key)

        def __iter__(self) -> Iterator[str]:
            raise RuntimeError("hostile-canary-value")

        def copy(self) -> dict[str, Any]:
            raise RuntimeError("hostile-canary-value")

        def __len__(self) -> int:
            return 1

    exporter = InMemorySpanExporter()
    processor = RedactingSpanProcessor(SimpleSpanProcessor(exporter), RedactionRules())
    context = Pipeline().one().context
    with caplog.at_level(logging.DEBUG, logger="otel_mcp_replay.redaction"):
        processor.on_end(ReadableSpan("hostile", context, attributes=Hostile()))
        processor.on_end(ReadableSpan("hostile-again", context, attributes=Hostile()))
        processor.on_end(ReadableSpan("fine", context, attributes={"a": 1}))
    assert [span.name for span in exporter.get_finished_spans()] == ["fine"]
    errors = [record for record in caplog.records if record.levelno == logging.ERROR]
    assert len(errors) == 1 and "RuntimeError" in errors[0].getMessage()  # then DEBUG: no flood
    assert "hostile-canary-value" not in caplog.text


# -- the exporter ------------------------------------------------------------------------------------


def test_the_exporter_redacts_what_it_is_given_and_delegates_the_rest() -> None:
    inner = InMemorySpanExporter()
    exporter = RedactingSpanExporter(inner, RedactionRules(session_key=SESSION_KEY))
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("x")
    with tracer.start_as_current_span("work") as span:
        span.set_attributes({t.MCP_SESSION_ID: "sess-A", "http.request.header.cookie": ("c=1",)})
        span.add_event(t.RECORD_EVENT, {"foreign": "record"})
    (exported,) = inner.get_finished_spans()
    assert exported.attributes == {
        t.MCP_SESSION_ID: expected_hash("sess-A"),
        "http.request.header.cookie": (MASK,),
    }
    assert exported.events[0].name == t.RECORD_REFUSED_EVENT
    assert exporter.refused_count == 1
    assert exporter.export([]) is SpanExportResult.SUCCESS
    assert exporter.force_flush() is True
    exporter.shutdown()
    assert exporter.export([exported]) is SpanExportResult.FAILURE  # the inner one is shut down


# -- user rules from the environment ------------------------------------------------------------------


def test_user_key_and_value_rules_from_env() -> None:
    rules = RedactionRules.from_env(
        {
            ENV_REDACT_KEYS: r"^app\.customer\.,internal_id$",
            ENV_REDACT_VALUES: r"CUST-[0-9]{4,8},acct_[a-z]+",
        }
    )
    got = span_with(
        {
            "app.customer.email": "a@b.c",
            "APP.CUSTOMER.name": "Ann",  # key patterns ignore case
            "order.internal_id": 77,
            "note": "for CUST-12345 and acct_abc, not CUST-1",
            "notes": ("CUST-99999", "clean"),
            "mcp.replay.endpoint.label": "acct_xyz",  # user rules reach our keys too
        },
        rules,
    )
    assert got == {
        "app.customer.email": MASK,
        "APP.CUSTOMER.name": MASK,
        "order.internal_id": MASK,
        "note": f"for {MASK} and {MASK}, not CUST-1",
        "notes": (MASK, "clean"),
        "mcp.replay.endpoint.label": MASK,
    }


CONTENT = {
    "gen_ai.tool.call.arguments": '{"card": "4111"}',
    "gen_ai.tool.call.result": "charged",
    "gen_ai.input.messages": ("hello",),
    "gen_ai.output.messages": '[{"role": "assistant"}]',
    # OpenLLMetry's MCP instrumentation (opentelemetry-instrumentation-mcp), as it writes them.
    "traceloop.entity.input": '{"tool_name": "charge", "arguments": {"card": "4111"}}',
    "traceloop.entity.output": '{"result": "charged"}',
    "mcp.request.argument": '{"method": "tools/call"}',
    "mcp.response.value": '{"content": [{"type": "text", "text": "charged"}]}',
}


def test_other_instrumentations_genai_content_is_masked_by_default() -> None:
    got = span_with({**CONTENT, "gen_ai.tool.name": "charge"}, RedactionRules())
    assert got == {
        "gen_ai.tool.call.arguments": MASK,
        "gen_ai.tool.call.result": MASK,
        "gen_ai.input.messages": (MASK,),
        "gen_ai.output.messages": MASK,
        "traceloop.entity.input": MASK,
        "traceloop.entity.output": MASK,
        "mcp.request.argument": MASK,
        "mcp.response.value": MASK,
        "gen_ai.tool.name": "charge",
    }
    masked = {key: value for key, value in got.items() if key in CONTENT}
    assert span_with(CONTENT, RedactionRules.from_env({ENV_REDACT_CONTENT: " TRUE "})) == masked


@pytest.mark.parametrize("kept", ["false", "False", " 0 ", "no", "off"])
def test_redact_content_false_keeps_the_content_the_user_asked_for(kept: str) -> None:
    assert span_with(CONTENT, RedactionRules.from_env({ENV_REDACT_CONTENT: kept})) == CONTENT
    assert span_with(CONTENT, RedactionRules(redact_content=False)) == CONTENT
    # The other rules still hold on the content's neighbours.
    assert span_with({"api_key": "k"}, RedactionRules(redact_content=False)) == {"api_key": MASK}


def test_a_bad_redact_content_keeps_the_content_masked(caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(ValueError, match=f"^{ENV_REDACT_CONTENT}: must be true or false"):
        RedactionRules.from_env({ENV_REDACT_CONTENT: CANARY})
    with caplog.at_level(logging.ERROR, logger="otel_mcp_replay.redaction"):
        rules = RedactionRules.from_env_or_builtin({ENV_REDACT_CONTENT: CANARY})
    assert ENV_REDACT_CONTENT in caplog.text and CANARY not in caplog.text
    assert span_with(CONTENT, rules)["gen_ai.tool.call.result"] == MASK
    with pytest.raises(ValueError, match=r"^redact_content: must be True or False"):
        RedactionRules(redact_content="no")  # type: ignore[arg-type]


def test_split_patterns_keeps_commas_that_belong_to_a_pattern() -> None:
    assert split_patterns(r"a{1,3}, [,;]x ,b\,c,, ") == [r"a{1,3}", "[,;]x", r"b\,c"]


CANARY = "CANARY-7f3e"


@pytest.mark.parametrize(
    ("variable", "value", "problem"),
    [
        (ENV_REDACT_KEYS, f"ok,({CANARY}", "entry 2 is not a valid regular expression"),
        (ENV_REDACT_VALUES, f"[{CANARY}", "entry 1 is not a valid regular expression"),
        (ENV_REDACT_VALUES, f"{CANARY}**", "entry 1 is not a valid regular expression"),
        # RE2 has no lookaround and no backreference.
        (ENV_REDACT_VALUES, f"x(?={CANARY})", "entry 1 is not a valid regular expression"),
        (ENV_REDACT_VALUES, f"({CANARY})\\1", "entry 1 is not a valid regular expression"),
        (ENV_REDACT_VALUES, f"{CANARY}|", "entry 1 matches the empty string"),
        (ENV_REDACT_KEYS, f"x,(((a{{100}}){{100}}){{100}}){CANARY}", "entry 2 is too large"),
        (ENV_SESSION_KEY, "short-" + CANARY[:4], "shorter than 16 bytes"),
    ],
)
def test_a_bad_rule_names_the_variable_and_never_echoes_it(
    variable: str, value: str, problem: str, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(ValueError) as raised:
        RedactionRules.from_env({variable: value})
    error = raised.value
    assert str(error).startswith(f"{variable}: ") and problem in str(error)
    told = "".join(traceback.format_exception(error)) + repr(error) + repr(error.args)
    assert CANARY not in told and CANARY[:4] not in told.replace(variable, "")
    assert error.__cause__ is None

    # Under auto-instrumentation: logged at ERROR, never raised, and the built-in rules still apply.
    with caplog.at_level(logging.ERROR, logger="otel_mcp_replay.redaction"):
        rules = RedactionRules.from_env_or_builtin({variable: value, ENV_REDACT_KEYS + "_UNRELATED": "x"})
    assert [record.levelno for record in caplog.records] == [logging.ERROR]
    assert variable in caplog.text and CANARY not in caplog.text
    assert span_with({"db.password": "pw", t.MCP_SESSION_ID: "s"}, rules)["db.password"] == MASK


def test_a_bad_rule_given_in_code_names_the_argument_and_suppresses_the_regex_error() -> None:
    with pytest.raises(ValueError, match=r"^redact_values: entry 1 is not a valid") as raised:
        RedactionRules(redact_values=[f"({CANARY}"])
    assert raised.value.__cause__ is None and raised.value.__suppress_context__
    assert CANARY not in "".join(traceback.format_exception(raised.value))


def test_one_bad_variable_leaves_the_others_in_force(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="otel_mcp_replay.redaction"):
        rules = RedactionRules.from_env_or_builtin(
            {ENV_REDACT_KEYS: "(bad", ENV_REDACT_VALUES: "CUST-[0-9]+", ENV_SESSION_KEY: SESSION_KEY}
        )
    assert ENV_REDACT_KEYS in caplog.text
    got = span_with({"note": "CUST-1", t.MCP_SESSION_ID: "sess-A", "api_key": "k"}, rules)
    assert got == {"note": MASK, t.MCP_SESSION_ID: expected_hash("sess-A"), "api_key": MASK}


# RE2 runs every pattern in linear time: nested repetitions are accepted (Python's possessive `a++`
# and atomic `(?>...)` are not RE2 syntax).
@pytest.mark.parametrize(
    ("pattern", "matching"),
    [
        (r"(a+)+b", "aab"),
        (r"(\w+)*x", "abx"),
        (r"(ab)+", "abab"),
        (r"a{1,5}(b|c)+", "aabc"),
        (r"[a-z]+@[a-z]+", "x@y"),
    ],
)
def test_linear_patterns_are_accepted(pattern: str, matching: str) -> None:
    rules = RedactionRules(redact_values=[pattern], redact_keys=[pattern])
    assert span_with({"note": f"see {matching} here", matching: "kept?"}, rules) == {
        "note": f"see {MASK} here",
        matching: MASK,
    }


# -- the property: no planted secret survives ----------------------------------------------------------

SECRET = st.text(alphabet=string.ascii_letters + string.digits + "-._~!$*+", min_size=6, max_size=24).map(
    lambda body: "Zq" + body  # "Zq" appears in no host, path, key or mask below
)
LOWER = st.text(alphabet=string.ascii_lowercase, min_size=1, max_size=8)


@st.composite
def planted(draw: st.DrawFn) -> tuple[dict[str, Any], list[str]]:
    """Attributes where each secret sits under a sensitive key or inside a URL's userinfo/query/fragment."""
    secrets_: list[str] = []
    attributes: dict[str, Any] = {}
    for index in range(draw(st.integers(1, 5))):
        secret = draw(SECRET)
        secrets_.append(secret)
        where = draw(
            st.sampled_from(["key", "key-tuple", "key-number", "userinfo", "password", "query", "fragment"])
        )
        host, path, name = draw(LOWER), draw(LOWER), draw(LOWER)
        url_key = draw(st.sampled_from(["url.full", "http.url", "app.callback_url"]))
        if where == "key":
            attributes[f"{draw(st.sampled_from(SENSITIVE_KEYS))}.{index}"] = secret
        elif where == "key-tuple":
            attributes[f"{draw(st.sampled_from(SENSITIVE_KEYS))}.{index}"] = ("ok", secret)
        elif where == "key-number":
            attributes[f"db.password.{index}"] = draw(st.integers(10**6, 10**9))
            secrets_[-1] = str(attributes[f"db.password.{index}"])
        elif where == "userinfo":
            attributes[f"{url_key}.{index}" if url_key != "url.full" else url_key] = (
                f"https://{secret}@{host}/{path}"
            )
        elif where == "password":
            attributes["http.url"] = f"https://{name}:{secret}@{host}:8080/{path}?{name}=1"
        elif where == "query":
            attributes[url_key] = f"https://{host}/{path}?{name}={secret}&x=1"
        else:
            attributes["url.full"] = f"https://{host}/{path}#{name}={secret}"
    return attributes, secrets_


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(planted(), st.sampled_from(["span", "event", "link"]))
def test_no_planted_secret_survives(case: tuple[dict[str, Any], list[str]], place: str) -> None:
    attributes, secrets_ = case
    pipeline = Pipeline()
    with pipeline.tracer.start_as_current_span("parent") as parent:
        context = parent.get_span_context()
    links: Sequence[Link] = [Link(context, attributes)] if place == "link" else []
    with pipeline.tracer.start_as_current_span("work", links=links) as span:
        if place == "span":
            span.set_attributes(attributes)
        elif place == "event":
            span.add_event("planted", attributes)
    exported = pipeline.spans()[-1]
    texts = list(every_string(exported))
    assert texts and secrets_, "nothing was planted, or nothing exported"
    for text in texts:
        for secret in secrets_:
            assert secret not in text


@pytest.mark.skipif(
    tuple(int(part) for part in version("opentelemetry-sdk").split(".")[:2]) < (1, 40),
    reason="the SDK calls the _on_ending hook from 1.40 on",
)
def test_the_sdk_hook_between_end_and_on_end_reaches_the_inner_processor() -> None:
    # SpanProcessor._on_ending is the SDK's own hook (private by name, defined on its base class and
    # called by its TracerProvider); the wrapper passes it through. This fails if an SDK moves it.
    class Ending(Capture):
        def __init__(self) -> None:
            super().__init__()
            self.ending: list[str] = []

        def _on_ending(self, span: Any) -> None:
            self.ending.append(span.name)

    inner = Ending()
    provider = TracerProvider()
    provider.add_span_processor(RedactingSpanProcessor(inner, RedactionRules()))
    with provider.get_tracer("x").start_as_current_span("work"):
        pass
    assert inner.ending == ["work"] and [span.name for span in inner.ended] == ["work"]


# --- task ids (SEP-2663): a server may use them as bearer tokens --------------------------------

TASK_ID = "X9ek4gxUH2Fs-zMrkBKBr45MHQ6t35bTOebTUquLaL8"


@pytest.mark.parametrize("method", ["tasks/get", "tasks/update", "tasks/cancel"])
def test_a_tasks_span_has_its_task_id_masked(method: str) -> None:
    """fastmcp's client span of a task's request holds the raw task id in its component key."""
    got = span_with({t.MCP_METHOD_NAME: method, "fastmcp.component.key": TASK_ID})
    assert got == {t.MCP_METHOD_NAME: method, "fastmcp.component.key": MASK}


@pytest.mark.parametrize("spelling", ["mcp-name", "mcp_name", "Mcp-Name"])
def test_a_captured_mcp_name_header_of_a_tasks_request_is_masked(spelling: str) -> None:
    """Over HTTP a `tasks/*` request carries Mcp-Name = its task id: the HTTP instrumentation
    captures it where the app asks for request headers."""
    got = span_with(
        {
            f"http.request.header.{spelling}": (TASK_ID,),
            f"http.request.header.{spelling.replace('name', 'method').replace('Name', 'Method')}": (
                "tasks/get",
            ),
        }
    )
    assert got[f"http.request.header.{spelling}"] == (MASK,)


@pytest.mark.parametrize(
    ("said", "name"),
    [
        ({}, TASK_ID),  # Mcp-Name captured alone: a poll of a task another process created
        ({"http.request.header.mcp_method": ("resources/read",)}, "file:///home/ana/plans.txt"),
        ({"http.request.header.mcp_method": ("tools/call", "tasks/get")}, TASK_ID),
        ({t.MCP_METHOD_NAME: "initialize"}, TASK_ID),
    ],
)
def test_a_captured_mcp_name_header_no_span_says_names_a_tool_or_prompt_is_masked(
    said: dict[str, Any], name: str
) -> None:
    """Fail closed: unless the span says its request names a tool or a prompt, `Mcp-Name` may hold a
    task id (fastmcp-tasks 4.1.8 sends one on every poll) or a resource's URI, a path."""
    got = span_with({**said, "http.request.header.mcp_name": (name,), "app.mcp_name": name})
    assert got == {**said, "http.request.header.mcp_name": (MASK,), "app.mcp_name": MASK}


@pytest.mark.parametrize(
    "said",
    [
        {"http.request.header.mcp_method": ("tools/call",)},
        {"http.request.header.Mcp-Method": ("prompts/get",)},
        {t.MCP_METHOD_NAME: "tools/call"},
    ],
)
def test_a_captured_mcp_name_header_of_a_tool_or_prompt_is_left_alone(said: dict[str, Any]) -> None:
    got = span_with({**said, "http.request.header.mcp_name": ("charge",)})
    assert got == {**said, "http.request.header.mcp_name": ("charge",)}


def test_the_component_key_of_any_other_span_is_left_alone() -> None:
    """On a tools/call span it names the tool (`tool:charge@`), no credential."""
    got = span_with({t.MCP_METHOD_NAME: "tools/call", "fastmcp.component.key": "tool:charge@"})
    assert got["fastmcp.component.key"] == "tool:charge@"
    headers = {"http.request.header.mcp-name": ("charge",), "http.request.header.mcp-method": ("tools/call",)}
    assert span_with(headers)["http.request.header.mcp-name"] == ("charge",)


def test_a_task_id_this_process_saw_is_masked_wherever_a_text_holds_it() -> None:
    """fastmcp writes "Task <id> was cancelled" as its span's status description and exception."""
    from otel_mcp_replay import McpReplayInstrumentor

    seen = "tsk-" + TASK_ID[:20]
    McpReplayInstrumentor().task_ids.saw(seen)  # as a task-backed call tells it (tasks.py)
    pipeline = Pipeline()  # an app's own wrapper: it finds the instrumentor's task ids itself
    with pipeline.tracer.start_as_current_span("tools/call charge") as span:
        span.set_attributes({"message": f"Task {seen} was cancelled", "ids": (seen, "other"), "whole": seen})
        span.add_event("exception", {"exception.message": f"Task {seen} was cancelled"})
        span.set_status(Status(StatusCode.ERROR, f"Task {seen} was cancelled"))
    exported = pipeline.spans()[0]
    assert seen not in "\n".join(every_string(exported))
    assert (exported.attributes or {})["message"] == f"Task {MASK} was cancelled"
    assert (exported.attributes or {})["ids"] == (MASK, "other")
    assert exported.status.description == f"Task {MASK} was cancelled"
    # A text that holds no id it saw passes as the very same object.
    assert span_with({"message": "Task other-0123456789 was cancelled"})["message"].startswith("Task other")
