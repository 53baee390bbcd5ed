"""The benchmarks' telemetry floor is a lower bound of the plugin's telemetry, on the same call.

Benchmark 1 reads the floor's overhead as the least any implementation of the contract could add.
That holds only while the floor asks the SDK for no more than the plugin does on a clean call: no
span, attribute, event key or counter point the plugin does not also write. These tests make one
clean call each way against the SDK's own server and compare what reached the SDK.
"""

from __future__ import annotations

from typing import Any

import pytest
from benchmarks._common import declared
from benchmarks._floor import FloorTelemetry, telemetry_floor
from mcp import Client

from otel_mcp_replay import telemetry as t

pytestmark = pytest.mark.anyio


def written(telemetry: Any) -> dict[str, Any]:
    """What a call left with the SDK: this library's spans (name -> attribute keys, event -> keys)
    and its metric points (name -> attribute key sets)."""
    spans: dict[str, set[str]] = {}
    events: dict[str, set[str]] = {}
    for span in telemetry.spans():
        if span.instrumentation_scope is None or span.instrumentation_scope.name != t.INSTRUMENTATION_NAME:
            continue
        spans[span.name] = set(span.attributes or {})
        for event in span.events:
            events[event.name] = set(event.attributes or {})
    points = {
        name: {frozenset(attributes) for attributes, _ in values}
        for name, values in telemetry.metrics().items()
    }
    return {"spans": spans, "events": events, "points": points}


async def one_call(url: str) -> None:
    async with Client(url) as client:
        result = await client.call_tool("search", {"query": "q"})
    assert not result.is_error


async def test_the_floor_asks_the_sdk_for_nothing_the_plugin_does_not(
    server: Any, instrument: Any, telemetry: Any
) -> None:
    plugin_instrumentor = instrument(servers=declared(server.url))
    await one_call(server.url)
    plugin = written(telemetry)
    plugin_instrumentor.uninstrument()

    floor_telemetry = type(telemetry)()  # the same global tracer provider, emptied; a new meter provider
    with telemetry_floor(floor_telemetry.tracer_provider, floor_telemetry.meter_provider):
        await one_call(server.url)
    floor = written(floor_telemetry)

    assert (
        set(floor["spans"])
        == set(plugin["spans"])
        == {f"{t.CALL_SPAN_PREFIX} search", f"{t.ATTEMPT_SPAN_PREFIX} search"}
    )
    for name, keys in floor["spans"].items():
        assert keys <= plugin["spans"][name], name
    assert floor["events"] == plugin["events"]  # the record: the same 15 keys
    assert len(floor["events"][t.RECORD_EVENT]) == 15
    for name, key_sets in floor["points"].items():
        assert key_sets <= plugin["points"].get(name, set()), name
    assert set(floor["points"]) == {t.METRIC_ATTEMPTS, t.METRIC_CALLS}


def test_the_warm_floor_times_the_floors_calls(telemetry: Any) -> None:
    floor = FloorTelemetry(telemetry.tracer_provider, telemetry.meter_provider)
    floor.closed("search", *floor.opened("search"))
    assert {span.name for span in telemetry.spans()} == {
        f"{t.CALL_SPAN_PREFIX} search",
        f"{t.ATTEMPT_SPAN_PREFIX} search",
    }
    telemetry.exporter.clear()
    us = floor.warm_us(calls=50)
    assert 0 < us < 100_000
    assert len(telemetry.spans()) == 2 * 50  # every timed call made both its spans
