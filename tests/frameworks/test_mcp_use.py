"""The law under mcp-use: its `MCPClient` (streamable HTTP first, the legacy SSE transport when that
fails) and the LangChain tools its `MCPAgent` hands the model (`LangChainAdapter`), each invoked as
the agent invokes one (no LLM), against the real fault server on 127.0.0.1 over streamable HTTP (and
the legacy SSE transport, which mcp-use reaches by falling back), with `instrument()` called after
mcp-use was imported.

mcp-use's tool hands the model any error of a call as a dict, `{"error": <its type's name>,
"details": <its message>, ...}`: the plugin's error reaches the model by name, with its message.
mcp-use retries no tool call; a model that calls again after the call may have run is refused by
the repeat guard before anything is sent. Its anonymous telemetry (PostHog, Scarf) is off here, as
its documentation says to turn it off: nothing leaves 127.0.0.1.

Runs in the mcp 1.x environment (scripts/test-lines): mcp-use 1.7 pins mcp < 2. Ground truth is the
server's count of executions per tool; the plugin's record says the rest.
"""

from __future__ import annotations

import os

os.environ["MCP_USE_ANONYMIZED_TELEMETRY"] = "false"  # read once, as mcp-use is imported

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from mcp_use import MCPClient
from mcp_use.agents.adapters import LangChainAdapter
from tests.support.scenarios import (
    MAY_HAVE_RUN,
    NOT_SENT,
    Call,
    a_429_repeated,
    a_clean_call,
    a_cut_called_again,
)
from tests.support.telemetry import Telemetry

from harness.server import ServerHandle
from otel_mcp_replay import telemetry as t

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def mcp_use(server: ServerHandle) -> AsyncIterator[Call]:
    """The tools mcp-use's agent hands the model, over a client of the server's URL; each invoked as
    the agent invokes a model's call of it, to what the model is handed."""
    client = MCPClient.from_dict({"mcpServers": {"demo": {"url": server.url}}})
    try:
        tools = {tool.name: tool for tool in await LangChainAdapter().create_tools(client)}

        async def call(tool: str, arguments: dict[str, Any]) -> Any:
            return await tools[tool].ainvoke(arguments)

        yield call
    finally:
        await client.close_all_sessions()


# On SSE too: mcp-use tries streamable HTTP first and falls back (its connect takes about 5 s there).
@pytest.mark.parametrize("server", ["streamable", "sse"], indirect=True)
async def test_a_429_is_repeated_by_the_apps_permission(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    await a_429_repeated(server, telemetry, instrument, mcp_use)


async def test_the_model_calling_again_after_the_cut_is_refused_by_the_repeat_guard(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    """The model is handed the plugin's error by name, saying the call may have run, then the
    refusal by name."""
    first, repeat = await a_cut_called_again(server, telemetry, instrument, mcp_use)
    assert first["error"] == "UnknownEffectError" and MAY_HAVE_RUN in first["details"].lower(), first
    assert repeat["error"] == "RepeatRefusedError" and NOT_SENT in repeat["details"], repeat


async def test_a_clean_call_is_one_call_span_with_its_post_under_it(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    """The call's one MCP client span is the plugin's: mcp 1.x makes none."""
    await a_clean_call(server, telemetry, instrument, mcp_use, t.INSTRUMENTATION_NAME)
