"""What one `instrument()` decided, read by the patches on every call: one immutable snapshot.

The patches never read the environment or re-check a declaration: `instrument()` builds this once,
`uninstrument()` clears it, and a patch that finds none passes the call through untouched.
A snapshot built from a configuration error is `fail_closed`: nothing repeats, spans still record.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field

from opentelemetry.metrics import Counter, Histogram, Meter
from opentelemetry.trace import Tracer

from otel_mcp_replay import telemetry as t
from otel_mcp_replay.budget import RetryBudgets
from otel_mcp_replay.declaration import NO_SERVERS, Servers, Settings


@dataclass(frozen=True)
class Instruments:
    """The plugin's metric instruments (names in telemetry.py; low-cardinality attributes only)."""

    attempts: Counter
    wait: Histogram
    calls: Counter
    records_refused: Counter

    @classmethod
    def on(cls, meter: Meter) -> Instruments:
        return cls(
            attempts=meter.create_counter(
                t.METRIC_ATTEMPTS, unit="{attempt}", description="HTTP attempts of MCP tool calls"
            ),
            wait=meter.create_histogram(
                t.METRIC_WAIT, unit="s", description="Waits before a repeated MCP tool-call attempt"
            ),
            calls=meter.create_counter(
                t.METRIC_CALLS, unit="{call}", description="MCP tool calls, by verdict and effect"
            ),
            records_refused=meter.create_counter(
                t.METRIC_RECORDS_REFUSED,
                unit="{record}",
                description="request_attempts records refused whole by the allow-list",
            ),
        )


@dataclass(frozen=True)
class Runtime:
    tracer: Tracer
    instruments: Instruments
    servers: Servers = NO_SERVERS
    settings: Settings = field(default_factory=Settings)
    budgets: RetryBudgets = field(default_factory=lambda: RetryBudgets((100, 0.1)))
    fail_closed: bool = False
    rng: random.Random = field(default_factory=random.Random)


logger = logging.getLogger("otel_mcp_replay")

_current: Runtime | None = None


def current() -> Runtime | None:
    return _current


def install(runtime: Runtime | None) -> None:
    global _current
    _current = runtime


_unbound_refused: Counter | None = None


def count_refused() -> None:
    """A record refused by the redaction allow-list: counted on the instrumentor's meter, or on the
    global meter provider's when the redaction runs without the instrumentor."""
    global _unbound_refused
    rt = _current
    if rt is not None:
        rt.instruments.records_refused.add(1)
        return
    if _unbound_refused is None:
        from opentelemetry.metrics import get_meter

        _unbound_refused = Instruments.on(get_meter(t.INSTRUMENTATION_NAME)).records_refused
    _unbound_refused.add(1)
