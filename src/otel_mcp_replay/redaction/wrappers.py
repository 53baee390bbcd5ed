"""The two wrappers that put redaction in front of a span processor or a span exporter.

The rule: the wrapped processor or exporter is handed a span only after RedactionRules.redact has
looked at it (a redacted copy, or the very same span when no rule changed anything); a span whose
redaction fails is dropped, never passed on raw. A refused record is counted (`on_refused`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from otel_mcp_replay.redaction.rules import RedactionRules

_logger = logging.getLogger(__name__)


class _Wrapper:
    """What both wrappers share: the rules, the refused-record count and hook, and delegation."""

    def __init__(
        self,
        inner: SpanProcessor | SpanExporter,
        rules: RedactionRules | None,
        on_refused: Callable[[], None] | None,
    ) -> None:
        from otel_mcp_replay.instrumentor import McpReplayInstrumentor  # it imports the redaction

        self._inner = inner
        # The one instrumentor of the process (BaseInstrumentor's singleton), instrumented or not:
        # its vouches for the records the calls file (vouched for from now on: read here), and its
        # refused-records counter.
        instrumentor = McpReplayInstrumentor()
        self._vouches = instrumentor.vouches.read()
        # None: the environment's rules, never raising (the wrappers are built under auto-instrumentation).
        self.rules = RedactionRules.from_env_or_builtin() if rules is None else rules
        # None: the mcp.client.replay.records.refused counter.
        self._on_refused = on_refused if on_refused is not None else instrumentor.count_refused
        self.refused_count = 0
        self._failure_logged = False

    def _redact(self, span: ReadableSpan) -> ReadableSpan | None:
        try:
            redacted, refused = self.rules.redact(span, self._vouches)
        except Exception as error:  # never export what could not be redacted
            level = logging.DEBUG if self._failure_logged else logging.ERROR
            self._failure_logged = True
            # The type only: a message could quote the very value being redacted.
            _logger.log(level, "otel-mcp-replay redaction failed (%s); span dropped", type(error).__name__)
            return None
        if refused:
            self.refused_count += refused
            for _ in range(refused):
                try:
                    self._on_refused()
                except Exception:  # a broken counter must not stop spans
                    _logger.debug("otel-mcp-replay on_refused hook raised", exc_info=True)
        return redacted

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


class RedactingSpanProcessor(_Wrapper, SpanProcessor):
    """A SpanProcessor that hands `inner` a redacted copy of each ended span.

    Redaction runs in `on_end`, on the thread that ends the span: behind a BatchSpanProcessor,
    prefer `BatchSpanProcessor(RedactingSpanExporter(exporter))`, which redacts on the export thread.
    `on_refused` is called once per refused record (default: the refused-records counter);
    `refused_count` counts them.
    """

    def __init__(
        self,
        inner: SpanProcessor,
        rules: RedactionRules | None = None,
        *,
        on_refused: Callable[[], None] | None = None,
    ) -> None:
        _Wrapper.__init__(self, inner, rules, on_refused)
        self.inner = inner

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self.inner.on_start(span, parent_context=parent_context)

    def _on_ending(self, span: Span) -> None:
        # The SDK's own hook between end() and on_end (SpanProcessor defines it): passed through.
        self.inner._on_ending(span)

    def on_end(self, span: ReadableSpan) -> None:
        redacted = self._redact(span)
        if redacted is not None:
            self.inner.on_end(redacted)


class RedactingSpanExporter(_Wrapper, SpanExporter):
    """A SpanExporter that hands `inner` a redacted copy of each span it is given (same arguments)."""

    def __init__(
        self,
        inner: SpanExporter,
        rules: RedactionRules | None = None,
        *,
        on_refused: Callable[[], None] | None = None,
    ) -> None:
        _Wrapper.__init__(self, inner, rules, on_refused)
        self.inner = inner

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        redacted = [out for out in map(self._redact, spans) if out is not None]
        if not redacted and spans:
            return SpanExportResult.SUCCESS  # all dropped: nothing left to send
        return self.inner.export(redacted)
