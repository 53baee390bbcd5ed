"""The law where users are: each agent framework's own MCP client, pinned, against the real fault
server on 127.0.0.1, over streamable HTTP and the legacy SSE transport. No LLM is called: a tool is
driven through the framework's client object, and where the form an agent (and its model) sees
matters, through the framework's agent with a scripted model it ships or one written here.

The frameworks are imported when this module loads, before any `instrument()` call, as in an app
(they import `mcp.client.sse.sse_client` at load). The `test` extra installs them (`frameworks`).

Ground truth is the server's count of executions per tool; the plugin's record says the rest.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import fastmcp
import pytest
from agents import Agent, Runner, UserError
from agents.items import ModelResponse, ToolCallOutputItem
from agents.mcp import MCPServerSse, MCPServerStreamableHttp
from agents.models.interface import Model
from agents.tracing import Span as AgentsSpan
from agents.tracing import Trace as AgentsTrace
from agents.tracing import TracingProcessor, set_trace_processors
from agents.usage import Usage
from fastmcp.client.transports import SSETransport, StreamableHttpTransport
from llama_index.tools.mcp import BasicMCPClient, McpToolSpec
from llama_index.tools.mcp.client import enable_sse
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText
from opentelemetry.sdk.trace import ReadableSpan
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.capabilities import Instrumentation
from pydantic_ai.exceptions import ModelRetry
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import ModelMessage, ModelRequest, RetryPromptPart, TextPart, ToolCallPart
from pydantic_ai.messages import ModelResponse as PydanticResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.instrumented import InstrumentationSettings
from tests.support.calls import declared
from tests.support.telemetry import Telemetry, records, the_record

from harness.faults import DropAfterExecution, HeldUntilPost, Throttle
from harness.server import ServerHandle, running_server
from otel_mcp_replay import UnknownEffectError
from otel_mcp_replay import telemetry as t

if sys.version_info < (3, 11):
    from exceptiongroup import BaseExceptionGroup, ExceptionGroup

pytestmark = pytest.mark.anyio

# Generous: a call that hangs fails the test in 20 s instead of holding the run.
DEADLINE_S = 20
SEARCH = ("search", {"query": "q"})
EMAIL = ("send_email", {"to": "ops@example.com", "body": "hello"})


class _AgentsTraces(TracingProcessor):
    """openai-agents' own tracing (not OpenTelemetry), kept in memory. Installing it replaces the
    SDK's default processor, which would export to OpenAI's service: nothing leaves the machine."""

    def __init__(self) -> None:
        self.spans: list[AgentsSpan[Any]] = []

    def on_trace_start(self, trace: AgentsTrace) -> None: ...
    def on_trace_end(self, trace: AgentsTrace) -> None: ...
    def on_span_start(self, span: AgentsSpan[Any]) -> None: ...

    def on_span_end(self, span: AgentsSpan[Any]) -> None:
        self.spans.append(span)

    def shutdown(self) -> None: ...
    def force_flush(self) -> None: ...


AGENTS_TRACES = _AgentsTraces()
set_trace_processors([AGENTS_TRACES])


# -- each framework's client, as its users call a tool --

Call = Callable[[str, dict[str, Any]], Awaitable[str]]


def _text(content: Any) -> str:
    return "".join(getattr(block, "text", "") for block in content)


@asynccontextmanager
async def _fastmcp(url: str, sse: bool) -> AsyncIterator[Call]:
    async with fastmcp.Client(url) as client:
        assert isinstance(client.transport, SSETransport if sse else StreamableHttpTransport)

        async def call(tool: str, args: dict[str, Any]) -> str:
            return _text((await client.call_tool(tool, args)).content)

        yield call


@asynccontextmanager
async def _openai_agents(url: str, sse: bool, **settings: Any) -> AsyncIterator[Call]:
    server = MCPServerSse if sse else MCPServerStreamableHttp
    async with server(params={"url": url}, name="demo", **settings) as mcp_server:

        async def call(tool: str, args: dict[str, Any]) -> str:
            return _text((await mcp_server.call_tool(tool, args)).content)

        yield call


@asynccontextmanager
async def _pydantic_ai(url: str, sse: bool) -> AsyncIterator[Call]:
    async with MCPToolset(url) as toolset:
        assert isinstance(toolset.client.transport, SSETransport if sse else StreamableHttpTransport)

        async def call(tool: str, args: dict[str, Any]) -> str:
            return str(await toolset.direct_call_tool(tool, args))

        yield call


@asynccontextmanager
async def _llama_index(url: str, sse: bool) -> AsyncIterator[Call]:
    # BasicMCPClient opens a new session for every request; McpToolSpec's FunctionTool is how an
    # agent calls a tool (FunctionAgent awaits `tool.acall(**input)`).
    assert enable_sse(url) is sse
    tools = {tool.metadata.name: tool for tool in await McpToolSpec(BasicMCPClient(url)).to_tool_list_async()}

    async def call(tool: str, args: dict[str, Any]) -> str:
        return _text((await tools[tool].acall(**args)).raw_output.content)

    yield call


async def _outcome(call: Awaitable[Any]) -> Any:
    """What the app got: the result, or the exception (asserted on after the server's counts)."""
    try:
        return await call
    except Exception as error:
        return error


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]


def _as_is(error: BaseException) -> UnknownEffectError:
    """fastmcp and openai-agents' server objects raise the plugin's error itself."""
    assert type(error) is UnknownEffectError, repr(error)
    return error


def _model_retry(error: BaseException) -> UnknownEffectError:
    """pydantic-ai (tool_error_behavior 'retry', the default): ModelRetry carrying the plugin's
    message, which the agent hands the model; the plugin's error is its __cause__."""
    assert type(error) is ModelRetry, repr(error)
    cause = error.__cause__
    assert type(cause) is UnknownEffectError, repr(cause)
    assert error.message == str(cause)
    return cause


def _nested_groups(error: BaseException) -> UnknownEffectError:
    """llama-index: the error inside two ExceptionGroups (the SDK's task groups, not unwrapped)."""
    assert type(error) is ExceptionGroup, repr(error)
    assert len(error.exceptions) == 1 and type(error.exceptions[0]) is ExceptionGroup, repr(error)
    leaves = _leaves(error)
    assert len(leaves) == 1 and type(leaves[0]) is UnknownEffectError, repr(leaves)
    return leaves[0]


@dataclass(frozen=True)
class Framework:
    name: str
    connect: Callable[[str, bool], AbstractAsyncContextManager[Call]]
    unknown_effect: Callable[[BaseException], UnknownEffectError]
    # The scope of the OTel spans the framework itself makes around a tool call (None: it makes none).
    span_scope: str | None

    def __str__(self) -> str:
        return self.name


FRAMEWORKS = [
    Framework("fastmcp", _fastmcp, _as_is, "fastmcp"),
    Framework("openai-agents", _openai_agents, _as_is, None),
    Framework("pydantic-ai", _pydantic_ai, _model_retry, "fastmcp"),  # MCPToolset is a fastmcp Client
    Framework("llama-index", _llama_index, _nested_groups, None),
]


@pytest.fixture(params=FRAMEWORKS, ids=str)
def framework(request: pytest.FixtureRequest) -> Framework:
    return request.param  # type: ignore[no-any-return]


# The fault server (conftest's `server`), one per test: streamable HTTP (/mcp) or the legacy SSE
# transport (/sse); a declaration is of the URL the app connects to (for SSE, the /sse URL).
SERVER_TRANSPORTS = ("streamable", "sse")


def _sse(server: ServerHandle) -> bool:
    return server.app_kind == "sse"


# -- 1. a 429 repeated by the app's permission --


async def test_a_429_is_repeated_by_the_apps_permission(
    framework: Framework, server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    instrument(servers=declared(server, {"search": {"on": ["throttle"]}}))
    server.faults.add("search", Throttle())
    with anyio.fail_after(DEADLINE_S):
        async with framework.connect(server.url, _sse(server)) as call:
            assert await call(*SEARCH) == "3 results for 'q'"
    assert server.counters.executions("search") == 1
    assert server.counters.tool_posts("search") == 2
    record = the_record(telemetry)
    assert record[t.POLICY] == "app-authorized"
    # SSE accepts a message with 202 and answers on the stream.
    assert list(record[t.ATTEMPTS_STATUS]) == [429, 202 if _sse(server) else 200]
    assert list(record[t.ATTEMPTS_PERMISSION]) == ["first", "app"]
    assert record[t.VERDICT] == "completed"


async def test_an_origin_declaration_governs_sse_calls_whatever_the_import_order(
    framework: Framework, telemetry: Telemetry, instrument: Any
) -> None:
    """An origin-only key matches every path, and import order never matters: the frameworks
    imported `sse_client` when this module loaded, long before this instrument()."""
    with running_server("sse") as server:
        instrument(
            servers={server.origin: {"policy": "app-authorized", "tools": {"search": {"on": ["throttle"]}}}}
        )
        server.faults.add("search", Throttle())
        with anyio.fail_after(DEADLINE_S):
            async with framework.connect(server.url, True) as call:
                outcome = await _outcome(call(*SEARCH))
        assert server.counters.executions("search") == 1
        assert outcome == "3 results for 'q'", repr(outcome)
        record = the_record(telemetry)
        assert record[t.POLICY] == "app-authorized"
        assert list(record[t.ATTEMPTS_PERMISSION]) == ["first", "app"]


# -- 2. a changing tool cut after it ran --


async def test_a_changing_tool_cut_after_running_reaches_the_app_as_unknown_effect(
    framework: Framework, server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    instrument(servers=declared(server, {"send_email": {"changes": True}, "search": {"on": ["throttle"]}}))
    server.faults.add("send_email", DropAfterExecution(answer_lost=True))
    with anyio.fail_after(DEADLINE_S):
        async with framework.connect(server.url, _sse(server)) as call:
            outcome = await _outcome(call(*EMAIL))
            assert server.counters.executions("send_email") == 1
            assert server.counters.tool_posts("send_email") == 1
            assert isinstance(outcome, Exception), f"the call returned {outcome!r}"
            error = framework.unknown_effect(outcome)
            assert "may have run on the server" in str(error).lower()
            record = the_record(telemetry)
            assert record[t.MAY_HAVE_RUN] is True
            assert record[t.EFFECT] == "unknown"
            assert record[t.VERDICT] == "failed"
            # The failure is that call's only: the same client goes on working (llama-index opens
            # a session per request anyway).
            assert await call(*SEARCH) == "3 results for 'q'"
    assert server.counters.executions("search") == 1


# -- 3. a clean call: one trace --


async def test_a_clean_call_is_one_trace_with_the_frameworks_spans(
    framework: Framework, server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    instrument(servers=declared(server, {"search": {"on": ["throttle"]}}))
    tracer = telemetry.tracer_provider.get_tracer("the-app")
    with anyio.fail_after(DEADLINE_S):
        async with framework.connect(server.url, _sse(server)) as call:
            with tracer.start_as_current_span("agent turn") as app:
                assert await call(*SEARCH) == "3 results for 'q'"
    spans = telemetry.spans()
    trace_id = app.get_span_context().trace_id
    by_id = {s.context.span_id: s for s in spans if s.context.trace_id == trace_id}

    def one(named: str, scope: str) -> ReadableSpan:
        found = [s for s in by_id.values() if s.name == named and _scope(s) == scope]
        assert len(found) == 1, f"{named} ({scope}) in the app's trace: {_names(spans)}"
        return found[0]

    # The call span: the plugin's, or the framework's own MCP client span of the call, which the
    # plugin enriches (its attributes and record) instead of adding a second one inside it.
    call_span = one("tools/call search", framework.span_scope or t.INSTRUMENTATION_NAME)
    if framework.span_scope is not None:
        assert not [s for s in by_id.values() if _scope(s) == t.INSTRUMENTATION_NAME and s.name != "POST"]
    assert (call_span.attributes or {})[t.VERDICT] == "completed"
    assert [e.name for e in call_span.events if e.name == t.RECORD_EVENT] == [t.RECORD_EVENT]
    assert _parent(call_span) == app.get_span_context().span_id
    attempt = one(t.ATTEMPT_SPAN_NAME, t.INSTRUMENTATION_NAME)
    assert _parent(attempt) == call_span.context.span_id
    # The call span stands in for the SDK's own client span of the request.
    assert not [s for s in by_id.values() if s.name == "MCP send tools/call search"]


def _scope(span: ReadableSpan) -> str:
    return span.instrumentation_scope.name if span.instrumentation_scope is not None else ""


def _parent(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def _names(spans: list[ReadableSpan]) -> list[tuple[str, str, str]]:
    return [(s.name, _scope(s), f"{s.context.trace_id:032x}"[-6:]) for s in spans]


# -- 4. openai-agents' own retry after an unknown effect --


async def test_openai_agents_retry_does_not_run_a_changing_tool_twice(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    """`max_retry_attempts` retries any exception, UnknownEffectError included: on streamable HTTP
    in a fresh "isolated" session (its code is CONNECTION_CLOSED), on SSE on the same session. The
    repeat guard refuses the repeat before it is sent; the app gets RepeatRefusedError."""
    instrument(servers=declared(server, {"send_email": {"changes": True}}))
    server.faults.add("send_email", DropAfterExecution(answer_lost=True))
    with anyio.fail_after(DEADLINE_S):
        async with _openai_agents(
            server.url, _sse(server), max_retry_attempts=1, retry_backoff_seconds_base=0.01
        ) as call:
            outcome = await _outcome(call(*EMAIL))
    assert server.counters.executions("send_email") == 1
    assert server.counters.tool_posts("send_email") == 1
    from otel_mcp_replay import RepeatRefusedError  # the repeat guard: not built yet

    assert type(outcome) is RepeatRefusedError, repr(outcome)
    first, repeat = records(telemetry)
    assert first[t.MAY_HAVE_RUN] is True
    assert (repeat[t.VERDICT], repeat[t.SENT], repeat[t.EFFECT]) == ("failed", 0, "none")
    refused = [s for s in telemetry.spans() if (s.attributes or {}).get(t.DECLINED) == "repeat-of-unknown"]
    assert len(refused) == 1 and refused[0].name == "tools/call send_email"


# -- what an agent, and its model, see --


class _ScriptedModel(Model):
    """An openai-agents Model with no LLM behind it: it calls one tool (or, given more, each of them
    in the same turn, as a model asking for parallel tool calls does), then answers."""

    def __init__(self, tool: str, args: dict[str, Any], *more: tuple[str, dict[str, Any]]) -> None:
        self.calls = ((tool, args), *more)
        self.inputs: list[Any] = []

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        self.inputs.append(args[1] if len(args) > 1 else kwargs.get("input"))
        if len(self.inputs) == 1:
            out: list[Any] = [
                ResponseFunctionToolCall(
                    type="function_call",
                    id=f"fc_{n}",
                    call_id=f"call_{n}",
                    name=tool,
                    arguments=json.dumps(arguments),
                    status="completed",
                )
                for n, (tool, arguments) in enumerate(self.calls, 1)
            ]
        else:
            text = ResponseOutputText(type="output_text", text="done", annotations=[])
            out = [
                ResponseOutputMessage(
                    type="message", id="msg_1", role="assistant", status="completed", content=[text]
                )
            ]
        return ModelResponse(output=out, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


# openai-agents' default `failure_error_function` (0.24's went on: "Please try again.").
DEFAULT_TOOL_ERROR = "An error occurred while running the tool."


async def test_openai_agents_agent_hands_the_model_a_fixed_error(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    """The Agent's default `failure_error_function` turns UnknownEffectError into a fixed string
    for the model, which says nothing of the tool having maybe run."""
    instrument(servers=declared(server, {"send_email": {"changes": True}}))
    server.faults.add("send_email", DropAfterExecution(answer_lost=True))
    server_cls = MCPServerSse if _sse(server) else MCPServerStreamableHttp
    AGENTS_TRACES.spans.clear()
    with anyio.fail_after(DEADLINE_S):
        async with server_cls(params={"url": server.url}, name="demo") as mcp_server:
            model = _ScriptedModel(*EMAIL)
            agent = Agent(name="mailer", model=model, mcp_servers=[mcp_server])
            result = await Runner.run(agent, "send it")
    outputs = [item.output for item in result.new_items if isinstance(item, ToolCallOutputItem)]
    assert outputs == [DEFAULT_TOOL_ERROR]
    assert server.counters.executions("send_email") == 1
    assert the_record(telemetry)[t.MAY_HAVE_RUN] is True
    # Its own tracing saw the tool fail; none of it is OpenTelemetry.
    assert any(getattr(s.span_data, "name", None) == "send_email" and s.error for s in AGENTS_TRACES.spans)
    assert all(_scope(s) != "agents" for s in telemetry.spans())


HELD_S = DEADLINE_S / 2  # a hang guard: held past it, `came` is not set, and the test fails


async def test_openai_agents_parallel_tool_calls_on_one_session_are_each_known(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    """A model asking for two tools in one turn: openai-agents 0.25 sends both on the one session at
    once on mcp 2.x (0.24 sent them one after the other), and "if the connection drops, multiple
    tools may have taken effect". The call whose answer was lost is known to have maybe run, and its
    retry (`max_retry_attempts`) is refused unsent; the other call, in flight beside it, is answered.
    Each tool ran once."""
    instrument(servers=declared(server, {"send_email": {"changes": True}}))
    sse = _sse(server)
    cut = DropAfterExecution(answer_lost=True)
    # Each POST held until the other's is being served: both in flight at once, whichever came
    # first. The legacy SSE transport's writer awaits each POST before the next: there, both calls
    # are in flight on the session, each POST alone, and none is held.
    search_held = HeldUntilPost("send_email", HELD_S)
    email_held = HeldUntilPost("search", HELD_S, cut)
    server.faults.add("search", *(() if sse else (search_held,)))
    server.faults.add("send_email", cut if sse else email_held)
    server_cls = MCPServerSse if sse else MCPServerStreamableHttp
    with anyio.fail_after(DEADLINE_S):
        async with server_cls(
            params={"url": server.url},
            name="demo",
            client_session_timeout_seconds=DEADLINE_S,  # (its 5 s would end a call held that long)
            max_retry_attempts=1,
            retry_backoff_seconds_base=0.01,
        ) as mcp_server:
            model = _ScriptedModel(*SEARCH, EMAIL)
            agent = Agent(name="mailer", model=model, mcp_servers=[mcp_server])
            result = await Runner.run(agent, "look it up, and send it")
    if not sse:
        assert search_held.came.is_set() and email_held.came.is_set()  # both in flight at once
    outputs = [item.output for item in result.new_items if isinstance(item, ToolCallOutputItem)]
    assert "'q'" in str(outputs[0]) and outputs[1] == DEFAULT_TOOL_ERROR, outputs
    assert (server.counters.executions("send_email"), server.counters.executions("search")) == (1, 1)
    assert server.counters.tool_posts("send_email") == 1  # its repeat was never sent
    by_tool: dict[str, list[dict[str, Any]]] = {}
    for record in records(telemetry):
        by_tool.setdefault(str(record[t.GEN_AI_TOOL_NAME]), []).append(record)
    (email, repeat), (search,) = by_tool["send_email"], by_tool["search"]
    assert email[t.MAY_HAVE_RUN] is True
    assert (repeat[t.VERDICT], repeat[t.SENT]) == ("failed", 0)
    assert (search[t.VERDICT], search[t.SENT]) == ("completed", 1)


async def test_openai_agents_agent_without_failure_function_raises_unknown_effect(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    """`failure_error_function=None` on the server: the run raises the plugin's error to the app."""
    instrument(servers=declared(server, {"send_email": {"changes": True}}))
    server.faults.add("send_email", DropAfterExecution(answer_lost=True))
    server_cls = MCPServerSse if _sse(server) else MCPServerStreamableHttp
    with anyio.fail_after(DEADLINE_S):
        async with server_cls(
            params={"url": server.url}, name="demo", failure_error_function=None
        ) as mcp_server:
            agent = Agent(name="mailer", model=_ScriptedModel(*EMAIL), mcp_servers=[mcp_server])
            outcome = await _outcome(Runner.run(agent, "send it"))
    assert server.counters.executions("send_email") == 1
    assert type(outcome) is UserError, repr(outcome)  # "Error running tool send_email: <message>"
    assert type(outcome.__cause__) is UnknownEffectError, repr(outcome.__cause__)


def _scripted_pydantic_model(tool: str, args: dict[str, Any], calls: int, seen: list[str]) -> FunctionModel:
    """A pydantic-ai FunctionModel (no LLM): calls `tool` `calls` times, as a model told to retry
    would, collecting what each failed call told it, then answers."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> PydanticResponse:
        last = messages[-1]
        if isinstance(last, ModelRequest):
            # A ModelRetry reaches the model as the tool's return marked 'retried' (2.62), or as a
            # retry prompt.
            for part in last.parts:
                if isinstance(part, RetryPromptPart) or getattr(part, "outcome", None) == "retried":
                    seen.append(str(part.content))
        made = sum(isinstance(p, ToolCallPart) for m in messages for p in getattr(m, "parts", []))
        if made < calls:
            return PydanticResponse(parts=[ToolCallPart(tool, args, tool_call_id=f"call_{made}")])
        return PydanticResponse(parts=[TextPart("done")])

    return FunctionModel(respond)


async def test_pydantic_ai_agent_model_retry_never_runs_a_changing_tool_twice(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    """The default `tool_error_behavior='retry'`: the model is handed the plugin's message, and a
    model that calls again anyway (ModelRetry invites it to) is refused by the repeat guard."""
    instrument(servers=declared(server, {"send_email": {"changes": True}}))
    server.faults.add("send_email", DropAfterExecution(answer_lost=True))
    told: list[str] = []
    agent = PydanticAgent(
        _scripted_pydantic_model(*EMAIL, calls=2, seen=told), toolsets=[MCPToolset(server.url, max_retries=2)]
    )
    with anyio.fail_after(DEADLINE_S):
        outcome = await _outcome(agent.run("send it"))
    assert server.counters.executions("send_email") == 1
    assert server.counters.tool_posts("send_email") == 1
    assert getattr(outcome, "output", outcome) == "done"
    assert len(told) == 2, told
    assert "may have run on the server" in told[0].lower()
    first, repeat = records(telemetry)
    assert first[t.MAY_HAVE_RUN] is True
    assert (repeat[t.VERDICT], repeat[t.SENT]) == ("failed", 0)


async def test_pydantic_ai_tool_error_behavior_error_raises_unknown_effect(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    """`tool_error_behavior='error'`: the app gets the plugin's error itself, the model nothing."""
    instrument(servers=declared(server, {"send_email": {"changes": True}}))
    server.faults.add("send_email", DropAfterExecution(answer_lost=True))
    agent = PydanticAgent(
        _scripted_pydantic_model(*EMAIL, calls=1, seen=[]),
        toolsets=[MCPToolset(server.url, tool_error_behavior="error")],
    )
    with anyio.fail_after(DEADLINE_S):
        outcome = await _outcome(agent.run("send it"))
    assert server.counters.executions("send_email") == 1
    assert type(outcome) is UnknownEffectError, repr(outcome)


async def test_pydantic_ai_agent_spans_hold_the_plugins_spans(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    """pydantic-ai's own OTel spans (Agent instrumentation) parent fastmcp's MCP client span of the
    call, which the plugin enriches and hangs its attempt under (no second call span of its own)."""
    instrument(servers=declared(server, {"search": {"on": ["throttle"]}}))
    agent = PydanticAgent(
        _scripted_pydantic_model(*SEARCH, calls=1, seen=[]),
        toolsets=[MCPToolset(server.url)],
        capabilities=[Instrumentation(InstrumentationSettings(tracer_provider=telemetry.tracer_provider))],
    )
    with anyio.fail_after(DEADLINE_S):
        assert (await agent.run("find it")).output == "done"
    spans = telemetry.spans()
    by_id = {s.context.span_id: s for s in spans}
    call_span = next(
        s for s in spans if s.name == "tools/call search" and (s.attributes or {}).get(t.VERDICT)
    )
    chain = []
    node: ReadableSpan | None = call_span
    while node is not None:
        chain.append((node.name, _scope(node)))
        node = by_id.get(_parent(node) or 0)
    assert chain == [
        ("tools/call search", "fastmcp"),
        ("execute_tool search", "pydantic-ai"),
        ("invoke_agent agent", "pydantic-ai"),
    ], chain
    children = {(s.name, _scope(s)) for s in spans if _parent(s) == call_span.context.span_id}
    # Its attempt, and the server's own span: the SDK's _meta carries the call span's context.
    assert children == {
        (t.ATTEMPT_SPAN_NAME, t.INSTRUMENTATION_NAME),
        ("tools/call search", "mcp-python-sdk"),
    }


async def test_llama_index_agent_shows_the_model_only_the_group_message(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    """llama-index's FunctionAgent catches a tool's exception into ToolOutput(content=str(e)): for
    the nested ExceptionGroup that is the group's own message, not the plugin's."""
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.core.agent.workflow.workflow_events import ToolCallResult
    from llama_index.core.base.llms.types import ChatMessage, MessageRole, ToolCallBlock
    from llama_index.core.llms.mock import MockFunctionCallingLLM

    def respond(messages: list[ChatMessage], **kwargs: Any) -> ChatMessage:
        """A model with no LLM behind it: call the tool once, then answer."""
        if any(m.role == MessageRole.TOOL for m in messages):
            return ChatMessage(role=MessageRole.ASSISTANT, content="done")
        call = ToolCallBlock(tool_call_id="call_1", tool_name=EMAIL[0], tool_kwargs=EMAIL[1])
        return ChatMessage(role=MessageRole.ASSISTANT, blocks=[call])

    instrument(servers=declared(server, {"send_email": {"changes": True}}))
    server.faults.add("send_email", DropAfterExecution(answer_lost=True))
    results: list[Any] = []
    with anyio.fail_after(DEADLINE_S):
        tools = await McpToolSpec(BasicMCPClient(server.url), allowed_tools=[EMAIL[0]]).to_tool_list_async()
        agent = FunctionAgent(tools=tools, llm=MockFunctionCallingLLM(response_generator=respond))
        handler = agent.run("send it")
        async for event in handler.stream_events():
            if isinstance(event, ToolCallResult):
                results.append(event.tool_output)
        await handler
    assert len(results) == 1 and results[0].is_error
    assert results[0].content == "unhandled errors in a TaskGroup (1 sub-exception)"
    assert [type(e) for e in _leaves(results[0].exception)] == [UnknownEffectError]
    assert server.counters.executions("send_email") == 1
