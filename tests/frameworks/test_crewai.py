"""The law under CrewAI, both ways a crew gets an MCP server's tools, each tool run as its agent
runs one the model asked for (`BaseTool.run`, no LLM), against the real fault server on 127.0.0.1:
- crewai-tools' `MCPServerAdapter` (through mcpadapt), over streamable HTTP: the plugin's errors
  reach the agent as themselves;
- the native MCP tools an `Agent` gets from its `mcps` (resolved by crewai's `MCPToolResolver`),
  over SSE. CrewAI opens a session of its own for every run, and repeats a failed call itself: up
  to 3 attempts, 1 s then 2 s apart, whatever failed (`MCPClient._retry_operation`). A changing
  tool cut after it ran is the case the plugin exists for: crewai's own repeats of it are refused
  before they are sent, and it ran once. (Over streamable HTTP, against the mcp 1.30 SDK's own
  server, crewai 1.15's native tools fail every run as they disconnect, "no running event loop",
  with or without the plugin: not tested.)

crewai 1.15 pins mcp < 2 and brings much (chromadb, lancedb, onnxruntime): it runs in an environment
of its own with semantic-kernel (.venv-fw-mcp1, scripts/test-lines); elsewhere this file is
skipped. Its telemetry (spans exported to crewai's collector) is off here, as its documentation
says to turn it off: nothing leaves 127.0.0.1. Ground truth is the server's count of executions
per tool; the plugin's records say the rest.
"""

from __future__ import annotations

import functools
import logging
import os

# Read as crewai's telemetry would export: off before anything of crewai is imported.
os.environ["CREWAI_DISABLE_TELEMETRY"] = "true"
os.environ["CREWAI_DISABLE_TRACKING"] = "true"

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

pytest.importorskip("crewai", reason="crewai runs in its own environment (.venv-fw-mcp1)")

from crewai.mcp import MCPServerSSE
from crewai.mcp.tool_resolver import MCPToolResolver
from crewai_tools import MCPServerAdapter
from tests.support.calls import declared
from tests.support.scenarios import (
    EMAIL,
    MAY_HAVE_RUN,
    NOT_SENT,
    Call,
    a_429_repeated,
    a_clean_call,
    a_cut_called_again,
    bounded,
    is_sse,
)
from tests.support.telemetry import Telemetry, records

from harness.faults import DropAfterExecution
from harness.server import ServerHandle
from otel_mcp_replay import RepeatRefusedError, UnknownEffectError
from otel_mcp_replay import telemetry as t

pytestmark = pytest.mark.anyio

CREWAI_ATTEMPTS = 3  # crewai's MCP_MAX_RETRIES: each native tool run tries this many times


# The native tools' tests run on the SSE transport (tests/conftest.py's `server`, made so here).
ON_SSE = pytest.mark.parametrize("server", ["sse"], indirect=True)


def _running(tools: dict[str, Any]) -> Call:
    """Each tool run as a crewai agent runs one (synchronously: crewai runs its own event loop; here
    in a worker thread, as under an agent's executor), to what the agent gets: its result, or the
    error it raised."""

    async def call(tool: str, arguments: dict[str, Any]) -> Any:
        run: Callable[[], Any] = functools.partial(tools[tool].run, **arguments)
        try:
            return await anyio.to_thread.run_sync(run)
        except Exception as error:
            return error

    return call


@asynccontextmanager
async def crewai_tools(server: ServerHandle) -> AsyncIterator[Call]:
    """crewai-tools' adapter for the server's URL, its tools by name."""
    params = {"url": server.url, "transport": "sse" if is_sse(server) else "streamable-http"}
    adapter = MCPServerAdapter(params)
    tools = await anyio.to_thread.run_sync(adapter.__enter__)
    try:
        yield _running({tool.name: tool for tool in tools})
    finally:
        await anyio.to_thread.run_sync(adapter.__exit__, None, None, None)


@asynccontextmanager
async def crewai_native(server: ServerHandle) -> AsyncIterator[Call]:
    """The native tools an agent gets from the server's config in its `mcps`, by their name on the
    server."""
    resolver = MCPToolResolver(agent=None, logger=_Logger())
    resolved = await anyio.to_thread.run_sync(resolver.resolve, [MCPServerSSE(url=server.url)])
    try:
        yield _running({tool.original_tool_name: tool for tool in resolved})
    finally:
        await anyio.to_thread.run_sync(resolver.cleanup)


class _Logger:
    """The logger crewai's resolver writes to (an agent's own, else this): to the log."""

    def log(self, level: str, message: str, *args: Any, **kwargs: Any) -> None:
        logging.getLogger("crewai.test").log(logging.getLevelName(level.upper()), message)


# -- crewai-tools' MCPServerAdapter --


async def test_a_429_is_repeated_by_the_apps_permission(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    await a_429_repeated(server, telemetry, instrument, crewai_tools)


async def test_the_agent_calling_again_after_the_cut_is_refused_by_the_repeat_guard(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    """The agent gets the plugin's errors themselves: the call may have run, then the refusal."""
    first, repeat = await a_cut_called_again(server, telemetry, instrument, crewai_tools)
    assert isinstance(first, UnknownEffectError) and MAY_HAVE_RUN in str(first).lower(), first
    assert isinstance(repeat, RepeatRefusedError) and NOT_SENT in str(repeat), repeat


async def test_a_clean_call_is_one_call_span_with_its_post_under_it(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    """The call's one MCP client span is the plugin's (mcp 1.x makes none, crewai's telemetry is
    off)."""
    await a_clean_call(server, telemetry, instrument, crewai_tools, t.INSTRUMENTATION_NAME)


# -- an Agent's native MCP tools (its `mcps`) --


@ON_SSE
async def test_a_native_tool_s_429_is_repeated_by_the_apps_permission(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    await a_429_repeated(server, telemetry, instrument, crewai_native)


@ON_SSE
async def test_crewais_own_repeats_of_a_call_that_may_have_run_are_refused_unsent(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    """The changing email is cut after it ran; crewai tries it twice more, each refused before it is
    sent: it ran once, and the agent is told it may have run."""
    instrument(servers=declared(server, {"send_email": {"changes": True}}))
    server.faults.add("send_email", DropAfterExecution(answer_lost=True))
    async with crewai_native(server) as call:
        failed = await bounded(call, *EMAIL)
    assert server.counters.executions("send_email") == 1
    assert server.counters.tool_posts("send_email") == 1
    # crewai's RuntimeError around its last attempt's error: the refusal, saying it may have run.
    assert isinstance(failed, RuntimeError) and isinstance(failed.__cause__, ConnectionError), repr(failed)
    assert isinstance(failed.__cause__.__cause__, RepeatRefusedError), repr(failed.__cause__)
    assert f"after {CREWAI_ATTEMPTS} attempts" in str(failed) and NOT_SENT in str(failed), failed
    told, *refused = records(telemetry)
    assert (told[t.MAY_HAVE_RUN], told[t.EFFECT], told[t.VERDICT]) == (True, "unknown", "failed")
    assert len(refused) == CREWAI_ATTEMPTS - 1
    assert all((r[t.VERDICT], r[t.SENT], r[t.EFFECT]) == ("failed", 0, "none") for r in refused), refused
