"""What the framework tests (tests/frameworks) share: the calls they make, the server's transport
(the declaration: calls.declared), and the scenarios every framework runs through its driver, with
what each comes to on the server and in the telemetry. It imports no framework: each of those files
runs only where its framework is installed."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import anyio
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind
from tests.support.calls import declared
from tests.support.telemetry import Telemetry, records, the_record

from harness.faults import DropAfterExecution, Throttle
from harness.server import ServerHandle
from otel_mcp_replay import telemetry as t

# Generous: a call that hangs fails the test in 20 s instead of holding the run.
DEADLINE_S = 20
SEARCH = ("search", {"query": "q"})
EMAIL = ("send_email", {"to": "ops@example.com", "body": "hello"})
SEARCH_RESULT = "3 results for 'q'"
# The plugin's words for a changing call cut after it ran, and for its repeat refused.
MAY_HAVE_RUN = "may have run on the server"
NOT_SENT = "was not sent: the same call failed moments ago"

# How a framework's agent calls a tool the model asked for: `call(tool, arguments)`, what the model
# is handed of it. A `Driver` gives one for the server, inside the framework's connection to it.
Call = Callable[[str, dict[str, Any]], Awaitable[Any]]
Driver = Callable[[ServerHandle], AbstractAsyncContextManager[Call]]


def is_sse(server: ServerHandle) -> bool:
    return server.app_kind == "sse"


def posted_status(server: ServerHandle) -> int:
    """The status of an accepted POST: SSE accepts a message with 202 and answers on the stream."""
    return 202 if is_sse(server) else 200


def search_repeated_after_its_429(server: ServerHandle, telemetry: Telemetry) -> dict[str, Any]:
    """The one search, refused with a 429 and repeated by the app's permission: it ran once, in two
    POSTs, and completed, as its record says; the record."""
    assert server.counters.executions("search") == 1
    assert server.counters.tool_posts("search") == 2
    record = the_record(telemetry)
    assert list(record[t.ATTEMPTS_STATUS]) == [429, posted_status(server)]
    assert list(record[t.ATTEMPTS_PERMISSION]) == ["first", "app"]
    assert record[t.VERDICT] == "completed"
    return record


def scope_of(span: ReadableSpan) -> str:
    return span.instrumentation_scope.name if span.instrumentation_scope is not None else ""


def call_span_and_ancestry(
    spans: list[ReadableSpan], tool: str
) -> tuple[ReadableSpan, list[tuple[str, str]]]:
    """The plugin's one call span of `tool`, and the (name, scope) of it and each of its ancestors."""
    ours = [s for s in spans if s.name == f"tools/call {tool}" and scope_of(s) == t.INSTRUMENTATION_NAME]
    assert len(ours) == 1, [(s.name, scope_of(s)) for s in spans]
    by_id = {s.context.span_id: s for s in spans}
    chain: list[tuple[str, str]] = []
    node: ReadableSpan | None = ours[0]
    while node is not None:
        chain.append((node.name, scope_of(node)))
        node = by_id.get(node.parent.span_id) if node.parent is not None else None
    return ours[0], chain


def children_of(spans: list[ReadableSpan], parent: ReadableSpan) -> set[tuple[str, str]]:
    span_id = parent.context.span_id
    return {(s.name, scope_of(s)) for s in spans if s.parent is not None and s.parent.span_id == span_id}


# -- the scenarios every framework runs, through its driver --


async def bounded(call: Call, tool: str, arguments: dict[str, Any]) -> Any:
    """`call(tool, arguments)` within DEADLINE_S, a hang guard only. Around the one call, never the
    framework's connection: some (mcp-use) enter a cancel scope in one task and leave it in another."""
    with anyio.fail_after(DEADLINE_S):
        return await call(tool, arguments)


async def a_429_repeated(server: ServerHandle, telemetry: Telemetry, instrument: Any, driver: Driver) -> None:
    """A search refused with a 429 and repeated by the app's permission: the model is handed its
    result, and it ran once."""
    instrument(servers=declared(server, {"search": {"on": ["throttle"]}}))
    server.faults.add("search", Throttle())
    async with driver(server) as call:
        assert await bounded(call, *SEARCH) == SEARCH_RESULT
    search_repeated_after_its_429(server, telemetry)


async def a_cut_called_again(
    server: ServerHandle, telemetry: Telemetry, instrument: Any, driver: Driver
) -> tuple[Any, Any]:
    """A changing email cut after it ran, which the model calls again, then a search on the same
    connection: what the model was handed of the email, twice (the plugin's word that it may have
    run, then the refusal of its repeat, unsent). The email ran once, in one POST; the three records
    say so."""
    instrument(servers=declared(server, {"send_email": {"changes": True}}))
    server.faults.add("send_email", DropAfterExecution(answer_lost=True))
    async with driver(server) as call:
        first = await bounded(call, *EMAIL)
        repeat = await bounded(call, *EMAIL)
        assert await bounded(call, *SEARCH) == SEARCH_RESULT
    assert server.counters.executions("send_email") == 1
    assert server.counters.tool_posts("send_email") == 1
    assert server.counters.executions("search") == 1
    told, refused, searched = records(telemetry)
    assert (told[t.MAY_HAVE_RUN], told[t.EFFECT], told[t.VERDICT]) == (True, "unknown", "failed")
    assert (refused[t.VERDICT], refused[t.SENT], refused[t.EFFECT]) == ("failed", 0, "none")
    assert searched[t.VERDICT] == "completed"
    return first, repeat


def handed_in_words(first: str, repeat: str, framework_words: str) -> None:
    """The two texts a model was handed of a_cut_called_again's email, each in the framework's words
    around the plugin's: it may have run, then its repeat was not sent."""
    assert first.startswith(framework_words) and MAY_HAVE_RUN in first.lower(), first
    assert repeat.startswith(framework_words) and NOT_SENT in repeat, repeat


async def a_clean_call(
    server: ServerHandle, telemetry: Telemetry, instrument: Any, driver: Driver, scope: str
) -> None:
    """A clean search: it ran once, and is one MCP client span of `scope`'s (the instrumentation that
    made it), completed, with its POST under it, its record one attempt. (The server runs in this
    process: its own spans of the call, SERVER spans, are beside these.)"""
    instrument(servers=declared(server, {"search": {"on": ["throttle"]}}))
    async with driver(server) as call:
        assert await bounded(call, *SEARCH) == SEARCH_RESULT
    assert server.counters.executions("search") == 1
    spans = telemetry.spans()
    calls = [
        s
        for s in spans
        if s.kind is SpanKind.CLIENT and (s.attributes or {}).get(t.MCP_METHOD_NAME) == t.TOOLS_CALL_METHOD
    ]
    assert [(s.name, scope_of(s)) for s in calls] == [("tools/call search", scope)]
    (call_span,) = calls
    assert (call_span.attributes or {})[t.VERDICT] == "completed"
    assert (t.ATTEMPT_SPAN_NAME, t.INSTRUMENTATION_NAME) in children_of(spans, call_span)
    record = the_record(telemetry)
    assert (record[t.SENT], record[t.ATTEMPTS_STATUS]) == (1, (posted_status(server),))
