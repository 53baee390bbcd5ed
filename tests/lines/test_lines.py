"""The law on either mcp line, over streamable HTTP and the legacy SSE transport: the same tests,
written against what both lines share (`streamable_http_client`, `sse_client`, `ClientSession`,
the error class each line has), run on mcp 2.x with
the whole suite and on mcp 1.30, 1.24 and 2.0, each in its own environment (scripts/test-lines).

The server is each line's own (`MCPServer` on 2.x, `FastMCP` on 1.x, harness/sdk.py); executions
are counted on it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from mcp import ClientSession
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from tests.support.calls import declared
from tests.support.telemetry import Telemetry, attempt_spans, decided_attempts, records, the_record

from harness.faults import DropAfterExecution, DropMidBody, Fault, SseWithoutAnswer, Status, Throttle
from harness.server import ServerHandle, running_server
from otel_mcp_replay import UnknownEffectError
from otel_mcp_replay import telemetry as t
from otel_mcp_replay.lines import LINE

pytestmark = pytest.mark.anyio

APP = {"search": {"on": ["throttle"]}, "send_email": {"changes": True, "on": ["network"]}}


# Each line's own server (conftest's `server`), over streamable HTTP and the legacy SSE transport.
SERVER_TRANSPORTS = ("streamable", "sse")


@asynccontextmanager
async def session_on(server: ServerHandle) -> AsyncIterator[ClientSession]:
    """An initialized session, as each line opens one (`sse_client` and `streamable_http_client`
    exist on both; the latter yields a third item on 1.x)."""
    opened = sse_client(server.url) if server.app_kind == "sse" else streamable_http_client(server.url)
    async with opened as streams, ClientSession(streams[0], streams[1]) as session:
        await session.initialize()
        yield session


def is_error(result: Any) -> bool:
    return bool(getattr(result, "is_error", None) or getattr(result, "isError", False))  # 2.x / 1.x


async def test_a_429_is_repeated_by_the_apps_permission(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    instrument(servers=declared(server, APP))
    server.faults.add("search", Throttle("0"))
    async with session_on(server) as session:
        with anyio.fail_after(10):
            result = await session.call_tool("search", {"query": "q"})
    assert not is_error(result)
    assert server.counters.executions("search") == 1
    record = the_record(telemetry)
    assert record[t.ATTEMPTS_STATUS] == (429, 202 if server.app_kind == "sse" else 200)
    assert record[t.ATTEMPTS_PERMISSION] == ("first", "app")
    assert (record[t.VERDICT], record[t.EFFECT]) == ("completed", "unknown")
    first, second = attempt_spans(telemetry)
    assert (second.attributes or {})[t.PERMISSION_BY] == "app"
    assert first.parent is not None and second.parent is not None
    assert first.parent.span_id == second.parent.span_id  # both under the call's span


async def test_compatibility_repeats_a_429_on_its_recorded_assumption(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    instrument()
    server.faults.add("search", Throttle("0"))
    async with session_on(server) as session:
        with anyio.fail_after(10):
            assert not is_error(await session.call_tool("search", {"query": "q"}))
    record = the_record(telemetry)
    assert record[t.ATTEMPTS_PERMISSION] == ("first", "compatibility")
    assert (attempt_spans(telemetry)[1].attributes or {})[t.PERMISSION_ASSUMES] == "refused-before-execution"


async def test_a_changing_tool_cut_after_running_runs_once_and_may_have_run(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    instrument(servers=declared(server, APP))
    server.faults.add("send_email", DropAfterExecution(answer_lost=True))
    async with session_on(server) as session:
        with anyio.fail_after(10), pytest.raises(UnknownEffectError) as unknown:
            await session.call_tool("send_email", {"to": "a", "body": "b"})
        with anyio.fail_after(10):  # only that call failed: the session lives
            assert not is_error(await session.call_tool("search", {"query": "next"}))
    assert isinstance(unknown.value, LINE.error_base())
    assert "may have run" in str(unknown.value).lower()
    assert server.counters.executions("send_email") == 1
    sent = next(r for r in records(telemetry) if r[t.GEN_AI_TOOL_NAME] == "send_email")
    assert (sent[t.VERDICT], sent[t.MAY_HAVE_RUN], sent[t.SENT]) == ("failed", True, 1)
    assert (attempt_spans(telemetry, sent[t.JSONRPC_REQUEST_ID])[0].attributes or {})[
        t.DECLINED
    ] == "changes-without-key"


async def test_a_tool_error_is_an_answer(server: ServerHandle, telemetry: Telemetry, instrument: Any) -> None:
    instrument()
    async with session_on(server) as session:
        with anyio.fail_after(10):
            result = await session.call_tool("fail", {})
    assert is_error(result)
    record = the_record(telemetry)
    assert (record[t.VERDICT], record[t.EFFECT]) == ("tool-error", "applied")


def test_the_line_is_told_by_the_installed_mcp() -> None:
    from importlib.metadata import version

    assert LINE.major == int(version("mcp").split(".")[0])
    assert LINE.http == ("httpx2" if LINE.major >= 2 else "httpx")
    assert issubclass(UnknownEffectError, LINE.error_base())


async def test_concurrent_calls_on_one_session_each_file_their_own_record(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    """Each attempt is its own call's (on 1.x the call is carried to the task that POSTs it). The
    three 429s fall on whichever POSTs come first (the SSE transport sends one at a time)."""
    instrument(servers=declared(server, APP), max_attempts=4)
    for _ in range(3):
        server.faults.add("search", Throttle("0"))
    async with session_on(server) as session:
        with anyio.fail_after(20):
            async with anyio.create_task_group() as group:
                for query in ("a", "b", "c"):
                    group.start_soon(session.call_tool, "search", {"query": query})
    found = records(telemetry)
    assert len(found) == 3
    assert len({r[t.JSONRPC_REQUEST_ID] for r in found}) == 3
    assert all(r[t.VERDICT] == "completed" for r in found)
    assert sum(len(r[t.ATTEMPTS_STATUS]) for r in found) == 6  # each 429 in the record of its own call
    assert sorted(status for r in found for status in r[t.ATTEMPTS_STATUS]).count(429) == 3
    assert server.counters.executions("search") == 3


@pytest.mark.parametrize(
    ("fault", "runs"),
    [(SseWithoutAnswer(run_tool=True), 1), (DropMidBody(), 1), (Status(202), 0)],
    ids=["no-answer", "cut", "accepted"],
)
async def test_a_2xx_that_never_brings_its_answer_fails_the_call_as_may_have_run(
    fault: Fault, runs: int, telemetry: Telemetry, instrument: Any
) -> None:
    """A 200 event stream ends (cleanly, or cut) without the answer, or a 202 answers the request.
    mcp 2.x fails that request itself; mcp 1.x would leave the call waiting for ever
    (docs/mcp-lines.md), so there the plugin ends it: either way the caller gets UnknownEffectError
    (the plugin cannot know the tool did not run), and the session lives."""
    with running_server("streamable") as server:
        instrument(servers=declared(server, APP))
        server.faults.add("search", fault)
        async with session_on(server) as session:
            with anyio.fail_after(10), pytest.raises(UnknownEffectError):
                await session.call_tool("search", {"query": "q"})
            with anyio.fail_after(10):
                assert not is_error(await session.call_tool("search", {"query": "next"}))
        assert server.counters.executions("search") == runs + 1
    lost = records(telemetry)[0]
    assert (lost[t.VERDICT], lost[t.MAY_HAVE_RUN], lost[t.SENT]) == ("failed", True, 1)
    assert lost[t.EFFECT] == "unknown"


async def test_a_caller_giving_up_in_a_retry_after_wait_leaves_the_session_alive(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    """The caller gives up while the plugin waits out a 429's Retry-After: its cancel is not held
    (mcp 2.x tells the server from the caller's task, through the transport busy with that wait:
    on SSE it was held for the Retry-After, and the repeat sent), nothing more is sent, and the
    refusal is handed to no one (mcp 1.x would tear a streamable session down with it, under its
    other calls)."""
    instrument(servers=declared(server, APP))
    server.faults.add("search", Throttle("2"))
    async with session_on(server) as session:
        with anyio.move_on_after(0.3) as waiting:
            await session.call_tool("search", {"query": "given up"})
        assert waiting.cancelled_caught
        # The caller's own cancel, not held for the Retry-After: a held one returns only after the
        # repeat was sent.
        assert server.counters.tool_posts("search") == 1
        # Its one attempt decided without a repeat (declined at the cancel): the series is over.
        (first,) = await decided_attempts(telemetry)
        assert t.WAIT_MS not in (first.attributes or {}) and t.DECLINED in (first.attributes or {})
        assert server.counters.tool_posts("search") == 1
        with anyio.fail_after(10):
            assert not is_error(await session.call_tool("search", {"query": "next"}))
    assert server.counters.tool_posts("search") == 2  # the refused one, and the next call's
    given_up = records(telemetry)[0]
    assert (given_up[t.VERDICT], given_up[t.SENT], given_up[t.ATTEMPTS_STATUS]) == ("failed", 1, (429,))
