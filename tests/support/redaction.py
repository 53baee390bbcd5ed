"""Redaction pipelines on the SDK's own TracerProvider: spans made, redacted, and read back."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer

from otel_mcp_replay.record import Vouches
from otel_mcp_replay.redaction import RedactingSpanProcessor, RedactionRules


class Pipeline:
    """A provider whose every span goes through redaction into an in-memory exporter."""

    def __init__(
        self, rules: RedactionRules | None = None, *, vouches: Vouches | None = None, **provider: Any
    ) -> None:
        self.exporter = InMemorySpanExporter()
        self.refused_hook_calls = 0
        self.processor = RedactingSpanProcessor(
            SimpleSpanProcessor(self.exporter),
            RedactionRules() if rules is None else rules,
            vouches=vouches,
            on_refused=self._hook,
        )
        self.provider = TracerProvider(
            resource=Resource.create({"service.name": "redaction-test"}), **provider
        )
        self.provider.add_span_processor(self.processor)
        self.tracer: Tracer = self.provider.get_tracer("redaction-test", "1.2.3")

    def _hook(self) -> None:
        self.refused_hook_calls += 1

    def spans(self) -> tuple[ReadableSpan, ...]:
        return self.exporter.get_finished_spans()

    def one(self, **attributes: Any) -> ReadableSpan:
        """One span carrying `attributes` (keys with dots passed through a dict)."""
        with self.tracer.start_as_current_span("work") as span:
            span.set_attributes(attributes)
        return self.spans()[-1]


def span_with(attributes: Mapping[str, Any], rules: RedactionRules | None = None) -> dict[str, Any]:
    pipeline = Pipeline(rules)
    with pipeline.tracer.start_as_current_span("work") as span:
        span.set_attributes(attributes)
    return dict(pipeline.spans()[0].attributes or {})


def every_string(span: ReadableSpan) -> Iterator[str]:
    """Every string an exporter could send from this span's attributes, events, links and status."""

    def strings(attributes: Mapping[str, Any] | None) -> Iterator[str]:
        for key, value in (attributes or {}).items():
            yield key
            items = value if isinstance(value, (tuple, list)) else (value,)
            yield from (str(item) for item in items)

    yield from strings(span.attributes)
    for event in span.events:
        yield event.name
        yield from strings(event.attributes)
    for link in span.links:
        yield from strings(link.attributes)
    if span.status.description:
        yield span.status.description


class Capture(SpanProcessor):
    """A processor that keeps every ended span it is handed, as it is handed it."""

    def __init__(self) -> None:
        self.ended: list[ReadableSpan] = []

    def on_end(self, span: ReadableSpan) -> None:
        self.ended.append(span)
