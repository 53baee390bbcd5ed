"""What one `instrument()` decided, bound into every seam: the runtime.

The rule: the seams never read the environment, re-check a declaration or look up a global per
call. `instrument()` builds one `Runtime` and binds it into each wrapper (as contrib's httpx
instrumentation binds its hooks); `uninstrument()` unwraps them. What must be shared by every call
of the process (each endpoint's retry budget, what each session was declared under, where records
are vouched for, the task ids seen) lives in the Runtime; what one seam alone keeps lives with it
(mcp 1.x's carrier: `patches/carrier.Carriage`; the legacy-SSE connections:
`patches/sse.SseConnections`; the request last built from a `json=` dict:
`patches/http_send.BuiltRequests`); the runtime in force, and the vouches and the task ids the
configurator hands its redaction wrappers, are the instrumentor's (one per process, as
BaseInstrumentor is): no module global holds what a call or the redaction changes. A runtime built
from a configuration error is `fail_closed`: nothing repeats, spans still record."""

from __future__ import annotations

import functools
import logging
import os
import random
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.metrics import Counter, Histogram, Meter
from opentelemetry.trace import Tracer

from otel_mcp_replay import telemetry as t
from otel_mcp_replay.declaration import Declaration
from otel_mcp_replay.endpoints import NO_SERVERS, Servers, SpanEndpoint, origin_of, span_endpoint_of
from otel_mcp_replay.filing import FileRecord, record_filing
from otel_mcp_replay.guard import RepeatGuard
from otel_mcp_replay.http_conventions import HttpConventions
from otel_mcp_replay.policy import RetryBudgets
from otel_mcp_replay.record import Vouches, refused_records_counter
from otel_mcp_replay.redaction.task_ids import TaskIds
from otel_mcp_replay.settings import Settings

_logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Instruments:
    """The plugin's metric instruments (names in telemetry.py; low-cardinality attributes only)."""

    attempts: Counter
    wait: Histogram
    calls: Counter
    records_refused: Counter
    guard_store_fallbacks: Counter
    guard_forgotten: Counter
    operation_duration: Histogram  # the MCP conventions' client operation duration, per tools/call request
    # The HTTP conventions in force, and their client duration, for an attempt's POST.
    http: HttpConventions

    @classmethod
    def on(cls, meter: Meter) -> Instruments:
        return cls(
            attempts=meter.create_counter(
                t.METRIC_ATTEMPTS, unit="{attempt}", description="HTTP attempts of MCP tool calls"
            ),
            wait=meter.create_histogram(
                t.METRIC_WAIT,
                unit="s",
                description="Waits before a repeated MCP tool-call attempt",
                explicit_bucket_boundaries_advisory=list(t.WAIT_BUCKETS),
            ),
            calls=meter.create_counter(
                t.METRIC_CALLS, unit="{call}", description="MCP tool calls, by verdict and effect"
            ),
            records_refused=refused_records_counter(meter),
            guard_store_fallbacks=meter.create_counter(
                t.METRIC_GUARD_STORE_FALLBACKS,
                unit="{operation}",
                description="Repeat-guard store operations that fell back to the in-process guard",
            ),
            guard_forgotten=meter.create_counter(
                t.METRIC_GUARD_FORGOTTEN,
                unit="{call}",
                description="Calls the repeat guard forgot within their window, its memory being full",
            ),
            operation_duration=meter.create_histogram(
                t.METRIC_OPERATION_DURATION,
                unit="s",
                description="The duration of the MCP request or notification as observed on the sender",
                explicit_bucket_boundaries_advisory=list(t.OPERATION_DURATION_BUCKETS),
            ),
            http=HttpConventions.on(meter),
        )


@dataclass(frozen=True, eq=False)
class Runtime:
    tracer: Tracer
    instruments: Instruments
    servers: Servers = NO_SERVERS
    settings: Settings = field(default_factory=Settings)
    budgets: RetryBudgets = field(default_factory=lambda: RetryBudgets((100, 0.1)))
    fail_closed: bool = False
    rng: random.Random = field(default_factory=random.Random)
    # What the path logs through (call.py): every module logs on its own `__name__`.
    logger: logging.Logger = _logger
    # An endpoint's origin, parsed once, not per request: an app talks to a handful of endpoints.
    origin: Callable[[str], str] = field(default_factory=lambda: functools.lru_cache(maxsize=256)(origin_of))
    # The same endpoint as the spans name it (host, port, scheme, url.full without path or query).
    span_endpoint: Callable[[str], SpanEndpoint | None] = field(
        default_factory=lambda: functools.lru_cache(maxsize=256)(span_endpoint_of)
    )
    # Where each session's calls go, as their spans say it (patches/series.py): read once per
    # session and URL. Weak: a session gone is forgotten.
    session_routes: weakref.WeakKeyDictionary[object, tuple[str, Any]] = field(
        default_factory=weakref.WeakKeyDictionary
    )
    # The key that hashes the session ids the call spans carry (never raw): one per process.
    session_key: bytes = field(default_factory=lambda: os.urandom(32))
    # The repeat guard; None when its window is 0.
    guard: RepeatGuard | None = None
    # What each session's sent calls were declared under: a call given up before it was sent files
    # its record under the same policy and endpoint. Weak: a session gone is forgotten.
    session_endpoints: weakref.WeakKeyDictionary[object, tuple[Declaration, str]] = field(
        default_factory=weakref.WeakKeyDictionary
    )
    # Where the calls file their records, vouched for to the redaction: the instrumentor's, one per
    # process as it is (the redaction wrappers read the same).
    vouches: Vouches = field(default_factory=Vouches)
    # The task ids the calls saw, masked by the redaction: the instrumentor's too, as the vouches.
    task_ids: TaskIds = field(default_factory=TaskIds)
    # The task-backed calls (tasks.py) of each session not ended yet (`tasks.OpenCalls`), until their
    # task's terminal status is seen or their session closes, which lets the session go. Weak all
    # the same: a session gone without closing is forgotten once its calls are.
    open_tasks: weakref.WeakKeyDictionary[object, Any] = field(default_factory=weakref.WeakKeyDictionary)

    @functools.cached_property
    def file_record(self) -> FileRecord:
        """How a call files its record, as the `record` setting says (filing.py): into the vouches
        above, so the redaction reads it back unchecked."""
        return record_filing(self.settings.record, self.vouches)
