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
from opentelemetry.trace import SpanKind
from tests.support.calls import declared
from tests.support.scenarios import (
    EMAIL,
    MAY_HAVE_RUN,
    NOT_SENT,
    SEARCH,
    SEARCH_RESULT,
    children_of,
    is_sse,
    posted_status,
    scope_of,
    search_repeated_after_its_429,
)
from tests.support.telemetry import Telemetry, records, the_record

from harness.faults import DropAfterExecution, Throttle
from harness.server import ServerHandle, running_server
from otel_mcp_replay import telemetry as t

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
    assert server.counters.executions("send_email") == 1
    assert server.counters.tool_posts("send_email") == 1
    assert server.counters.executions("search") == 1
    failed = AGNO_FAILED.format("send_email")
    assert first.startswith(failed) and MAY_HAVE_RUN in first.lower(), first
    assert repeat.startswith(failed) and NOT_SENT in repeat, repeat
    told, refused, searched = records(telemetry)
    assert (told[t.MAY_HAVE_RUN], told[t.EFFECT], told[t.VERDICT]) == (True, "unknown", "failed")
    assert (refused[t.VERDICT], refused[t.SENT], refused[t.EFFECT]) == ("failed", 0, "none")
    assert searched[t.VERDICT] == "completed"


async def test_a_clean_call_is_one_call_span_with_its_post_under_it(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    """The call's one MCP client span (fastmcp's, which the plugin writes onto), its POST under it;
    agno's ping before the call is a request of its own, never a tool call's."""
    instrument(servers=declared(server, {"search": {"on": ["throttle"]}}))
    async with toolkit(server) as tools:
        assert await run_tool(tools, *SEARCH) == SEARCH_RESULT
    assert server.counters.executions("search") == 1
    spans = telemetry.spans()
    # (The server runs in this process: its own spans of the call, SERVER spans, are beside these.)
    calls = [
        s
        for s in spans
        if s.kind is SpanKind.CLIENT and (s.attributes or {}).get(t.MCP_METHOD_NAME) == t.TOOLS_CALL_METHOD
    ]
    assert [(s.name, scope_of(s)) for s in calls] == [("tools/call search", "fastmcp")]
    (call,) = calls
    assert (call.attributes or {})[t.VERDICT] == "completed"
    assert (t.ATTEMPT_SPAN_NAME, t.INSTRUMENTATION_NAME) in children_of(spans, call)
    record = the_record(telemetry)  # the ping is no attempt of the call's
    assert (record[t.SENT], record[t.ATTEMPTS_STATUS]) == (1, (posted_status(server),))
