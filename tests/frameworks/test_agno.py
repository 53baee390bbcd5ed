"""The law under agno: its `MCPTools` toolkit (which connects through fastmcp's `Client`, in the
legacy era unless told otherwise), each tool run as an agno agent runs one (`FunctionCall.aexecute`
of the toolkit's function: no LLM), against the real fault server on 127.0.0.1 over streamable HTTP
and the legacy SSE transport.

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
    a_429_repeated,
    a_clean_call,
    a_cut_called_again,
    handed_in_words,
    is_sse,
)
from tests.support.telemetry import Telemetry

from harness.server import ServerHandle, running_server

pytestmark = pytest.mark.anyio

AGNO_FAILED = "MCP tool '{}' failed: "  # agno's prefix to an MCPError's message, handed to the model


@pytest.fixture(params=["streamable", "sse"])
def server(request: pytest.FixtureRequest) -> Iterator[ServerHandle]:
    with running_server(request.param) as handle:
        yield handle


@asynccontextmanager
async def agno(server: ServerHandle) -> AsyncIterator[Call]:
    """The toolkit an agno app makes for the server's URL, connected; each tool run as agno's agent
    runs a model's call of it, to what the model is handed."""
    async with MCPTools(url=server.url, transport="sse" if is_sse(server) else "streamable-http") as tools:

        async def call(tool: str, arguments: dict[str, Any]) -> str:
            outcome = await FunctionCall(function=tools.functions[tool], arguments=arguments).aexecute()
            assert outcome.status == "success", outcome  # agno turns a failed call into a text too
            return str(getattr(outcome.result, "content", outcome.result))

        yield call


async def test_a_429_is_repeated_by_the_apps_permission(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    await a_429_repeated(server, telemetry, instrument, agno)


async def test_the_model_calling_again_after_the_cut_is_refused_by_the_repeat_guard(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    """The model is handed the plugin's word that the call may have run, then the refusal."""
    first, repeat = await a_cut_called_again(server, telemetry, instrument, agno)
    handed_in_words(first, repeat, AGNO_FAILED.format("send_email"))


async def test_a_clean_call_is_one_call_span_with_its_post_under_it(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    """The call's one MCP client span is fastmcp's, which the plugin writes onto; agno's ping before
    the call is a request of its own, no attempt of the call's."""
    await a_clean_call(server, telemetry, instrument, agno, "fastmcp")
