"""The two wrappers that put redaction in front of a span processor or a span exporter.

The rule: the wrapped processor or exporter is handed a span only after RedactionRules.redact has
looked at it (a redacted copy, or the very same span when no rule changed anything); a span whose
redaction fails is dropped, never passed on raw. A wrapper is told what it trusts, what it masks
and where it counts, and knows nothing else of the plugin: `vouches`, the records the plugin filed
(read back without their cell-by-cell check; None, what an app's own wrapper gets: every record
checked whole), `task_ids`, the task ids the plugin's calls saw (None: the instrumentor's, found
once its module is loaded, so an app's own wrapper masks them too), and `on_refused`, called once
per refused record (None: the refused-records counter on the global meter provider). The
configurator passes the instrumentor's.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any, Final

from opentelemetry.context import Context
from opentelemetry.metrics import get_meter
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from otel_mcp_replay.record import Vouches, refused_records_counter
from otel_mcp_replay.redaction.rules import RedactionRules
from otel_mcp_replay.redaction.task_ids import TaskIds
from otel_mcp_replay.telemetry import INSTRUMENTATION_NAME

_logger = logging.getLogger(__name__)

# Where the process's task ids live (its instrumentor's): looked up, never imported from here, as
# attempt._http_instrumented finds the HTTP instrumentor. The instrumentor imports this wing; a process
# that never loaded it ran no call and saw no task.
_INSTRUMENTOR_MODULE: Final = "otel_mcp_replay.instrumentor"


def _process_task_ids() -> TaskIds | None:
    """The instrumentor's task ids (one per process, as its vouches), or None: not loaded yet."""
    instrumentor = getattr(sys.modules.get(_INSTRUMENTOR_MODULE), "McpReplayInstrumentor", None)
    found: TaskIds | None = None if instrumentor is None else instrumentor().task_ids
    return found


class Wrapper:
    """What the wrappers share (these and redaction/logs.py's): the rules, the vouches, the task ids,
    the refused-record count and hook, and delegation. `what` names what it redacts, `_applier` how."""

    what = "span"

    def __init__(
        self,
        inner: Any,
        rules: RedactionRules | None = None,
        *,
        vouches: Vouches | None = None,
        task_ids: TaskIds | None = None,
        on_refused: Callable[[], None] | None = None,
    ) -> None:
        self._inner = self.inner = inner
        # None: the environment's rules, never raising (the wrappers are built under auto-instrumentation).
        self.rules = RedactionRules.from_env_or_builtin() if rules is None else rules
        # Read now: every record filed into them from now on is vouched for.
        self._vouches = vouches.read() if vouches is not None else None
        # None: the process's, looked up per span until found (then kept: the instrumentor's is
        # made once, and is the one every runtime it builds tells).
        self._task_ids = task_ids
        self._on_refused = on_refused if on_refused is not None else self._count_on_global_meter
        self.refused_count = 0
        self._failure_logged = False

    @property
    def rules(self) -> RedactionRules:
        """The rules applied; set anew (instrument() with a file's redact options), they apply from
        the next span or record on."""
        return self._rules

    @rules.setter
    def rules(self, rules: RedactionRules) -> None:
        self._rules = rules
        self._apply = self._applier()  # one attribute: the export thread reads the old or the new

    def _applier(self) -> Callable[[Any, Vouches | None, TaskIds | None], tuple[Any, int]]:
        return self.rules.redact

    def _count_on_global_meter(self) -> None:
        # Made at the first refusal: most wrappers never refuse one.
        counter = refused_records_counter(get_meter(INSTRUMENTATION_NAME))
        self._on_refused = lambda: counter.add(1)
        counter.add(1)

    def _redact(self, item: Any) -> Any:
        """`item` (a span, or a log record) redacted, or None: dropped."""
        task_ids = self._task_ids
        if task_ids is None:
            task_ids = self._task_ids = _process_task_ids()
        try:
            redacted, refused = self._apply(item, self._vouches, task_ids)
        except Exception as error:  # never export what could not be redacted
            level = logging.DEBUG if self._failure_logged else logging.ERROR
            self._failure_logged = True
            # The type only: a message could quote the very value being redacted.
            _logger.log(
                level, "otel-mcp-replay redaction failed (%s); %s dropped", type(error).__name__, self.what
            )
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
        return bool(self._inner.force_flush(timeout_millis))


class RedactingSpanProcessor(Wrapper, SpanProcessor):
    """A SpanProcessor that hands `inner` a redacted copy of each ended span.

    Redaction runs in `on_end`, on the thread that ends the span: behind a BatchSpanProcessor,
    prefer `BatchSpanProcessor(RedactingSpanExporter(exporter))`, which redacts on the export thread.
    `vouches`, `task_ids` and `on_refused` as the module says; `refused_count` counts the refused
    records.
    """

    def __init__(
        self,
        inner: SpanProcessor,
        rules: RedactionRules | None = None,
        *,
        vouches: Vouches | None = None,
        task_ids: TaskIds | None = None,
        on_refused: Callable[[], None] | None = None,
    ) -> None:
        Wrapper.__init__(self, inner, rules, vouches=vouches, task_ids=task_ids, on_refused=on_refused)

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self.inner.on_start(span, parent_context=parent_context)

    def _on_ending(self, span: Span) -> None:
        # The SDK's own hook between end() and on_end (SpanProcessor defines it): passed through.
        self.inner._on_ending(span)

    def on_end(self, span: ReadableSpan) -> None:
        redacted = self._redact(span)
        if redacted is not None:
            self.inner.on_end(redacted)


class RedactingSpanExporter(Wrapper, SpanExporter):
    """A SpanExporter that hands `inner` a redacted copy of each span it is given (same arguments)."""

    def __init__(
        self,
        inner: SpanExporter,
        rules: RedactionRules | None = None,
        *,
        vouches: Vouches | None = None,
        task_ids: TaskIds | None = None,
        on_refused: Callable[[], None] | None = None,
    ) -> None:
        Wrapper.__init__(self, inner, rules, vouches=vouches, task_ids=task_ids, on_refused=on_refused)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        redacted = [out for out in map(self._redact, spans) if out is not None]
        if not redacted and spans:
            return SpanExportResult.SUCCESS  # all dropped: nothing left to send
        result: SpanExportResult = self.inner.export(redacted)
        return result
