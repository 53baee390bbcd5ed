"""Idempotency keys where the commerce protocols nest them, end to end: `deduplicates.argument` as a
JSON Pointer (`/meta/idempotency_key`, the Agentic Commerce Protocol; `/meta/idempotency-key`, the
Universal Commerce Protocol) on the demo server's checkouts, which deduplicate by exactly that key.

Ground truth is the server's: executions, deduplicated calls, and the POSTs as it received them
(their bodies compared byte for byte). A changing call carrying its key is repeated and runs once;
without it, or with it empty or at the other protocol's place, it is never repeated.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from tests.support.calls import declared
from tests.support.telemetry import Telemetry, attempt_spans, records, the_record

from harness.client import Client, is_error
from harness.faults import DropAfterExecution, Fault, Throttle
from harness.server import COMMERCE_KEYS, Counters, ServerHandle, build_server, running_server
from otel_mcp_replay import RepeatRefusedError, UnknownEffectError
from otel_mcp_replay import telemetry as t

pytestmark = pytest.mark.anyio

STRICT = "app-authorized"
LAYOUTS = tuple(COMMERCE_KEYS.items())  # (tool, the key's name in `meta`)
CUTS: dict[str, tuple[Callable[[], Fault], str]] = {
    "cut after execution": (DropAfterExecution, "network"),
    "429": (lambda: Throttle("0"), "throttle"),
}


@pytest.fixture
def commerce() -> Iterator[ServerHandle]:
    counters = Counters()
    with running_server(counters=counters, server=build_server(counters, commerce_tools=True)) as handle:
        yield handle


def checkout(server: ServerHandle, tool: str, key_name: str, on: str = "network") -> dict[str, Any]:
    """The declaration of one changing checkout, its key named by a JSON Pointer into `meta`."""
    tools = {tool: {"changes": True, "on": [on] if on else []}}
    return declared(server, tools, STRICT, deduplicates={"argument": f"/meta/{key_name}"})


def bodies(server: ServerHandle, tool: str) -> list[bytes]:
    return [post.body for post in server.counters.post_log() if post.tool == tool]


@pytest.mark.parametrize(("tool", "key_name"), LAYOUTS, ids=[tool for tool, _ in LAYOUTS])
@pytest.mark.parametrize("cut", CUTS)
async def test_a_checkout_carrying_its_nested_key_is_repeated_and_runs_once(
    commerce: ServerHandle,
    telemetry: Telemetry,
    instrument: Any,
    mode: str,
    tool: str,
    key_name: str,
    cut: str,
) -> None:
    fault, kind = CUTS[cut]
    instrument(servers=checkout(commerce, tool, key_name, kind))
    commerce.faults.add(tool, fault())
    arguments = {"amount": 5, "meta": {key_name: "order-77", "channel": "agent"}}
    async with Client(commerce.url, mode=mode) as client:
        result = await client.call_tool(tool, arguments)
    assert not is_error(result)
    assert commerce.counters.executions(tool) == 1  # sent twice, ran once
    # After a cut the server ran it and deduplicated the repeat; a 429 ran nothing the first time.
    assert commerce.counters.deduplicated(tool) == (1 if kind == "network" else 0)
    record = the_record(telemetry)
    assert record[t.SENT] == 2 == commerce.counters.posts(record[t.JSONRPC_REQUEST_ID])
    assert record[t.ATTEMPTS_PERMISSION] == ("first", "app")
    first, second = bodies(commerce, tool)
    assert first == second  # the repeat is the same request: the same bytes, key and all
    assert b"order-77" in first


@pytest.mark.parametrize(("tool", "key_name"), LAYOUTS, ids=[tool for tool, _ in LAYOUTS])
@pytest.mark.parametrize(
    "meta",
    [None, {}, "empty", "other layout", "top level", "not a string"],
)
async def test_a_checkout_without_its_nested_key_is_never_repeated(
    commerce: ServerHandle, telemetry: Telemetry, instrument: Any, tool: str, key_name: str, meta: Any
) -> None:
    other = next(name for name in COMMERCE_KEYS.values() if name != key_name)
    arguments: dict[str, Any] = {"amount": 5}
    if meta == "empty":
        arguments["meta"] = {key_name: ""}
    elif meta == "other layout":
        arguments["meta"] = {other: "order-77"}
    elif meta == "top level":
        arguments[key_name] = "order-77"
    elif meta == "not a string":
        arguments["meta"] = {key_name: {"value": "order-77"}}
    elif meta is not None:
        arguments["meta"] = meta
    instrument(servers=checkout(commerce, tool, key_name))
    commerce.faults.add(tool, DropAfterExecution())
    async with Client(commerce.url) as client:
        with pytest.raises(UnknownEffectError):
            await client.call_tool(tool, arguments)
    assert commerce.counters.executions(tool) == 1
    assert len(bodies(commerce, tool)) == 1
    record = the_record(telemetry)
    assert record[t.SENT] == 1
    assert (attempt_spans(telemetry)[0].attributes or {})[t.DECLINED] == "changes-without-key"


@pytest.mark.parametrize(("tool", "key_name"), LAYOUTS, ids=[tool for tool, _ in LAYOUTS])
async def test_the_repeat_guard_lets_a_call_carrying_its_nested_key_through(
    commerce: ServerHandle, telemetry: Telemetry, instrument: Any, tool: str, key_name: str
) -> None:
    """A framework's blind repeat of a checkout whose effect is unknown: refused without the key (the
    guard), sent with it, and the server's deduplication answers it without running it again."""
    instrument(servers=checkout(commerce, tool, key_name, on=""))
    keyed = {"amount": 5, "meta": {key_name: "order-78"}}
    unkeyed = {"amount": 6, "meta": {"channel": "agent"}}
    async with Client(commerce.url) as client:
        for arguments in (keyed, unkeyed):
            commerce.faults.add(tool, DropAfterExecution())
            with pytest.raises(UnknownEffectError):
                await client.call_tool(tool, arguments)
        assert commerce.counters.executions(tool) == 2
        with pytest.raises(RepeatRefusedError):
            await client.call_tool(tool, unkeyed)
        assert not is_error(await client.call_tool(tool, keyed))
    assert commerce.counters.executions(tool) == 2
    assert commerce.counters.deduplicated(tool) == 1
    assert len(bodies(commerce, tool)) == 3  # the refused one never left
    assert len(records(telemetry)) == 4


CANARIES = ("CANARY-KEY-9d2b", "CANARY-NOTE-41aa", "CANARY-SKU-77c0", "987654321")


@pytest.mark.parametrize(("tool", "key_name"), LAYOUTS, ids=[tool for tool, _ in LAYOUTS])
async def test_no_nested_key_or_argument_reaches_telemetry_logs_or_errors(
    commerce: ServerHandle,
    telemetry: Telemetry,
    instrument: Any,
    caplog: pytest.LogCaptureFixture,
    tool: str,
    key_name: str,
) -> None:
    """Repeated with its nested key, then refused with the key at the other protocol's place: no
    exported span (any instrumentation's), event, log record of the plugin's or error holds a value
    of the call. (The SDK's own DEBUG log of each message it sends is the SDK's.)"""
    caplog.set_level(logging.DEBUG, logger="otel_mcp_replay")
    other = next(name for name in COMMERCE_KEYS.values() if name != key_name)
    key, note, sku, amount = CANARIES
    cart = {"amount": int(amount), "items": [{"sku": sku, "qty": 1}]}
    instrument(servers=checkout(commerce, tool, key_name))
    async with Client(commerce.url) as client:
        commerce.faults.add(tool, DropAfterExecution())
        await client.call_tool(tool, {**cart, "meta": {key_name: key, "note": note}})
        commerce.faults.add(tool, DropAfterExecution())
        with pytest.raises(UnknownEffectError) as refused:
            await client.call_tool(tool, {**cart, "meta": {other: key, "note": note}})
    assert commerce.counters.executions(tool) == 2 and commerce.counters.deduplicated(tool) == 1
    assert [r[t.SENT] for r in records(telemetry)] == [2, 1]  # repeated, then not: both read
    spans = telemetry.spans()
    exported = repr(
        [
            (
                s.name,
                dict(s.attributes or {}),
                [(e.name, dict(e.attributes or {})) for e in s.events],
                s.status,
            )
            for s in spans
        ]
    )
    error = "".join(traceback.format_exception(refused.value))
    logged = "\n".join(
        f"{r.getMessage()} {r.args!r} {vars(r)!r}"
        for r in caplog.records
        if r.name.startswith("otel_mcp_replay")
    )
    assert spans
    for canary in CANARIES:
        assert canary not in exported
        assert canary not in logged
        assert canary not in error
