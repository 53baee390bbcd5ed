"""LangChain's world (mcp 1.x): langchain-mcp-adapters' MultiServerMCPClient tools, invoked through
LangChain's own tool interface (no LLM), against the fault server over streamable HTTP, with
`instrument()` called after langchain-mcp-adapters was imported. Runs in the mcp 1.x environment
(scripts/test-lines): langchain-mcp-adapters 0.3.2 pins mcp < 2."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from langchain_mcp_adapters.client import MultiServerMCPClient
from tests.support.calls import declared
from tests.support.telemetry import Telemetry, records

from harness.faults import DropAfterExecution, Throttle
from harness.server import ServerHandle
from otel_mcp_replay import UnknownEffectError
from otel_mcp_replay import telemetry as t

pytestmark = pytest.mark.anyio

APP = {"search": {"on": ["throttle"]}, "send_email": {"changes": True, "on": ["network"]}}


async def tools_of(server: ServerHandle) -> dict[str, Any]:
    client = MultiServerMCPClient({"demo": {"url": server.url, "transport": "streamable_http"}})
    return {tool.name: tool for tool in await client.get_tools()}


async def test_a_429_is_repeated_by_the_apps_permission(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    instrument(servers=declared(server, APP))
    tools = await tools_of(server)
    server.faults.add("search", Throttle("0"))
    with anyio.fail_after(20):
        answer = await tools["search"].ainvoke({"query": "q"})
    assert "q" in str(answer)
    assert server.counters.executions("search") == 1
    (record,) = [r for r in records(telemetry) if r[t.GEN_AI_TOOL_NAME] == "search"]
    assert record[t.ATTEMPTS_PERMISSION] == ("first", "app")
    assert record[t.ATTEMPTS_STATUS] == (429, 200)


async def test_a_changing_tool_cut_after_running_runs_once_and_reaches_langchain_as_itself(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    """LangChain re-raises an mcp error from the session unwrapped: the app can catch it by name."""
    instrument(servers=declared(server, APP))
    tools = await tools_of(server)
    server.faults.add("send_email", DropAfterExecution())
    with anyio.fail_after(20), pytest.raises(UnknownEffectError):
        await tools["send_email"].ainvoke({"to": "a", "body": "b"})
    assert server.counters.executions("send_email") == 1
    (record,) = [r for r in records(telemetry) if r[t.GEN_AI_TOOL_NAME] == "send_email"]
    assert (record[t.VERDICT], record[t.MAY_HAVE_RUN]) == ("failed", True)
