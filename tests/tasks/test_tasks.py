"""Task-backed calls (the MCP tasks extension, SEP-2663) against a real fastmcp server whose tools
run as tasks, for each client that drives one (tests/support/task_calls.py): fastmcp's
`Client.call_tool`, a `call_tool_task` handle, pydantic-ai's `direct_call_tool(use_task=True)`, and
`mcp.Client` with the tasks extension.

Faults are injected at the ASGI level on the `tasks/get` POSTs (the harness's injector) and counted
on the server, the ground truth: a changing tool never runs twice; every record says how the task
ended; the polls' attempts are `POST` spans under the call span. Runs in its own environment
(.venv-tasks: fastmcp-slim 4.1.8 with fastmcp-tasks 4.1.8, pydantic-ai-slim 2.78; scripts/test-lines).
"""

from __future__ import annotations

import gc
import os
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import fastmcp
import mcp_types
import pytest
from fastmcp_tasks import call_tool_task
from fastmcp_tasks.client_models import (
    CancelTaskRequest,
    CancelTaskRequestParams,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from tests.support.task_calls import (
    CHARGE,
    DRIVERS,
    Driver,
    assert_ended_badly,
    attempt_posts,
    error_type_is,
    fails_unknown,
    found_in,
    result_text,
    span_tree,
    task_call_span,
    task_record,
    task_records,
    unknown_effect_in,
)
from tests.support.task_server import TaskMisnaming, running_task_server
from tests.support.telemetry import OLD_HTTP_STATUS, Telemetry, is_attempt, records

from harness.faults import DropAfterExecution, DropBeforeExecution, Throttle
from harness.server import ServerHandle
from otel_mcp_replay import RedactingSpanExporter, RepeatRefusedError, UnknownEffectError, tasks
from otel_mcp_replay import telemetry as t

pytestmark = pytest.mark.anyio


@pytest.fixture(params=list(DRIVERS))
def driver(request: pytest.FixtureRequest) -> Driver:
    return DRIVERS[str(request.param)]


@pytest.fixture
def misnaming() -> TaskMisnaming:
    """The task server's misnaming of tasks, which a test steers (served only to tests that ask)."""
    return TaskMisnaming()


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[ServerHandle]:
    wanted = "misnaming" in request.fixturenames
    with running_task_server(request.getfixturevalue("misnaming") if wanted else None) as handle:
        yield handle


@pytest.fixture
def instrumented(server: ServerHandle, instrument: Callable[..., Any]) -> ServerHandle:
    declaration = {
        "policy": "app-authorized",
        "tools": {"charge": {"changes": True}, "report": {"on": ["network"]}},
    }
    instrument(servers={server.url: declaration})
    return server


@pytest.fixture(autouse=True)
def print_trees(request: pytest.FixtureRequest, server: ServerHandle, telemetry: Telemetry) -> Iterator[None]:
    """With TASKS_PRINT_TREES=1 (and `-s`), each test's span tree and the server's execution counts."""
    yield
    if os.environ.get("TASKS_PRINT_TREES"):
        counted = {
            tool: server.counters.executions(tool)
            for tool in ("charge", "report", "declined", "broken", "slow")
        }
        ran = ", ".join(f"{tool} {n}" for tool, n in counted.items() if n)
        print(f"\n## {request.node.name}: executions {ran}\n{span_tree(telemetry)}")


# -- reading what was exported --


def _tasks_gets(server: ServerHandle) -> int:
    return sum(1 for p in server.counters.post_log() if p.method == "tasks/get")


# -- the cases, instrumented --


async def test_clean(instrumented: ServerHandle, driver: Driver, telemetry: Telemetry) -> None:
    server = instrumented
    async with driver(server.url) as (call, _):
        assert await call(*CHARGE) == "charged 7"
    assert server.counters.executions("charge") == 1
    record = task_record(telemetry)
    assert record[t.VERDICT] == "completed" and record[t.EFFECT] == "applied"
    assert record[t.TASK_STATUS] == "completed" and str(record[t.TASK]).startswith("h:")
    span = task_call_span(telemetry, "charge")
    assert (span.attributes or {})[t.VERDICT] == "completed"
    posts = attempt_posts(telemetry, span)
    # The creating request's attempt, then one per poll: every tasks/get POST is under the call span.
    assert len(posts) == 1 + _tasks_gets(server), span_tree(telemetry)
    assert span.end_time is not None and all((p.end_time or 0) <= span.end_time for p in posts)
    # One point of the conventions' operation duration: the creating request's (they time one request).
    points = telemetry.metrics()[t.METRIC_OPERATION_DURATION]
    assert sum(count for attributes, count in points if attributes[t.GEN_AI_TOOL_NAME] == "charge") == 1


async def test_a_cut_poll_is_repeated(
    instrumented: ServerHandle, driver: Driver, telemetry: Telemetry
) -> None:
    server = instrumented
    server.faults.add_method("tasks/get", DropBeforeExecution(reset=True))
    async with driver(server.url) as (call, _):
        assert await call(*CHARGE) == "charged 7"
        polls = _tasks_gets(server)
        assert await call("report", {}) == "report"  # the session lives on
    assert server.counters.executions("charge") == 1
    assert task_record(telemetry)[t.VERDICT] == "completed"
    posts = attempt_posts(telemetry, task_call_span(telemetry, "charge"))
    assert [(p.attributes or {}).get(t.FAILURE) for p in posts].count("network") == 1, span_tree(telemetry)
    assert len(posts) == 1 + polls


@pytest.mark.parametrize("throttles", [1, 3])
async def test_throttled_polls(
    instrumented: ServerHandle, driver: Driver, telemetry: Telemetry, throttles: int
) -> None:
    """A 429 on a poll is repeated (its Retry-After honoured); three, the attempts of one poll, end
    that call alone with UnknownEffectError carrying the task id, and the app's re-call is refused."""
    server = instrumented
    server.faults.add_method("tasks/get", *[Throttle(retry_after="0")] * throttles)
    async with driver(server.url) as (call, session):
        if throttles == 1:
            assert await call(*CHARGE) == "charged 7"
        else:
            await fails_unknown(call, session)
        assert await call("report", {}) == "report"  # the session lives on
    assert server.counters.executions("charge") == 1
    record = task_record(telemetry)
    posts = attempt_posts(telemetry, task_call_span(telemetry, "charge"))
    # The HTTP instrumentation's default names (OTEL_SEMCONV_STABILITY_OPT_IN unset): the old status key.
    assert [(p.attributes or {}).get(OLD_HTTP_STATUS) for p in posts].count(429) == throttles
    if throttles == 1:
        assert record[t.VERDICT] == "completed"
    else:
        assert record[t.VERDICT] == "failed" and record[t.MAY_HAVE_RUN] is True
        assert record[t.TASK_STATUS] == "working"


async def test_polls_cut_past_the_attempts_then_the_apps_recall(
    instrumented: ServerHandle, driver: Driver, telemetry: Telemetry
) -> None:
    server = instrumented
    server.faults.add_method("tasks/get", *[DropBeforeExecution(reset=True)] * 3)
    async with driver(server.url) as (call, session):
        await fails_unknown(call, session)
        assert await call("report", {}) == "report"
    assert server.counters.executions("charge") == 1
    record = task_record(telemetry)
    assert record[t.VERDICT] == "failed" and record[t.MAY_HAVE_RUN] is True
    assert record[t.EFFECT] == "unknown"  # its task may still run
    error_type_is(task_call_span(telemetry, "charge"), "otel_mcp_replay.UnknownEffectError")


async def test_compatibility_too(
    server: ServerHandle, driver: Driver, telemetry: Telemetry, instrument: Callable[..., Any]
) -> None:
    """Under compatibility a poll is repeated all the same, and polling that cannot finish fails
    only the call, with UnknownEffectError (a poll is no tool call: the policy never changes it)."""
    instrument(servers={server.url: {"policy": "compatibility", "tools": {"charge": {"changes": True}}}})
    server.faults.add_method("tasks/get", *[DropBeforeExecution(reset=True)] * 3)
    async with driver(server.url) as (call, session):
        await fails_unknown(call, session)
    assert server.counters.executions("charge") == 1
    assert task_record(telemetry)[t.MAY_HAVE_RUN] is True


@pytest.mark.parametrize(
    ("tool", "verdict", "error_type", "status"),
    [
        ("declined", "failed", "-32042", "failed"),  # raises MCPError: the task FAILED
        ("broken", "tool-error", "tool_error", "completed"),  # raises: COMPLETED with isError
    ],
)
async def test_a_task_that_ends_badly(
    instrumented: ServerHandle,
    driver: Driver,
    telemetry: Telemetry,
    tool: str,
    verdict: str,
    error_type: str,
    status: str,
) -> None:
    server = instrumented
    async with driver(server.url) as (call, _):
        with pytest.raises(Exception):  # noqa: B017 (each client raises its own kind)
            await call(tool, {})
    assert server.counters.executions(tool) == 1
    assert_ended_badly(telemetry, tool, verdict, status, error_type)


async def test_a_cancelled_task(instrumented: ServerHandle, driver: Driver, telemetry: Telemetry) -> None:
    server = instrumented
    async with driver(server.url) as (call, _), fastmcp.Client(server.url) as side:
        outcome: list[BaseException] = []

        async def calling() -> None:
            try:
                await call("slow", {})
            except Exception as exc:
                outcome.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(calling)
            task_id = await anyio.to_thread.run_sync(_first_polled_task, server)
            await side.session.send_request(
                CancelTaskRequest(params=CancelTaskRequestParams(task_id=task_id)), mcp_types.Result
            )
        assert outcome, "a cancelled task is no result"
    record = task_record(telemetry, "slow")
    assert (record[t.VERDICT], record[t.TASK_STATUS]) == ("failed", "cancelled")
    assert task_id not in _exported(telemetry)  # fastmcp's message names it: "Task <id> was cancelled"
    error_type_is(task_call_span(telemetry, "slow"), "cancelled")


def _first_polled_task(server: ServerHandle) -> str:
    assert server.counters.wait_until(lambda c: any(p.method == "tasks/get" for p in c.post_log()), 10)
    import json

    post = next(p for p in server.counters.post_log() if p.method == "tasks/get")
    return str(json.loads(post.body)["params"]["taskId"])


async def test_a_cut_creating_request(
    instrumented: ServerHandle, driver: Driver, telemetry: Telemetry
) -> None:
    """Cut after the tool was taken, before the task's creation came back: an ordinary tools/call
    that may have run (the law), never repeated, and the app's re-call refused."""
    server = instrumented
    server.faults.add("charge", DropAfterExecution(reset=True))
    async with driver(server.url) as (call, _):
        with pytest.raises(BaseException) as raised:
            await call(*CHARGE)
        assert unknown_effect_in(raised.value).task_id is None
        with pytest.raises(BaseException) as again:
            await call(*CHARGE)
        assert found_in(again.value, RepeatRefusedError) is not None
    # The task was created, and its tool runs in the server's worker: once, never twice.
    assert server.counters.tool_posts("charge") == 1
    assert server.counters.wait_until(lambda c: c.executions("charge") == 1, 10)
    record = [r for r in records(telemetry) if r[t.SENT] == 1]
    assert record and record[0][t.VERDICT] == "failed" and t.TASK not in record[0]


# -- the same, plain (the SDK alone): what a caller sees without the plugin --


async def test_plain_clean(server: ServerHandle, driver: Driver) -> None:
    async with driver(server.url) as (call, _):
        assert await call(*CHARGE) == "charged 7"
    assert server.counters.executions("charge") == 1


@pytest.mark.parametrize("fault", ["cut", "429"])
async def test_plain_a_failed_poll_then_the_apps_recall_runs_it_twice(
    server: ServerHandle, driver: Driver, fault: str
) -> None:
    """Without the plugin one cut or 429 on a poll fails the caller (a cut takes the session with
    it), who cannot learn which task to poll; the app's re-call makes a second task: the changing
    tool runs twice. (The instrumented tests above: once.)"""
    server.faults.add_method("tasks/get", DropBeforeExecution(reset=True) if fault == "cut" else Throttle())
    with pytest.raises(BaseException) as raised:
        async with driver(server.url) as (call, _):
            await call(*CHARGE)
    assert found_in(raised.value, UnknownEffectError) is None
    async with driver(server.url) as (call, _):  # a new session: a cut took the first one down
        assert await call(*CHARGE) == "charged 7"
    assert server.counters.wait_until(lambda c: c.executions("charge") == 2, 10)


@pytest.mark.parametrize("tool", ["declined", "broken"])
async def test_plain_a_task_that_ends_badly(server: ServerHandle, driver: Driver, tool: str) -> None:
    async with driver(server.url) as (call, _):
        with pytest.raises(Exception):  # noqa: B017 (each client raises its own kind)
            await call(tool, {})
    assert server.counters.executions(tool) == 1


async def test_plain_a_cut_creating_request_then_the_apps_recall(
    server: ServerHandle, driver: Driver
) -> None:
    server.faults.add("charge", DropAfterExecution(reset=True))
    with pytest.raises(BaseException) as raised:
        async with driver(server.url) as (call, _):
            await call(*CHARGE)
    assert found_in(raised.value, UnknownEffectError) is None
    async with driver(server.url) as (call, _):
        assert await call(*CHARGE) == "charged 7"
    assert server.counters.wait_until(lambda c: c.executions("charge") == 2, 10)


# -- task ids never leave raw --


def _exported(telemetry: Telemetry) -> str:
    """Every client span exported (the server runs in this process: its own spans are the server's
    to redact), through the plugin's redaction, as text: names, attributes, events, statuses."""
    exporter = InMemorySpanExporter()
    RedactingSpanExporter(exporter).export([s for s in telemetry.spans() if s.kind == SpanKind.CLIENT])
    texts = []
    for span in exporter.get_finished_spans():
        texts += [span.name, repr(dict(span.attributes or {})), str(span.status.description)]
        texts += [repr(dict(event.attributes or {})) for event in span.events]
    return "\n".join(texts)


async def test_task_ids_never_leave_raw(
    instrumented: ServerHandle, driver: Driver, telemetry: Telemetry
) -> None:
    server = instrumented
    async with driver(server.url) as (call, _):
        assert await call(*CHARGE) == "charged 7"
    task_id = _first_polled_task(server)
    assert task_id not in _exported(telemetry)
    assert str(task_record(telemetry)[t.TASK]).startswith("h:")


# -- every task-backed call ends, once, with its record, however its app leaves it --

# The count: calls answered with a task, taken as handles, never polled, then the client closed.
ABANDONED = 300
# What a call its app left says: it may have run (its task may still be running), as last seen.
LEFT = ("failed", "unknown", True, "working")


def _as_left(record: dict[str, Any]) -> tuple[object, ...]:
    return (record[t.VERDICT], record[t.EFFECT], record[t.MAY_HAVE_RUN], record[t.TASK_STATUS])


def _calls_counted(telemetry: Telemetry, verdict: str) -> float:
    points = telemetry.metrics().get(t.METRIC_CALLS, [])
    return sum(n for a, n in points if a[t.GEN_AI_TOOL_NAME] == "charge" and a[t.VERDICT] == verdict)


async def test_abandoned_handles_end_as_their_session_closes(
    instrumented: ServerHandle, telemetry: Telemetry
) -> None:
    """300 calls answered with a task, taken as handles and never polled, then the client closed:
    each ends then, once: its call span, its record (it may have run), its point of the calls metric;
    every attempt's parent is in the trace; and nothing holds the closed session."""
    server = instrumented
    async with fastmcp.Client(server.url) as client:
        handles = [await call_tool_task(client, "charge", {"amount": n}) for n in range(ABANDONED)]
        session = weakref.ref(client.session)
        assert not task_records(telemetry)  # open: their tasks have not ended, their session lives
    assert len({h.task_id for h in handles}) == ABANDONED
    assert server.counters.wait_until(lambda c: c.executions("charge") == ABANDONED, 120)
    found = task_records(telemetry)
    assert len(found) == ABANDONED and all(_as_left(r) == LEFT for r in found)
    spans = telemetry.spans()
    call_spans = [
        s for s in spans if s.name == "tools/call charge" and any(e.name == t.RECORD_EVENT for e in s.events)
    ]
    assert len(call_spans) == ABANDONED
    assert all((s.attributes or {})[t.ERROR_TYPE] == "otel_mcp_replay.UnknownEffectError" for s in call_spans)
    known = {s.context.span_id for s in spans if s.context is not None}
    posts = [s for s in spans if is_attempt(s)]
    assert len(posts) == ABANDONED and all(p.parent is not None and p.parent.span_id in known for p in posts)
    assert _calls_counted(telemetry, "failed") == ABANDONED
    del handles, client
    gc.collect()
    assert session() is None, "the closed session is held"


async def test_the_bound_on_open_calls_ends_the_oldest(
    instrumented: ServerHandle, telemetry: Telemetry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the bound on a session's open calls, the oldest ends at once, filed as its app left it,
    never dropped; the others end as the session closes."""
    server = instrumented
    monkeypatch.setattr(tasks, "MAX_OPEN_PER_SESSION", 2)
    async with fastmcp.Client(server.url) as client:
        for n in range(3):
            await call_tool_task(client, "charge", {"amount": n})
        assert [_as_left(r) for r in task_records(telemetry)] == [LEFT]
    assert [_as_left(r) for r in task_records(telemetry)] == [LEFT] * 3
    assert server.counters.wait_until(lambda c: c.executions("charge") == 3, 10)
    assert _calls_counted(telemetry, "failed") == 3


async def test_an_answer_naming_another_task_settles_nothing(
    misnaming: TaskMisnaming, instrumented: ServerHandle, driver: Driver, telemetry: Telemetry
) -> None:
    """Every poll of the charge's task answered as a poll of another task, which ended failed: the
    call is not settled by it and its caller never gets that task's result: its status could not be
    read (UnknownEffectError with its own task id), as when polling fails."""
    server = instrumented
    async with driver(server.url) as (call, _):
        with pytest.raises(Exception):  # noqa: B017 (each client raises its own kind)
            await call("declined", {})
        misnaming.polled_as = misnaming.created[0]  # the declined task's
        with pytest.raises(BaseException) as raised:
            await call(*CHARGE)
    error = unknown_effect_in(raised.value)
    assert error.task_id == misnaming.created[1]
    assert "declined by the bank" not in repr(raised.value)
    assert server.counters.wait_until(lambda c: c.executions("charge") == 1, 10)  # its task runs on
    assert _as_left(task_record(telemetry)) == LEFT
    error_type_is(task_call_span(telemetry, "charge"), "otel_mcp_replay.UnknownEffectError")
    assert task_record(telemetry, "declined")[t.TASK_STATUS] == "failed"


@pytest.mark.parametrize("polled", [True, False], ids=["polled", "left"])
async def test_two_calls_given_one_task_each_end_with_their_own_record(
    misnaming: TaskMisnaming, instrumented: ServerHandle, telemetry: Telemetry, polled: bool
) -> None:
    """The server gives a second call the first one's task id: both are open on it, and each ends
    with its own record: by the task's terminal status, or as the session closes."""
    server = instrumented
    async with fastmcp.Client(server.url) as client:
        first = await call_tool_task(client, "charge", {"amount": 1})
        misnaming.reused = first.task_id
        second = await call_tool_task(client, "charge", {"amount": 2})
        assert second.task_id == first.task_id
        if polled:
            assert result_text(await second.result()) == "charged 1"  # the first task's, as the server said
    assert server.counters.wait_until(lambda c: c.executions("charge") == 2, 10)
    found = task_records(telemetry)
    assert len(found) == 2 and len({r[t.JSONRPC_REQUEST_ID] for r in found}) == 2
    assert len({r[t.TASK] for r in found}) == 1
    if polled:
        assert [(r[t.VERDICT], r[t.TASK_STATUS]) for r in found] == [("completed", "completed")] * 2
    else:
        assert [_as_left(r) for r in found] == [LEFT] * 2
    assert _calls_counted(telemetry, "completed" if polled else "failed") == 2


# -- the record as a log-based event --


async def test_a_task_backed_calls_record_as_a_log_record(
    server: ServerHandle, driver: Driver, telemetry: Telemetry, instrument: Callable[..., Any]
) -> None:
    """`record=log`: the call's one record, filed as its task ends, is a log record with the task's
    keyed hash and last status, under the call span's ids; no span event, no task id raw."""
    from tests.support.logs import Logs, attributes_of

    logs = Logs()
    declaration = {"policy": "app-authorized", "tools": {"charge": {"changes": True}}}
    instrument(servers={server.url: declaration}, record="log")
    async with driver(server.url) as (call, _):
        assert await call(*CHARGE) == "charged 7"
    assert server.counters.executions("charge") == 1
    assert [r for r in records(telemetry) if t.TASK in r] == []
    (log,) = [log for log in logs.records() if t.TASK in attributes_of(log)]
    record = attributes_of(log)
    assert (record[t.VERDICT], record[t.EFFECT], record[t.TASK_STATUS]) == (
        "completed",
        "applied",
        "completed",
    )
    assert str(record[t.TASK]).startswith("h:") and _first_polled_task(server) not in repr(record)
    (span,) = [s for s in telemetry.spans() if s.context.span_id == log.log_record.span_id]
    assert span.name == "tools/call charge" and span.context.trace_id == log.log_record.trace_id
