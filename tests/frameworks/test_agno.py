"""The law under agno: its `MCPTools` toolkit (which connects through fastmcp's `Client`, in the
legacy era unless told `protocol_mode="auto"`, the newest era both speak), each tool run as an agno
agent runs one (`FunctionCall.aexecute` of the toolkit's function: no LLM), against the real fault
server on 127.0.0.1 over streamable HTTP in both eras and the legacy SSE transport.

agno's tool entrypoint pings the session before each call, then catches any `MCPError` and hands
the model a text: "MCP tool '<tool>' failed: <message>. ...". The plugin's errors are `MCPError`s, so
its message reaches the model that way. agno retries no tool call; a model that calls again after
the call may have run is refused by the repeat guard before anything is sent.

Ground truth is the server's count of executions per tool; the plugin's record says the rest.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from agno.tools.function import FunctionCall
from agno.tools.mcp import MCPTools
from tests.support.scenarios import (
    Call,
    Driver,
    a_429_repeated,
    a_clean_call,
    a_cut_called_again,
    handed_in_words,
    is_sse,
)
from tests.support.telemetry import Telemetry

from harness.server import ServerHandle, running_server

pytestmark = pytest.mark.anyio

NEWEST_ERA = "2026-07-28"  # the protocol version "auto" comes to over streamable HTTP
AGNO_FAILED = "MCP tool '{}' failed: "  # agno's prefix to an MCPError's message, handed to the model


# The server's transport, and the era agno's toolkit asks fastmcp's Client for: "legacy" (its default)
# or "auto", the newest both speak (2026-07-28 over streamable HTTP).
WAYS = [("streamable", "legacy"), ("streamable", "auto"), ("sse", "legacy")]


@pytest.fixture(params=WAYS, ids=["-".join(way) for way in WAYS])
def way(request: pytest.FixtureRequest) -> tuple[str, str]:
    kind, mode = request.param
    return kind, mode


@pytest.fixture
def server(way: tuple[str, str]) -> Iterator[ServerHandle]:
    with running_server(way[0]) as handle:
        yield handle


@pytest.fixture
def agno(way: tuple[str, str]) -> Driver:
    """The toolkit an agno app makes for the server's URL in the era asked, connected; each tool run
    as agno's agent runs a model's call of it, to what the model is handed."""

    @asynccontextmanager
    async def connected(server: ServerHandle) -> AsyncIterator[Call]:
        transport = "sse" if is_sse(server) else "streamable-http"
        async with MCPTools(url=server.url, transport=transport, protocol_mode=way[1]) as tools:

            async def call(tool: str, arguments: dict[str, Any]) -> str:
                outcome = await FunctionCall(function=tools.functions[tool], arguments=arguments).aexecute()
                assert outcome.status == "success", outcome  # agno turns a failed call into a text too
                return str(getattr(outcome.result, "content", outcome.result))

            yield call

    return connected


async def test_a_429_is_repeated_by_the_apps_permission(
    server: ServerHandle, telemetry: Telemetry, instrument: Any, agno: Driver
) -> None:
    await a_429_repeated(server, telemetry, instrument, agno)


async def test_the_model_calling_again_after_the_cut_is_refused_by_the_repeat_guard(
    server: ServerHandle, telemetry: Telemetry, instrument: Any, agno: Driver
) -> None:
    """The model is handed the plugin's word that the call may have run, then the refusal."""
    first, repeat = await a_cut_called_again(server, telemetry, instrument, agno)
    handed_in_words(first, repeat, AGNO_FAILED.format("send_email"))


async def test_a_clean_call_is_one_call_span_with_its_post_under_it(
    server: ServerHandle, telemetry: Telemetry, instrument: Any, agno: Driver, way: tuple[str, str]
) -> None:
    """The call's one MCP client span is fastmcp's, which the plugin writes onto; agno's ping before
    the call is a request of its own, no attempt of the call's. The call went in the era asked."""
    await a_clean_call(server, telemetry, instrument, agno, "fastmcp")
    eras = {post.protocol_version for post in server.counters.post_log() if post.tool == "search"}
    if way == ("streamable", "auto"):
        assert eras == {NEWEST_ERA}, eras
    else:
        assert eras and NEWEST_ERA not in eras, eras
