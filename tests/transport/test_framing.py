"""No server's framing weakens the law (issue 40): the answer is read as the SDK reads it, whatever
the event-stream rules let a server send and whatever encoding a proxy puts on the body. Against the
SDK's own server on loopback, framed by ASGI middleware in front of it (harness/framing.py: a
priming event opening every event stream, as Rust's rmcp opens its GET stream; a proxy that
gzips or deflates each chunk, `no-transform` or not), each call run in both protocol eras and on
both mcp lines (scripts/test-lines runs this file on 1.30), executions counted on the server.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from tests.support.calls import declared
from tests.support.telemetry import Telemetry, records

from harness.client import Client, McpError
from harness.faults import DropMidBody, JsonRpcError
from harness.framing import Compressed, Encoding, PrimingEvents
from harness.sdk import LINE as SDK_LINE
from harness.server import AppKind, ServerHandle, running_server
from otel_mcp_replay import UnknownEffectError
from otel_mcp_replay import telemetry as t

pytestmark = pytest.mark.anyio

# The series' two ways of reading an event stream: ahead of the SDK until the answer (the law
# permits a repeat after a cut: `network` named) and as the SDK reads it (no repeat permitted).
READINGS = {"read ahead": {"on": ["network"]}, "as the SDK reads": {}}
ENCODINGS: tuple[Encoding, ...] = ("gzip", "deflate")


class Primed:
    """The demo server with every event stream primed (the standalone GET's and each POST's)."""

    def __init__(self) -> None:
        self.priming: PrimingEvents | None = None

    def __call__(self, app: Any) -> PrimingEvents:
        self.priming = PrimingEvents(app, posts=True)
        return self.priming


@pytest.fixture
def primed() -> Iterator[tuple[ServerHandle, Primed]]:
    middleware = Primed()
    with running_server("streamable", middleware=middleware) as handle:
        yield handle, middleware


async def text_of(client: Any, query: str) -> str:
    text: str = (await client.call_tool("search", {"query": query})).content[0].text
    return text


async def opened_and_primed(client: Any, middleware: Primed, mode: str) -> None:
    """The session's standalone GET stream is open and primed (legacy era: the 2026-07-28 era opens
    none), and one request went round after it, so the client has read the priming event before
    the calls that follow. The 10 s bound guards a hang only."""
    if mode != "legacy":
        return
    assert middleware.priming is not None
    assert await anyio.to_thread.run_sync(middleware.priming.wait_primed_get)
    await client.list_tools()


async def test_a_priming_event_on_the_get_stream_announces_no_message_endpoint(
    primed: tuple[ServerHandle, Primed], telemetry: Telemetry, instrument: Any, mode: str
) -> None:
    """rmcp's GET stream opens with `id: 0`, `retry: 3000`, an empty `data:`: no `endpoint` event.
    Every call on that session is still a streamable-HTTP call, answered on its own POST: each one's
    result read, its record `applied`, and the server's own JSON-RPC error the caller's, as the SDK
    alone raises it (never UnknownEffectError)."""
    server, middleware = primed
    instrument(servers=declared(server, {"search": {"on": ["network"]}, "fail": {}}))
    async with Client(server.url, mode=mode) as client:
        with anyio.fail_after(20):
            await opened_and_primed(client, middleware, mode)
            texts = [await text_of(client, f"q{i}") for i in range(3)]
            server.faults.add("search", JsonRpcError(-32602, "Invalid params"))  # the server's own error
            with pytest.raises(McpError) as raised:
                await client.call_tool("search", {"query": "refused"})
    assert type(raised.value) is McpError
    assert texts == [f"3 results for 'q{i}'" for i in range(3)]
    assert server.counters.executions("search") == 3 and server.counters.tool_posts("search") == 4
    found = records(telemetry)
    assert [(r[t.EFFECT], r[t.VERDICT], r[t.ATTEMPTS_FAILURE]) for r in found[:3]] == [
        ("applied", "completed", ("",))
    ] * 3
    refused = found[3]
    assert (refused[t.VERDICT], refused[t.MAY_HAVE_RUN]) == ("failed", False)
    assert (refused[t.ATTEMPTS_STATUS], refused[t.ATTEMPTS_FAILURE]) == ((200,), ("error",))


@pytest.mark.parametrize("reading", list(READINGS))
@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("app_kind", ["streamable", "streamable-json"])
async def test_a_compressed_answer_is_read_as_the_client_decoded_it(
    app_kind: AppKind, encoding: Encoding, reading: str, telemetry: Telemetry, instrument: Any, mode: str
) -> None:
    """A proxy gzips or deflates every response (event streams chunk by chunk, and JSON bodies):
    the HTTP client decodes them and the SDK reads the answer; so does the plugin, whichever way
    the series reads the stream."""
    proxies: list[Compressed] = []

    def proxy(app: Any) -> Compressed:
        proxies.append(Compressed(app, encoding))
        return proxies[0]

    with running_server(app_kind, middleware=proxy) as server:
        instrument(servers=declared(server, {"search": READINGS[reading]}))
        async with Client(server.url, mode=mode) as client:
            with anyio.fail_after(20):
                texts = [await text_of(client, f"q{i}") for i in range(2)]
        assert texts == ["3 results for 'q0'", "3 results for 'q1'"]
        assert server.counters.executions("search") == 2 == server.counters.tool_posts("search")
    assert proxies[0].encoded >= 2  # every answer went out encoded
    found = records(telemetry)
    assert [(r[t.EFFECT], r[t.VERDICT], r[t.ATTEMPTS_STATUS], r[t.ATTEMPTS_FAILURE]) for r in found] == [
        ("applied", "completed", (200,), ("",))
    ] * 2


@pytest.mark.parametrize("encoding", ENCODINGS)
async def test_a_compressed_answer_cut_mid_body_is_repeated_as_the_law_permits(
    encoding: Encoding, telemetry: Telemetry, instrument: Any, mode: str
) -> None:
    """The tool ran, and its compressed answer was cut half-way: the law permits the repeat (the
    tool names `network`, the call carries its key), and the repeat's answer is read."""
    with running_server("streamable", middleware=lambda app: Compressed(app, encoding)) as server:
        charge = {"charge": {"changes": True, "on": ["network"]}}
        instrument(servers=declared(server, charge, deduplicates={"argument": "idempotency_key"}))
        server.faults.add("charge", DropMidBody())
        async with Client(server.url, mode=mode) as client:
            with anyio.fail_after(20):
                result = await client.call_tool("charge", {"amount": 5, "idempotency_key": "k-5"})
        assert "charged 5" in result.content[0].text
        assert server.counters.tool_posts("charge") == 2  # repeated once ...
        assert server.counters.executions("charge") == 1  # ... and charged once: the key held
    (record,) = records(telemetry)
    assert (record[t.SENT], record[t.VERDICT]) == (2, "completed")
    assert record[t.ATTEMPTS_FAILURE] == ("network", "")
    assert record[t.ATTEMPTS_EFFECT] == ("unknown", "applied")


# -- one truth per fact: what is known depends on what happened, never on the declaration --

BIG = 2 * 1024 * 1024  # over mcp 2.x's cap on one event (1 MiB); 1.x has none


@pytest.mark.parametrize("reading", list(READINGS))
async def test_a_large_answer_is_recorded_as_the_sdk_read_it_whatever_the_declaration(
    server: ServerHandle, telemetry: Telemetry, instrument: Any, reading: str
) -> None:
    """A 2 MB answer on an event stream: where the SDK's reader takes it (mcp 1.x), the call
    completed and its record says `applied`; where the reader refuses it over its cap (mcp 2.x), the
    caller never got the answer and the record says it never came. The same either way the series
    reads the stream: the law decides repeats, never what is known."""
    instrument(servers=declared(server, {"bulk": READINGS[reading]}))
    async with Client(server.url, mode="legacy") as client:
        with anyio.fail_after(30):
            try:
                result = await client.call_tool("bulk", {"size": BIG})
            except UnknownEffectError:
                result = None
    assert server.counters.executions("bulk") == 1 == server.counters.tool_posts("bulk")
    (record,) = records(telemetry)
    if SDK_LINE == 2:  # the SDK refused the event: no answer reached the caller
        assert result is None
        assert (record[t.EFFECT], record[t.VERDICT], record[t.MAY_HAVE_RUN]) == ("unknown", "failed", True)
        assert (record[t.ATTEMPTS_STATUS], record[t.ATTEMPTS_FAILURE]) == ((200,), ("error",))
    else:
        assert result is not None and len(result.content[0].text) == BIG
        assert (record[t.EFFECT], record[t.VERDICT], record[t.ATTEMPTS_FAILURE]) == (
            "applied",
            "completed",
            ("",),
        )


@pytest.mark.parametrize("app_kind", ["streamable", "streamable-json"])
async def test_a_response_cut_mid_body_keeps_its_status_whatever_its_framing(
    app_kind: AppKind, telemetry: Telemetry, instrument: Any, mode: str
) -> None:
    """The tool ran and its answer was cut half-way, in a JSON body or an event stream: a response
    came (200) and its connection was lost before the answer (`network`), never repeated here (no
    tool names `network`); the caller is told it may have run."""
    with running_server(app_kind) as server:
        instrument(servers=declared(server, {"search": {}}))
        server.faults.add("search", DropMidBody())
        async with Client(server.url, mode=mode) as client:
            with anyio.fail_after(20), pytest.raises(UnknownEffectError):
                await client.call_tool("search", {"query": "q"})
        assert server.counters.executions("search") == 1 == server.counters.tool_posts("search")
    (record,) = records(telemetry)
    assert (record[t.ATTEMPTS_STATUS], record[t.ATTEMPTS_FAILURE]) == ((200,), ("network",))
    assert (record[t.EFFECT], record[t.MAY_HAVE_RUN]) == ("unknown", True)
