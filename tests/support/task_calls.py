"""Task-backed calls as their users drive them, and what the tests read of one (shared by the tests
of tests/tasks/, which run in the tasks environment: fastmcp-tasks is imported here).

Each driver is an async context holding a connected client, and its call: fastmcp's
`Client.call_tool`, a `call_tool_task` handle, pydantic-ai's `direct_call_tool(use_task=True)`, and
`mcp.Client` with the tasks extension. The readers find a task-backed call's span, its attempts'
`POST` spans and its record among the exported spans, and what a failed call raised.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import anyio
import fastmcp
import pytest
from fastmcp_tasks import call_tool_task
from fastmcp_tasks.client import TasksClientExtension
from fastmcp_tasks.client_models import ClientGetTaskResult, GetTaskRequest, GetTaskRequestParams
from mcp import Client as McpClient
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind
from pydantic_ai.mcp import MCPToolset
from tests.support.telemetry import Telemetry, records

from otel_mcp_replay import RepeatRefusedError, UnknownEffectError
from otel_mcp_replay import telemetry as t

CHARGE = ("charge", {"amount": 7})  # the changing tool, called once: each task server has it

# Each client, as its users call a tool that the server runs as a task: an async context holding a
# connected client, and its call (returns the result's text, raises as the client raises).
Call = Callable[[str, dict[str, Any]], Awaitable[str]]
Driver = Callable[[str], AbstractAsyncContextManager[tuple[Call, Any]]]


def result_text(result: Any) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


@asynccontextmanager
async def _fastmcp(url: str) -> AsyncIterator[tuple[Call, Any]]:
    async with fastmcp.Client(url) as client:

        async def call(tool: str, args: dict[str, Any]) -> str:
            return result_text(await client.call_tool(tool, args))

        yield call, client.session


@asynccontextmanager
async def _handle(url: str) -> AsyncIterator[tuple[Call, Any]]:
    async with fastmcp.Client(url) as client:

        async def call(tool: str, args: dict[str, Any]) -> str:
            task = await call_tool_task(client, tool, args)
            return result_text(await task.result())

        yield call, client.session


@asynccontextmanager
async def _pydantic_ai(url: str) -> AsyncIterator[tuple[Call, Any]]:
    async with MCPToolset(url, tool_error_behavior="error") as toolset:

        async def call(tool: str, args: dict[str, Any]) -> str:
            return str(await toolset.direct_call_tool(tool, args, use_task=True))

        yield call, toolset.client.session


@asynccontextmanager
async def _mcp_client(url: str) -> AsyncIterator[tuple[Call, Any]]:
    async with McpClient(url, extensions=[TasksClientExtension()]) as client:

        async def call(tool: str, args: dict[str, Any]) -> str:
            result = await client.call_tool(tool, args)
            if result.is_error:  # the tasks extension's resolver turns a failed task into one
                raise ToolErrorResult(result_text(result))
            return result_text(result)

        yield call, client.session


class ToolErrorResult(Exception):
    """mcp.Client returns an isError result where the fastmcp clients raise ToolError."""


DRIVERS: dict[str, Driver] = {
    "fastmcp": _fastmcp,
    "handle": _handle,
    "pydantic-ai": _pydantic_ai,
    "mcp.Client": _mcp_client,
}


# -- reading what was exported --


def task_call_span(telemetry: Telemetry, tool: str) -> ReadableSpan:
    found = [
        s
        for s in telemetry.spans()
        if s.name == f"tools/call {tool}"
        and any(e.name == t.RECORD_EVENT and t.TASK in (e.attributes or {}) for e in s.events)
    ]
    assert len(found) == 1, [s.name for s in telemetry.spans()]
    return found[0]


def error_type_is(call_span: ReadableSpan, expected: str) -> None:
    """The call's error.type: the plugin's word on its own span. fastmcp's span of the call, which the
    plugin enriches, is written by fastmcp as its call ends, after the plugin (docs/contract.md): its
    own error.type stands there."""
    value = (call_span.attributes or {}).get(t.ERROR_TYPE)
    scope = call_span.instrumentation_scope
    if scope is not None and scope.name == t.INSTRUMENTATION_NAME:
        assert value == expected, (value, expected)
    else:
        assert value is not None


def children_of(telemetry: Telemetry, parent: ReadableSpan) -> list[ReadableSpan]:
    assert parent.context is not None
    parent_id = parent.context.span_id
    return [s for s in telemetry.spans() if s.parent is not None and s.parent.span_id == parent_id]


def attempt_posts(telemetry: Telemetry, call_span: ReadableSpan) -> list[ReadableSpan]:
    """The attempt spans under the call span: its creating request's, then its polls'. Under an outer
    MCP client span of the call that ended before its task (fastmcp's around a `call_tool_task`
    handle), the call span is the plugin's own under it, and the attempts stayed under that one."""
    holders = [call_span]
    outer = [
        s
        for s in telemetry.spans()
        if call_span.parent is not None and s.context.span_id == call_span.parent.span_id
    ]
    if outer and outer[0].kind is SpanKind.CLIENT:
        same_call = (t.MCP_METHOD_NAME, t.GEN_AI_TOOL_NAME)
        if all((outer[0].attributes or {}).get(k) == (call_span.attributes or {}).get(k) for k in same_call):
            holders.append(outer[0])
    spans = [s for holder in holders for s in children_of(telemetry, holder) if s.name == "POST"]
    return sorted(spans, key=lambda s: s.start_time or 0)


def task_record(telemetry: Telemetry, tool: str = "charge") -> dict[str, Any]:
    found = task_records(telemetry, tool)
    assert len(found) == 1, found
    return found[0]


def task_records(telemetry: Telemetry, tool: str = "charge") -> list[dict[str, Any]]:
    return [r for r in records(telemetry) if r[t.GEN_AI_TOOL_NAME] == tool and t.TASK in r]


def span_tree(telemetry: Telemetry) -> str:
    """The exported spans as an indented tree (for the report and a failing assertion)."""
    spans = telemetry.spans()
    by_parent: dict[int | None, list[ReadableSpan]] = {}
    ids = {s.context.span_id for s in spans if s.context is not None}
    for s in spans:
        parent = s.parent.span_id if s.parent is not None and s.parent.span_id in ids else None
        by_parent.setdefault(parent, []).append(s)
    lines: list[str] = []

    def walk(parent: int | None, depth: int) -> None:
        for s in sorted(by_parent.get(parent, []), key=lambda s: s.start_time or 0):
            a = s.attributes or {}
            facts = [
                f"{k}={a[k]}"
                for k in (t.ATTEMPT, t.FAILURE, t.HTTP_STATUS_CODE, t.VERDICT, t.ERROR_TYPE, t.MAY_HAVE_RUN)
                if k in a
            ]
            task = [
                f"task.status={e.attributes[t.TASK_STATUS]}"
                for e in s.events
                if e.name == t.RECORD_EVENT and e.attributes and t.TASK_STATUS in e.attributes
            ]
            scope = s.instrumentation_scope.name if s.instrumentation_scope else ""
            lines.append("  " * depth + f"{s.name} [{scope}] " + " ".join(facts + task))
            assert s.context is not None
            walk(s.context.span_id, depth + 1)

    walk(None, 0)
    return "\n".join(lines)


def assert_ended_badly(telemetry: Telemetry, tool: str, verdict: str, status: str, error_type: str) -> None:
    """What a task-backed call whose task ended badly says: its record's verdict and its task's last
    `status`, not one that may have run; its call span's error.type; a failed task's JSON-RPC code."""
    record = task_record(telemetry, tool)
    assert (record[t.VERDICT], record[t.TASK_STATUS], record[t.MAY_HAVE_RUN]) == (verdict, status, False)
    call_span = task_call_span(telemetry, tool)
    error_type_is(call_span, error_type)
    if verdict == "failed":  # the task's code, which is its error.type
        assert (call_span.attributes or {})[t.RPC_RESPONSE_STATUS_CODE] == error_type


async def fails_unknown(call: Call, session: Any) -> None:
    """The call fails with UnknownEffectError (through the client's own wrapping), whose task can
    be polled again; calling the changing tool again is refused before anything is sent."""
    with pytest.raises(BaseException) as raised:
        await call(*CHARGE)
    error = unknown_effect_in(raised.value)
    assert error.task_id, "the app learns which task to poll"
    assert error.task_id not in str(error)
    with pytest.raises(BaseException) as again:
        await call(*CHARGE)
    assert found_in(again.value, RepeatRefusedError) is not None
    with anyio.fail_after(10):  # polling the task is never refused
        while True:
            polled = await session.send_request(
                GetTaskRequest(params=GetTaskRequestParams(task_id=error.task_id)), ClientGetTaskResult
            )
            if polled.status == "completed":
                break
            await anyio.sleep(0.05)


def found_in(error: BaseException | None, kind: type[BaseException]) -> BaseException | None:
    """`error`, or one it was raised from or grouped with, that is a `kind`."""
    seen = 0
    while error is not None and seen < 10:
        if isinstance(error, kind):
            return error
        grouped = getattr(error, "exceptions", None)  # an exception group (3.11's, or the backport's)
        error = grouped[0] if grouped else error.__cause__ or error.__context__
        seen += 1
    return None


def unknown_effect_in(error: BaseException) -> UnknownEffectError:
    found = found_in(error, UnknownEffectError)
    assert isinstance(found, UnknownEffectError), repr(error)
    return found
