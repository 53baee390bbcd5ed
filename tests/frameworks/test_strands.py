"""The law under Strands Agents: its `MCPClient` (which runs the mcp session on a background thread
of its own), called directly and through a strands `Agent` with a scripted model (no LLM), against
the real fault server on 127.0.0.1 over streamable HTTP and the legacy SSE transport; with the
AgentCore Runtime adapter declared, the runtime's 409 RetryableConflictException is repeated.

Strands turns any exception of a tool call into a `ToolResult` with status "error" and the text
"Tool execution failed: <message>": the dict the app gets from `call_tool_sync` and the model is
handed. Strands retries no tool call; a model that calls again after the call may have run is
refused by the repeat guard before anything is sent.

strands-agents 1.65 pins mcp < 2.4 (1.62: < 2.2), a ceiling the main environment's newest mcp
passes on the day it is released, so it runs in an environment of its own, on mcp 2.3 today
(.venv-fw-strands, scripts/test-lines); elsewhere this file is skipped. Ground truth is the
server's count of executions per tool; the plugin's record says the rest.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

pytest.importorskip("strands", reason="strands-agents runs in its own environment (.venv-fw-strands)")

from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from strands import Agent
from strands.models.model import Model
from strands.tools.mcp import MCPClient
from strands.types.tools import ToolResult
from tests.support.calls import declared
from tests.support.scenarios import (
    EMAIL,
    MAY_HAVE_RUN,
    NOT_SENT,
    SEARCH,
    SEARCH_RESULT,
    call_span_and_ancestry,
    children_of,
    is_sse,
    posted_status,
)
from tests.support.telemetry import Telemetry, records, the_record

from harness.faults import DropAfterExecution, Throttle, retryable_conflict
from harness.server import ServerHandle, running_server
from otel_mcp_replay import telemetry as t

STRANDS_FAILED = "Tool execution failed: "  # strands' prefix to the exception's message
STRANDS_SCOPE = "strands.telemetry.tracer"  # the tracer strands' own spans come from


@pytest.fixture(params=["streamable", "sse"])
def server(request: pytest.FixtureRequest) -> Iterator[ServerHandle]:
    with running_server(request.param) as handle:
        yield handle


def mcp_client(server: ServerHandle) -> MCPClient:
    """The client a strands app makes for the server: the mcp SDK's transport of its kind."""
    if is_sse(server):
        return MCPClient(lambda: sse_client(server.url))
    return MCPClient(lambda: streamable_http_client(server.url))


def text_of(result: ToolResult) -> str:
    return "".join(str(block.get("text", "")) for block in result["content"])


class ScriptedModel(Model):
    """A strands model with no LLM behind it: asks for `tool` with `args` until it has made `calls`
    calls, then answers; `seen` is every tool result it was handed, in order."""

    def __init__(self, tool: str, args: dict[str, Any], calls: int = 1) -> None:
        self.tool, self.args, self.calls = tool, args, calls
        self.seen: list[ToolResult] = []

    def update_config(self, **model_config: Any) -> None: ...

    def get_config(self) -> Any:
        return {}

    def structured_output(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def stream(self, messages: Any, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        handed = [block["toolResult"] for m in messages for block in m["content"] if "toolResult" in block]
        self.seen[:] = handed
        yield {"messageStart": {"role": "assistant"}}
        if len(handed) < self.calls:
            use = {"toolUseId": f"call_{len(handed)}", "name": self.tool}
            yield {"contentBlockStart": {"start": {"toolUse": use}}}
            yield {"contentBlockDelta": {"delta": {"toolUse": {"input": json.dumps(self.args)}}}}
            yield {"contentBlockStop": {}}
            yield {"messageStop": {"stopReason": "tool_use"}}
        else:
            yield {"contentBlockDelta": {"delta": {"text": "done"}}}
            yield {"contentBlockStop": {}}
            yield {"messageStop": {"stopReason": "end_turn"}}


def run_agent(server: ServerHandle, model: ScriptedModel) -> None:
    with mcp_client(server) as client:
        agent = Agent(model=model, tools=client.list_tools_sync(), callback_handler=None)
        agent("go")


def search_repeated_once(server: ServerHandle, telemetry: Telemetry) -> dict[str, Any]:
    """One search through MCPClient, refused once and repeated: it ran once, in two POSTs, and the
    app got its result; the call's record."""
    with mcp_client(server) as client:
        result = client.call_tool_sync("use_1", *SEARCH)
    assert server.counters.executions("search") == 1
    assert server.counters.tool_posts("search") == 2
    assert result["status"] == "success" and text_of(result) == SEARCH_RESULT, result
    return the_record(telemetry)


# -- through MCPClient, as an app calls a tool --


def test_a_429_is_repeated_by_the_apps_permission(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    instrument(servers=declared(server, {"search": {"on": ["throttle"]}}))
    server.faults.add("search", Throttle())
    record = search_repeated_once(server, telemetry)
    assert list(record[t.ATTEMPTS_STATUS]) == [429, posted_status(server)]
    assert list(record[t.ATTEMPTS_PERMISSION]) == ["first", "app"]
    assert record[t.VERDICT] == "completed"


@pytest.mark.parametrize("in_body", [False, True])
def test_agentcores_retryable_conflict_is_repeated_by_the_adapter(
    server: ServerHandle, telemetry: Telemetry, instrument: Any, in_body: bool
) -> None:
    """AgentCore Runtime's 409 RetryableConflictException (session busy: nothing ran), named in the
    header or the body, is repeated as the adapter's, whatever the app declared for the tool."""
    instrument(servers=declared(server, {}, adapter="agentcore-runtime"))
    server.faults.add("search", retryable_conflict(in_body=in_body))
    record = search_repeated_once(server, telemetry)
    assert record[t.ATTEMPTS_STATUS] == (409, posted_status(server))
    assert record[t.ATTEMPTS_FAILURE] == ("session-busy", "")
    assert record[t.ATTEMPTS_PERMISSION] == ("first", "adapter")
    assert record[t.VERDICT] == "completed"


def test_a_changing_tool_cut_after_running_reaches_the_app_as_an_error_tool_result(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    instrument(servers=declared(server, {"send_email": {"changes": True}, "search": {"on": ["throttle"]}}))
    server.faults.add("send_email", DropAfterExecution(answer_lost=True))
    with mcp_client(server) as client:
        result = client.call_tool_sync("use_1", *EMAIL)
        assert server.counters.executions("send_email") == 1
        assert server.counters.tool_posts("send_email") == 1
        assert result["status"] == "error", result
        assert text_of(result).startswith(STRANDS_FAILED) and MAY_HAVE_RUN in text_of(result).lower()
        record = the_record(telemetry)
        assert record[t.MAY_HAVE_RUN] is True
        assert record[t.EFFECT] == "unknown"
        assert record[t.VERDICT] == "failed"
        # The failure is that call's only: the same client goes on working.
        assert text_of(client.call_tool_sync("use_2", *SEARCH)) == SEARCH_RESULT
    assert server.counters.executions("search") == 1


# -- through a strands Agent: what the model sees --


def test_the_model_calling_again_after_the_cut_is_refused_by_the_repeat_guard(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    """The model is handed the error ToolResult and calls the tool again: the repeat is refused
    before it is sent, and the model is told why."""
    instrument(servers=declared(server, {"send_email": {"changes": True}}))
    server.faults.add("send_email", DropAfterExecution(answer_lost=True))
    model = ScriptedModel(*EMAIL, calls=2)
    run_agent(server, model)
    assert server.counters.executions("send_email") == 1
    assert server.counters.tool_posts("send_email") == 1
    assert [result["status"] for result in model.seen] == ["error", "error"], model.seen
    first, repeat = (text_of(result) for result in model.seen)
    assert first.startswith(STRANDS_FAILED) and MAY_HAVE_RUN in first.lower()
    assert repeat.startswith(STRANDS_FAILED) and NOT_SENT in repeat
    told, refused = records(telemetry)
    assert told[t.MAY_HAVE_RUN] is True
    assert (refused[t.VERDICT], refused[t.SENT], refused[t.EFFECT]) == ("failed", 0, "none")


def test_a_clean_call_is_one_trace_under_strands_spans(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    instrument(servers=declared(server, {"search": {"on": ["throttle"]}}))
    model = ScriptedModel(*SEARCH)
    run_agent(server, model)
    assert [text_of(result) for result in model.seen] == [SEARCH_RESULT]
    assert server.counters.executions("search") == 1
    spans = telemetry.spans()
    ours, chain = call_span_and_ancestry(spans, "search")
    # The plugin's call span sits in the agent's trace, under strands' execute_tool span, though
    # MCPClient sends from a thread of its own.
    assert chain[0] == ("tools/call search", t.INSTRUMENTATION_NAME)
    assert ("execute_tool search", STRANDS_SCOPE) in chain and chain[-1][1] == STRANDS_SCOPE, chain
    children = children_of(spans, ours)
    assert (t.ATTEMPT_SPAN_NAME, t.INSTRUMENTATION_NAME) in children, children
