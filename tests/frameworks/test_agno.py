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
from tests.support.calls import declared
from tests.support.scenarios import (
    EMAIL,
    MAY_HAVE_RUN,
    NOT_SENT,
    SEARCH,
    SEARCH_RESULT,
    is_sse,
    one_call_span_with_its_post,
    search_repeated_after_its_429,
    told_then_refused,
)
from tests.support.telemetry import Telemetry

from harness.faults import DropAfterExecution, Throttle
from harness.server import ServerHandle, running_server

pytestmark = pytest.mark.anyio

AGNO_FAILED = "MCP tool '{}' failed: "  # agno's prefix to an MCPError's message, handed to the model


@pytest.fixture(params=["streamable", "sse"])
def server(request: pytest.FixtureRequest) -> Iterator[ServerHandle]:
    with running_server(request.param) as handle:
        yield handle


@asynccontextmanager
async def toolkit(server: ServerHandle) -> AsyncIterator[MCPTools]:
    """The toolkit an agno app makes for the server's URL, connected."""
    async with MCPTools(url=server.url, transport="sse" if is_sse(server) else "streamable-http") as tools:
        yield tools


async def run_tool(tools: MCPTools, tool: str, arguments: dict[str, Any]) -> str:
    """The tool run as agno's agent runs a model's call of it: what the model is handed."""
    call = FunctionCall(function=tools.functions[tool], arguments=arguments)
    outcome = await call.aexecute()
    assert outcome.status == "success", outcome  # agno turns a failed call into a text too
    return str(getattr(outcome.result, "content", outcome.result))


async def test_a_429_is_repeated_by_the_apps_permission(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    instrument(servers=declared(server, {"search": {"on": ["throttle"]}}))
    server.faults.add("search", Throttle())
    async with toolkit(server) as tools:
        assert await run_tool(tools, *SEARCH) == SEARCH_RESULT
    search_repeated_after_its_429(server, telemetry)


async def test_the_model_calling_again_after_the_cut_is_refused_by_the_repeat_guard(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    """A changing tool cut after it ran: the model is handed the plugin's word that it may have run;
    it calls the tool again, and the repeat is refused before it is sent; the same toolkit goes on
    working."""
    instrument(servers=declared(server, {"send_email": {"changes": True}}))
    server.faults.add("send_email", DropAfterExecution(answer_lost=True))
    async with toolkit(server) as tools:
        first = await run_tool(tools, *EMAIL)
        repeat = await run_tool(tools, *EMAIL)
        assert await run_tool(tools, *SEARCH) == SEARCH_RESULT
    failed = AGNO_FAILED.format("send_email")
    assert first.startswith(failed) and MAY_HAVE_RUN in first.lower(), first
    assert repeat.startswith(failed) and NOT_SENT in repeat, repeat
    told_then_refused(server, telemetry)


async def test_a_clean_call_is_one_call_span_with_its_post_under_it(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    """The call's one MCP client span (fastmcp's, which the plugin writes onto), its POST under it;
    agno's ping before the call is a request of its own, never a tool call's."""
    instrument(servers=declared(server, {"search": {"on": ["throttle"]}}))
    async with toolkit(server) as tools:
        assert await run_tool(tools, *SEARCH) == SEARCH_RESULT
    one_call_span_with_its_post(server, telemetry, "fastmcp")  # the ping is no attempt of the call's
