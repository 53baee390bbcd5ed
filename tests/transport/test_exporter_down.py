"""The OTLP exporter down (refusing, hanging): the app's calls are unaffected, and the spans are
exported off the app's threads."""

from __future__ import annotations

import statistics
import threading
import time
from typing import Any, Literal

import anyio
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from tests.support.calls import declared
from tests.support.leaks import no_leaks, settled

from harness.client import Client, is_error
from harness.faults import (
    Throttle,
)
from harness.receiver import OtlpReceiver
from harness.server import ServerHandle, running_server
from otel_mcp_replay import McpReplayInstrumentor
from otel_mcp_replay import telemetry as t

pytestmark = pytest.mark.anyio


class WatchedExporter(OTLPSpanExporter):
    """The real OTLP/HTTP exporter, noting the threads it exported on and whether an export is
    under way (so that a test can see a call end while an export is still held up)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.threads: set[int] = set()
        self.exporting = False
        self.held = False  # an export is waiting for `release`, held up by the test
        # Cleared by the test to hold the next export up while calls run: that an export is under
        # way as they end is then a certainty, not a race with how long the endpoint takes.
        self.release = threading.Event()
        self.release.set()

    def export(self, spans: Any) -> Any:
        self.threads.add(threading.get_ident())
        self.exporting = True
        try:
            if not self.release.is_set():
                self.held = True
                self.release.wait(30)  # a guard: the test releases it
                self.held = False
            return super().export(spans)
        finally:
            self.exporting = False


async def _timed_calls(
    client: Any, server: ServerHandle, n: int, tag: str, exporter: WatchedExporter
) -> tuple[list[float], int]:
    """`n` calls of a tool declared to repeat a 429, every other one refused once first: their
    durations (a figure to print, never a verdict), and how many ended while an export was under way."""
    durations: list[float] = []
    during_an_export = 0
    for i in range(n):
        if i % 2:
            server.faults.add("search", Throttle("0"))
        started = time.monotonic()
        result = await client.call_tool("search", {"query": f"{tag}{i}"})
        durations.append(time.monotonic() - started)
        during_an_export += exporter.exporting
        assert not is_error(result)
    return durations, during_an_export


@pytest.mark.parametrize("down", ["refuse", "hang"])
async def test_the_exporter_down_leaves_the_calls_unaffected(down: Literal["refuse", "hang"]) -> None:
    """A real BatchSpanProcessor + OTLP/HTTP exporter (timeout 1 s) to an endpoint that refuses
    (503) or hangs: no call waits on an export (none runs on the calls' thread, and calls end while
    an export is held up), and the provider's shutdown ends. Durations are printed, not judged."""
    n = 40
    async with no_leaks(f"exporter {down}"):
        with running_server("streamable") as server, OtlpReceiver() as receiver:
            provider = TracerProvider()
            exporter = WatchedExporter(endpoint=receiver.traces_endpoint, timeout=1)
            provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=50))
            instrumentor = McpReplayInstrumentor()
            instrumentor.instrument(
                tracer_provider=provider,
                servers=declared(server, {"search": {"on": ["throttle"]}}),
            )
            try:
                async with Client(server.url) as client:
                    await _timed_calls(client, server, 5, "warm", exporter)
                    up, _ = await _timed_calls(client, server, n, "up", exporter)
                    # The pipeline works while the endpoint is up: the records reach it.
                    delivered = await anyio.to_thread.run_sync(
                        lambda: receiver.wait_for(
                            lambda spans: (
                                sum(1 for s in spans for e in s["events"] if e["name"] == t.RECORD_EVENT) >= n
                            ),
                            10.0,
                        )
                    )
                    assert delivered, "the records never reached the receiver while it was up"
                    receiver.set_mode(down, hang_seconds=2.0)
                    # The next export is held up until the calls below have ended: a call that
                    # waited on an export would never end (the test's own timeout would end it).
                    exporter.release.clear()
                    await _timed_calls(client, server, 1, "first", exporter)
                    assert await settled(lambda: exporter.held, timeout=10.0), "no export was held up"
                    broken, ended_during_an_export = await _timed_calls(client, server, n, "down", exporter)
                    exporter.release.set()
                    # Spans keep coming, and the exporter keeps failing to hand them over.
                    await _timed_calls(client, server, 5, "more", exporter)
                    tried = await settled(lambda: receiver.rejected > 0, timeout=10.0)
                    assert tried, "the exporter never reached the broken endpoint"
            finally:
                exporter.release.set()
                instrumentor.uninstrument()
                started = time.monotonic()
                await anyio.to_thread.run_sync(provider.shutdown)
                shutdown_s = time.monotonic() - started
    p50_up, p50_down = statistics.median(up), statistics.median(broken)
    summary = (
        f"exporter {down}: p50 {p50_up * 1000:.1f} ms up, {p50_down * 1000:.1f} ms down; "
        f"max {max(up) * 1000:.1f} / {max(broken) * 1000:.1f} ms; shutdown {shutdown_s:.2f} s"
    )
    print(summary)
    # Exports ran on the processor's worker only, never on the thread that made the calls, and
    # calls ended while an export was held up (by the test, at the broken endpoint): none waited on one.
    assert exporter.threads and threading.get_ident() not in exporter.threads, summary
    assert ended_during_an_export == n, summary
    assert shutdown_s < 60.0, summary  # a guard against a hang only (it takes about a second)
