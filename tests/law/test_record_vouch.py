"""A record this library filed is read back by the redaction without checking every cell again.

It was checked at build (call_record checks what came from outside; its words are the plugin's
own, typed, and tests/law/test_record.py proves them in the allow-list), and once the SDK
has stored it on an event it cannot change: the redaction trusts that very object, and nothing
else. Every record anyone else wrote is still checked whole, and a record the SDK changed on the
way in (its length or count limits) is left to that check.
"""

from __future__ import annotations

import gc
from typing import Any

import pytest
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from tests.support.calls import declared
from tests.support.records import full_record

from otel_mcp_replay import telemetry as t
from otel_mcp_replay.instrumentor import McpReplayInstrumentor
from otel_mcp_replay.redaction import RedactingSpanProcessor, RedactionRules, wrappers
from otel_mcp_replay.redaction import rules as redaction_module

pytestmark = pytest.mark.anyio
# The process's vouches: the one instrumentor's, which every runtime files into and the wrappers
# given them (the configurator's) read.
VOUCHES = McpReplayInstrumentor().vouches
vouch, vouched_record = VOUCHES.vouch, VOUCHES.record


def a_record(rows: int = 100) -> dict[str, Any]:
    return full_record(rows)


class Checks:
    """Counts the redaction's whole checks (validate_record), passing each on to the real one."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        real = redaction_module.validate_record

        def counted(raw: object) -> Any:
            self.calls += 1
            return real(raw)

        monkeypatch.setattr(redaction_module, "validate_record", counted)


def pipeline(**limits: Any) -> tuple[TracerProvider, InMemorySpanExporter, RedactingSpanProcessor]:
    exporter = InMemorySpanExporter()
    processor = RedactingSpanProcessor(
        SimpleSpanProcessor(exporter), RedactionRules(), vouches=VOUCHES, on_refused=lambda: None
    )
    provider = TracerProvider(span_limits=SpanLimits(**limits)) if limits else TracerProvider()
    provider.add_span_processor(processor)
    return provider, exporter, processor


def test_a_filed_record_passes_redaction_without_the_whole_check(monkeypatch: pytest.MonkeyPatch) -> None:
    checks = Checks(monkeypatch)
    provider, exporter, processor = pipeline()
    built = a_record()
    span = provider.get_tracer("t").start_span("tools/call search")
    VOUCHES.file(span, built)
    span.end()
    (exported,) = exporter.get_finished_spans()
    assert checks.calls == 0
    assert [event.name for event in exported.events] == [t.RECORD_EVENT]
    assert dict(exported.events[0].attributes or {}) == built
    assert processor.refused_count == 0


def test_the_same_record_written_by_other_code_gets_the_whole_check(monkeypatch: pytest.MonkeyPatch) -> None:
    checks = Checks(monkeypatch)
    provider, exporter, _ = pipeline()
    built = a_record()
    span = provider.get_tracer("t").start_span("tools/call search")
    span.add_event(t.RECORD_EVENT, built)  # not through VOUCHES.file: nobody vouched for it
    span.end()
    (exported,) = exporter.get_finished_spans()
    assert checks.calls == 1
    assert dict(exported.events[0].attributes or {}) == built


def test_a_wrapper_the_app_builds_itself_checks_even_a_filed_record_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No vouches given (an app's own wrapper): nothing is trusted, and the record the plugin filed
    is checked whole, and passes."""
    checks = Checks(monkeypatch)
    exporter = InMemorySpanExporter()
    processor = RedactingSpanProcessor(SimpleSpanProcessor(exporter), RedactionRules())
    provider = TracerProvider()
    provider.add_span_processor(processor)
    built = a_record()
    span = provider.get_tracer("t").start_span("tools/call search")
    VOUCHES.file(span, built)
    span.end()
    (exported,) = exporter.get_finished_spans()
    assert checks.calls == 1
    assert dict(exported.events[0].attributes or {}) == built
    assert processor.refused_count == 0


def test_a_record_written_by_other_code_outside_the_list_is_still_refused() -> None:
    provider, exporter, processor = pipeline()
    spoiled = dict(a_record(3))
    spoiled[t.ATTEMPTS_FAILURE] = ("throttle", "throttle", "sk-live-CANARY")
    span = provider.get_tracer("t").start_span("tools/call search")
    span.add_event(t.RECORD_EVENT, spoiled)
    span.end()
    (exported,) = exporter.get_finished_spans()
    assert [event.name for event in exported.events] == [t.RECORD_REFUSED_EVENT]
    assert processor.refused_count == 1


def test_a_wrapper_the_app_builds_itself_counts_a_refusal_on_the_global_meter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No on_refused given: the refused-records counter on the global meter provider's meter (the
    provider here is the test's, handed out where the wrapper asks for the global one)."""
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    monkeypatch.setattr(wrappers, "get_meter", meters.get_meter)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(RedactingSpanProcessor(SimpleSpanProcessor(exporter), RedactionRules()))
    spoiled = dict(a_record(3))
    spoiled[t.ATTEMPTS_FAILURE] = ("throttle", "throttle", "sk-live-CANARY")
    for _ in range(2):
        span = provider.get_tracer("t").start_span("tools/call search")
        span.add_event(t.RECORD_EVENT, spoiled)
        span.end()
    data = reader.get_metrics_data()
    assert data is not None
    counted = [
        point.value
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == t.METRIC_RECORDS_REFUSED
        for point in metric.data.data_points
    ]
    assert counted == [2]


@pytest.mark.parametrize(
    "limits",
    [
        # A length limit of 4 cuts "billing", "unknown", "throttle" ...: not the record that was built.
        pytest.param({"max_attribute_length": 4}, id="values cut"),
        pytest.param({"max_event_attributes": 5}, id="keys dropped"),
    ],
)
def test_a_record_the_sdk_changed_is_not_vouched_for_and_the_whole_check_refuses_it(
    limits: dict[str, int],
) -> None:
    provider, exporter, processor = pipeline(**limits)
    span = provider.get_tracer("t").start_span("tools/call search")
    VOUCHES.file(span, a_record(3))
    assert vouched_record(span.events[0].attributes) is None  # type: ignore[attr-defined]
    span.end()
    (exported,) = exporter.get_finished_spans()
    assert [event.name for event in exported.events] == [t.RECORD_REFUSED_EVENT]
    assert processor.refused_count == 1


def test_only_the_very_object_vouched_for_is_trusted() -> None:
    built = a_record(3)
    stored = BoundedAttributes(attributes=built, immutable=True)
    twin = BoundedAttributes(attributes=built, immutable=True)  # equal, but nobody vouched for it
    assert vouch(stored, built)
    assert vouched_record(stored) == built
    assert vouched_record(twin) is None
    assert vouched_record(dict(built)) is None
    # An id that names another object now (its first holder gone) is not trusted.
    VOUCHES._by_id[id(twin)] = VOUCHES._by_id[id(stored)]
    try:
        assert vouched_record(twin) is None
    finally:
        del VOUCHES._by_id[id(twin)]


def test_vouch_refuses_anything_but_exactly_the_built_record_in_the_sdks_own_mapping() -> None:
    built = a_record(3)
    assert not vouch(dict(built), built)  # a plain dict can change after the vouch
    changed = dict(built)
    changed[t.SENT] = 4
    assert not vouch(BoundedAttributes(attributes=changed, immutable=True), built)


def test_a_vouch_is_forgotten_when_its_record_dies() -> None:
    before = len(VOUCHES._by_id)
    stored = BoundedAttributes(attributes=a_record(3), immutable=True)
    assert vouch(stored, a_record(3))
    assert len(VOUCHES._by_id) == before + 1
    del stored
    gc.collect()
    assert len(VOUCHES._by_id) == before


def test_the_sdk_stores_event_attributes_immutable() -> None:
    """What the vouch rests on (pinned: an SDK upgrade that loosens it fails here)."""
    span = TracerProvider().get_tracer("t").start_span("s")
    span.add_event(t.RECORD_EVENT, a_record(1))
    attributes = span.events[0].attributes  # type: ignore[attr-defined]
    assert type(attributes) is BoundedAttributes
    with pytest.raises(TypeError):
        attributes[t.SENT] = 99
    with pytest.raises(TypeError):
        del attributes[t.SENT]
    span.end()


def test_without_a_redaction_wrapper_nothing_is_vouched(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(VOUCHES, "active", False)
    span = TracerProvider().get_tracer("t").start_span("s")
    VOUCHES.file(span, a_record(1))
    assert vouched_record(span.events[0].attributes) is None  # type: ignore[attr-defined]
    span.end()
    RedactingSpanProcessor(SimpleSpanProcessor(InMemorySpanExporter()), RedactionRules())
    assert not VOUCHES.active  # an app's own wrapper reads no vouches
    RedactingSpanProcessor(SimpleSpanProcessor(InMemorySpanExporter()), RedactionRules(), vouches=VOUCHES)
    assert VOUCHES.active


@pytest.mark.parametrize(
    "wrapper_first", [True, False], ids=["wrapper then instrument", "instrument then wrapper"]
)
async def test_a_real_call_files_a_vouched_record(
    server: Any, monkeypatch: pytest.MonkeyPatch, wrapper_first: bool
) -> None:
    """Through the plugin, on the SDK's own server: the record the call filed passes the redaction
    without the whole check, and arrives exactly as the call filed it, whether the redaction wrapper
    was built before instrument() or after it (the runtime files into the instrumentor's vouches,
    which the wrapper reads)."""
    from mcp import Client

    from otel_mcp_replay import McpReplayInstrumentor

    monkeypatch.setattr(VOUCHES, "active", False)  # as in a process where no wrapper was built yet
    checks = Checks(monkeypatch)
    plain = InMemorySpanExporter()  # what the call filed, before any redaction
    instrumentor = McpReplayInstrumentor()
    if wrapper_first:
        provider, exporter, processor = pipeline()
        provider.add_span_processor(SimpleSpanProcessor(plain))
    else:
        provider = TracerProvider()
    instrumentor.instrument(
        tracer_provider=provider,
        servers=declared(server, {"search": {"on": ["throttle"]}}),
    )
    if not wrapper_first:
        exporter = InMemorySpanExporter()
        processor = RedactingSpanProcessor(
            SimpleSpanProcessor(exporter), RedactionRules(), vouches=VOUCHES, on_refused=lambda: None
        )
        provider.add_span_processor(processor)
        provider.add_span_processor(SimpleSpanProcessor(plain))
    try:
        async with Client(server.url) as client:
            result = await client.call_tool("search", {"query": "q"})
        assert not result.is_error
    finally:
        instrumentor.uninstrument()
        provider.shutdown()

    def filed(spans: Any) -> list[dict[str, Any]]:
        return [dict(e.attributes or {}) for s in spans for e in s.events if e.name == t.RECORD_EVENT]

    before, after = filed(plain.get_finished_spans()), filed(exporter.get_finished_spans())
    assert len(before) == 1 and before[0][t.VERDICT] == "completed"
    assert after == before
    assert checks.calls == 0
    assert processor.refused_count == 0
