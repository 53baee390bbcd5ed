"""The benchmarks' telemetry floor and skeleton are lower bounds of the plugin, on the same call.

Benchmark 1 and the opcode count read the floor's overhead as the least any implementation of the
contract could add to the SDK's side, and the skeleton's (benchmarks/_skeleton.py) as the least
with the Python a clean call cannot do without. That holds only while the floor asks the SDK for
no more than the plugin does on a clean call (no span, attribute, event key or counter point the
plugin does not also write), and while the skeleton's telemetry is the plugin's to the value: a
skeleton that wrote less would be a bound below what the contract asks, and would flatter every
goal read against it. These tests make one clean call each way against the SDK's own server (which
counts what ran) and compare what reached the SDK.
"""

from __future__ import annotations

from typing import Any

import httpx2
import pytest
from benchmarks._common import declared
from benchmarks._floor import FloorTelemetry, telemetry_floor
from benchmarks._skeleton import skeleton
from mcp import Client
from opentelemetry import trace
from opentelemetry.instrumentation.httpx import HTTPX2ClientInstrumentor

from otel_mcp_replay import telemetry as t

pytestmark = pytest.mark.anyio


def written(telemetry: Any) -> dict[str, Any]:
    """What a call left with the SDK: this library's spans (name -> attributes, event name ->
    attributes) and its metric points (name -> their attributes and values)."""
    spans: dict[str, dict[str, Any]] = {}
    events: dict[str, dict[str, Any]] = {}
    for span in telemetry.spans():
        if span.instrumentation_scope is None or span.instrumentation_scope.name != t.INSTRUMENTATION_NAME:
            continue
        spans[span.name] = dict(span.attributes or {})
        for event in span.events:
            events[event.name] = dict(event.attributes or {})
    points = {
        name: sorted((sorted(attributes.items()), value) for attributes, value in values)
        for name, values in telemetry.metrics().items()
    }
    return {"spans": spans, "events": events, "points": points}


def own_counts(telemetry: Any, name: str) -> list[int]:
    """The counts of the points of the histogram `name` this library's scope recorded."""
    data = telemetry.reader.get_metrics_data()
    return [
        point.count
        for resource_metrics in data.resource_metrics
        for scope_metrics in resource_metrics.scope_metrics
        if scope_metrics.scope.name == t.INSTRUMENTATION_NAME
        for metric in scope_metrics.metrics
        if metric.name == name
        for point in metric.data.data_points
    ]


async def one_call(url: str) -> None:
    async with Client(url) as client:
        result = await client.call_tool("search", {"query": "q"})
    assert not result.is_error


async def plugin_call(server: Any, instrument: Any, telemetry: Any) -> dict[str, Any]:
    """What the plugin wrote for one clean call (the plugin is off again after it)."""
    plugin_instrumentor = instrument(servers=declared(server.url))
    await one_call(server.url)
    plugin_instrumentor.uninstrument()
    return written(telemetry)


async def test_the_floor_asks_the_sdk_for_nothing_the_plugin_does_not(
    server: Any, instrument: Any, telemetry: Any
) -> None:
    plugin = await plugin_call(server, instrument, telemetry)
    floor_telemetry = type(telemetry)()  # the same global tracer provider, emptied; a new meter provider
    with telemetry_floor(floor_telemetry.tracer_provider, floor_telemetry.meter_provider):
        await one_call(server.url)
    floor = written(floor_telemetry)

    assert (
        set(floor["spans"]) == set(plugin["spans"]) == {f"{t.CALL_SPAN_PREFIX} search", t.ATTEMPT_SPAN_NAME}
    )
    for name, attributes in floor["spans"].items():
        assert set(attributes) <= set(plugin["spans"][name]), name
    assert floor["events"].keys() == plugin["events"].keys()
    assert set(floor["events"][t.RECORD_EVENT]) == set(plugin["events"][t.RECORD_EVENT])  # the same 15 keys
    assert len(floor["events"][t.RECORD_EVENT]) == 15
    for name, points in floor["points"].items():
        plugin_keys = {
            tuple(key for key, _ in attributes) for attributes, _ in plugin["points"].get(name, [])
        }
        assert {tuple(key for key, _ in attributes) for attributes, _ in points} <= plugin_keys, name
    assert set(floor["points"]) == {t.METRIC_ATTEMPTS, t.METRIC_CALLS, t.METRIC_OPERATION_DURATION}


@pytest.mark.parametrize("peer", [False, True], ids=["alone", "with-the-httpx2-instrumentation"])
async def test_the_skeleton_writes_what_the_plugin_writes(
    server: Any, instrument: Any, telemetry: Any, peer: bool
) -> None:
    # With the peer on (the whole set-up), the plugin records the HTTP request duration of its POSTs
    # in the suppressed instrumentation's place: the skeleton must too, or the bound would flatter.
    peer_instrumentor = HTTPX2ClientInstrumentor()
    if peer:
        peer_instrumentor.instrument(
            tracer_provider=telemetry.tracer_provider, meter_provider=telemetry.meter_provider
        )
    try:
        plugin = await plugin_call(server, instrument, telemetry)
        skeleton_telemetry = type(telemetry)()
        if peer:
            peer_instrumentor.uninstrument()
            peer_instrumentor.instrument(
                tracer_provider=skeleton_telemetry.tracer_provider,
                meter_provider=skeleton_telemetry.meter_provider,
            )
        with skeleton(
            skeleton_telemetry.tracer_provider, skeleton_telemetry.meter_provider, declared(server.url)
        ):
            await one_call(server.url)
    finally:
        if peer_instrumentor.is_instrumented_by_opentelemetry:
            peer_instrumentor.uninstrument()
    bound = written(skeleton_telemetry)
    assert server.counters.executions("search") == 2  # each call ran once

    assert set(bound["spans"]) == {f"{t.CALL_SPAN_PREFIX} search", t.ATTEMPT_SPAN_NAME}
    assert bound["spans"] == plugin["spans"]
    assert bound["events"] == plugin["events"]
    assert len(bound["events"][t.RECORD_EVENT]) == 15
    assert bound["events"][t.RECORD_EVENT][t.ENDPOINT] == "bench"  # the declaration's label, looked up
    assert bound["points"] == plugin["points"]
    ours = {t.METRIC_ATTEMPTS, t.METRIC_CALLS, t.METRIC_OPERATION_DURATION}
    if peer:
        # The instrumentation's own points (its protocol requests) beside ours, both under the name of
        # the HTTP conventions in force (this process's: the default's, in ms).
        assert ours | {t.METRIC_HTTP_DURATION_OLD} <= set(bound["points"])
        assert own_counts(skeleton_telemetry, t.METRIC_HTTP_DURATION_OLD) == [1]  # the tools/call POST's
    else:
        assert set(bound["points"]) == ours


async def test_the_skeleton_s_attempt_span_is_the_http_client_s_parent(server: Any, telemetry: Any) -> None:
    """The attempt's span is current while its request is sent, as the contract asks of the plugin:
    a span begun inside the HTTP client's send is its child."""
    current: list[object] = []
    original = httpx2.AsyncClient._send_single_request

    async def sending(self: Any, request: Any) -> Any:
        current.append(getattr(trace.get_current_span(), "name", None))
        return await original(self, request)

    httpx2.AsyncClient._send_single_request = sending  # type: ignore[method-assign]
    try:
        with skeleton(telemetry.tracer_provider, telemetry.meter_provider, declared(server.url)):
            await one_call(server.url)
    finally:
        httpx2.AsyncClient._send_single_request = original  # type: ignore[method-assign]
    assert t.ATTEMPT_SPAN_NAME in current
    assert server.counters.executions("search") == 1


def test_the_warm_floor_times_the_floors_calls(telemetry: Any) -> None:
    floor = FloorTelemetry(telemetry.tracer_provider, telemetry.meter_provider)
    floor.closed("search", *floor.opened("search"))
    assert {span.name for span in telemetry.spans()} == {
        f"{t.CALL_SPAN_PREFIX} search",
        t.ATTEMPT_SPAN_NAME,
    }
    telemetry.exporter.clear()
    us = floor.warm_us(calls=50)
    assert 0 < us < 100_000
    assert len(telemetry.spans()) == 2 * 50  # every timed call made both its spans
