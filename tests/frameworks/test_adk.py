"""The law under Google's Agent Development Kit: its `McpToolset` driven by ADK's own runner, with a
scripted model (a BaseLlm subclass, no LLM), against the real fault server on 127.0.0.1 over
streamable HTTP and the legacy SSE transport.

ADK turns a tool's McpError into `{"error": "MCP tool execution failed: <message>"}`, the function
response both the app's events and the model are handed (its graceful error handling, on by
default since 2.13); the plugin's errors are McpErrors, so the model reads the plugin's own words.
ADK retries opening a session, never a tool call; a model that calls the tool again after it may
have run is refused by the repeat guard before anything is sent.

google-adk 2.15 pins OpenTelemetry <= 1.45.2 (2.13: <= 1.44), a ceiling the main environment's
newest OpenTelemetry passes on the day it is released, so it runs in an environment of its own
(.venv-fw-adk, scripts/test-lines); elsewhere this file is skipped. Ground truth is the server's count of
executions per tool; the plugin's record says the rest.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Iterator
from typing import Any

import anyio
import pytest

pytest.importorskip("google.adk", reason="google-adk runs in its own environment (.venv-fw-adk)")

from google.adk.agents import LlmAgent
from google.adk.events import Event
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import InMemoryRunner
from google.adk.tools.mcp_tool import McpToolset, SseConnectionParams, StreamableHTTPConnectionParams
from google.genai import types
from pydantic import Field
from tests.support.calls import declared
from tests.support.scenarios import (
    DEADLINE_S,
    EMAIL,
    MAY_HAVE_RUN,
    NOT_SENT,
    SEARCH,
    SEARCH_RESULT,
    call_span_and_ancestry,
    children_of,
    is_sse,
    search_repeated_after_its_429,
)
from tests.support.telemetry import Telemetry, records, the_record

from harness.faults import DropAfterExecution, Throttle
from harness.server import ServerHandle, running_server
from otel_mcp_replay import telemetry as t

pytestmark = pytest.mark.anyio

ADK_FAILED = "MCP tool execution failed: "  # ADK's prefix to an McpError's message
ADK_SCOPE = "gcp.vertex.agent"  # the tracer ADK's own spans come from


@pytest.fixture(params=["streamable", "sse"])
def server(request: pytest.FixtureRequest) -> Iterator[ServerHandle]:
    with running_server(request.param) as handle:
        yield handle


class ScriptedModel(BaseLlm):
    """An ADK model with no LLM behind it: calls `tool` with `args` until it has made `calls` calls,
    then answers; `seen` is every function response it was handed, in order."""

    model: str = "scripted"
    tool: str
    args: dict[str, Any]
    calls: int = 1
    seen: list[dict[str, Any]] = Field(default_factory=list)

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        handed = [
            part.function_response.response or {}
            for content in llm_request.contents
            for part in content.parts or []
            if part.function_response is not None
        ]
        self.seen[:] = handed
        if len(handed) < self.calls:
            call = types.FunctionCall(name=self.tool, args=self.args, id=f"call_{len(handed)}")
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(function_call=call)]))
        else:
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text="done")]))


async def run_agent(server: ServerHandle, model: ScriptedModel) -> list[dict[str, Any]]:
    """One user turn through ADK's runner with the server's tools; the function responses its
    events carried to the app, in order."""
    params = (
        SseConnectionParams(url=server.url)
        if is_sse(server)
        else StreamableHTTPConnectionParams(url=server.url)
    )
    toolset = McpToolset(connection_params=params)
    runner = InMemoryRunner(agent=LlmAgent(name="mailer", model=model, tools=[toolset]), app_name="law")
    events: list[Event] = []
    try:
        with anyio.fail_after(DEADLINE_S):
            session = await runner.session_service.create_session(app_name="law", user_id="u")
            message = types.Content(role="user", parts=[types.Part(text="go")])
            async for event in runner.run_async(user_id="u", session_id=session.id, new_message=message):
                events.append(event)
    finally:
        await toolset.close()
    return [response.response or {} for event in events for response in event.get_function_responses()]


async def test_a_429_is_repeated_by_the_apps_permission(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    instrument(servers=declared(server, {"search": {"on": ["throttle"]}}))
    server.faults.add("search", Throttle())
    model = ScriptedModel(tool=SEARCH[0], args=SEARCH[1])
    responses = await run_agent(server, model)
    assert len(responses) == 1 and "error" not in responses[0], responses
    assert SEARCH_RESULT in str(responses[0])
    assert model.seen == responses  # the model is handed what the app's events carry
    search_repeated_after_its_429(server, telemetry)


async def test_a_changing_tool_cut_after_running_hands_the_model_adks_error_dict(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    instrument(servers=declared(server, {"send_email": {"changes": True}}))
    server.faults.add("send_email", DropAfterExecution(answer_lost=True))
    model = ScriptedModel(tool=EMAIL[0], args=EMAIL[1])
    responses = await run_agent(server, model)
    assert server.counters.executions("send_email") == 1
    assert server.counters.tool_posts("send_email") == 1
    assert len(responses) == 1, responses
    (error,) = responses[0].values()
    assert list(responses[0]) == ["error"] and error.startswith(ADK_FAILED), responses
    assert MAY_HAVE_RUN in error.lower()
    assert model.seen == responses
    record = the_record(telemetry)
    assert record[t.MAY_HAVE_RUN] is True
    assert record[t.EFFECT] == "unknown"
    assert record[t.VERDICT] == "failed"


async def test_the_model_calling_again_after_the_cut_is_refused_by_the_repeat_guard(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    """The model is handed the error and calls the tool again, as a model told it failed would:
    the repeat is refused before it is sent, and the model is told why."""
    instrument(servers=declared(server, {"send_email": {"changes": True}}))
    server.faults.add("send_email", DropAfterExecution(answer_lost=True))
    model = ScriptedModel(tool=EMAIL[0], args=EMAIL[1], calls=2)
    responses = await run_agent(server, model)
    assert server.counters.executions("send_email") == 1
    assert server.counters.tool_posts("send_email") == 1
    assert len(responses) == 2, responses
    assert MAY_HAVE_RUN in responses[0]["error"].lower()
    assert responses[1]["error"].startswith(ADK_FAILED) and NOT_SENT in responses[1]["error"], responses
    first, repeat = records(telemetry)
    assert first[t.MAY_HAVE_RUN] is True
    assert (repeat[t.VERDICT], repeat[t.SENT], repeat[t.EFFECT]) == ("failed", 0, "none")
    refused = [s for s in telemetry.spans() if (s.attributes or {}).get(t.DECLINED) == "repeat-of-unknown"]
    assert len(refused) == 1 and refused[0].name == "tools/call send_email"


async def test_a_clean_call_is_one_trace_under_adks_spans(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    instrument(servers=declared(server, {"search": {"on": ["throttle"]}}))
    responses = await run_agent(server, ScriptedModel(tool=SEARCH[0], args=SEARCH[1]))
    assert len(responses) == 1 and SEARCH_RESULT in str(responses[0]), responses
    assert server.counters.executions("search") == 1
    spans = telemetry.spans()
    ours, chain = call_span_and_ancestry(spans, "search")
    # The plugin's call span sits in ADK's invocation, under its execute_tool span.
    assert chain[0] == ("tools/call search", t.INSTRUMENTATION_NAME)
    assert ("execute_tool search", ADK_SCOPE) in chain and chain[-1][1] == ADK_SCOPE, chain
    assert chain.index(("execute_tool search", ADK_SCOPE)) < chain.index(("invoke_agent mailer", ADK_SCOPE))
    trace_ids = {s.context.trace_id for s in spans if s.name.endswith("search")}
    assert trace_ids == {ours.context.trace_id}, [s.name for s in spans]
    children = children_of(spans, ours)
    assert (t.ATTEMPT_SPAN_NAME, t.INSTRUMENTATION_NAME) in children, children
