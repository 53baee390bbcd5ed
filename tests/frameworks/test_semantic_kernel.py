"""The law under Semantic Kernel: its MCP plugins (`MCPStreamableHttpPlugin`, `MCPSsePlugin`) added
to a `Kernel`, each tool called as its automatic function calling calls a model's request for one
(`Kernel.invoke_function_call`, the model's function call and the chat history it answers into: no
LLM), against the real fault server on 127.0.0.1 over streamable HTTP and the legacy SSE transport.

Semantic Kernel hands the model any error of a function as a text in the chat history, "An error
occurred while invoking the function <plugin>-<tool>: <message>": the plugin's message reaches the
model so. It retries no tool call; a model that calls again after the call may have run is refused
by the repeat guard before anything is sent. Its own span of each function (`execute_tool`) holds the
plugin's call span.

semantic-kernel 1.45 pins mcp < 2 and, beside the mcp 1.x line's other frameworks, older pydantic
and cryptography: it runs in an environment of its own with crewai (.venv-fw-mcp1,
scripts/test-lines); elsewhere this file is skipped. Ground truth is the server's count of
executions per tool; the plugin's record says the rest.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

pytest.importorskip("semantic_kernel", reason="semantic-kernel runs in its own environment (.venv-fw-mcp1)")

from semantic_kernel import Kernel
from semantic_kernel.connectors.mcp import MCPSsePlugin, MCPStreamableHttpPlugin
from semantic_kernel.contents import ChatHistory, FunctionCallContent
from tests.support.scenarios import (
    Call,
    a_429_repeated,
    a_clean_call,
    a_cut_called_again,
    call_span_and_ancestry,
    handed_in_words,
    is_sse,
)
from tests.support.telemetry import Telemetry

from harness.server import ServerHandle
from otel_mcp_replay import telemetry as t

pytestmark = pytest.mark.anyio

PLUGIN = "demo"  # the plugin's name in the kernel: its functions are "demo-<tool>"
SK_FAILED = "An error occurred while invoking the function demo-{}: "  # SK's words around the error
SK_SCOPE = "semantic_kernel.functions.kernel_function"  # the tracer of SK's own function spans
SERVER_TRANSPORTS = ("streamable", "sse")  # each test on both (tests/conftest.py)


@asynccontextmanager
async def semantic_kernel(server: ServerHandle) -> AsyncIterator[Call]:
    """A kernel with the server's tools in it, as an SK app adds them (the plugin of its transport);
    each tool called as SK's automatic function calling calls a model's request for it, to the text
    the model is handed in the chat history."""
    plugin_of = MCPSsePlugin if is_sse(server) else MCPStreamableHttpPlugin
    async with plugin_of(name=PLUGIN, url=server.url) as plugin:
        kernel = Kernel()
        kernel.add_plugin(plugin)

        async def call(tool: str, arguments: dict[str, Any]) -> str:
            history = ChatHistory()
            request = FunctionCallContent(
                id="call_1", plugin_name=PLUGIN, function_name=tool, arguments=json.dumps(arguments)
            )
            await kernel.invoke_function_call(request, history)
            (handed,) = history.messages[-1].items
            result = handed.result
            return result if isinstance(result, str) else "".join(item.text for item in result)

        yield call


async def test_a_429_is_repeated_by_the_apps_permission(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    await a_429_repeated(server, telemetry, instrument, semantic_kernel)


async def test_the_model_calling_again_after_the_cut_is_refused_by_the_repeat_guard(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    """The model is handed the plugin's word that the call may have run, then the refusal."""
    first, repeat = await a_cut_called_again(server, telemetry, instrument, semantic_kernel)
    handed_in_words(first, repeat, SK_FAILED.format("send_email"))


async def test_a_clean_call_is_one_trace_under_sks_function_span(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    """The plugin's call span (mcp 1.x makes none), its POST under it, under SK's own span of the
    function."""
    await a_clean_call(server, telemetry, instrument, semantic_kernel, t.INSTRUMENTATION_NAME)
    _, chain = call_span_and_ancestry(telemetry.spans(), "search")
    assert chain == [("tools/call search", t.INSTRUMENTATION_NAME), ("execute_tool demo-search", SK_SCOPE)]
