"""Task-backed calls against a task server this project did not write: rmcp (the Rust SDK) running
each tool as a task with its own `TaskManager` (conformance/servers/rust, its `tasks` mode), for
each client that drives one (tests/support/task_calls.py), in the era they negotiate (2026-07-28).

The server runs alone and behind nginx gzipping its answers, as a deployment's proxy does. Faults
are injected on the TCP connection in front of it all (harness/proxy.py's `TcpProxy`) on the
`tasks/get` POSTs, and executions are counted by the server, the ground truth: the changing tool
runs once, the record says how its task ended, and each poll's attempts are `POST` spans under the
call span. The server is built by scripts/conformance-servers; when it is not built these tests fail,
never skip. Runs in the tasks environment (scripts/test-lines), as tests/tasks/test_tasks.py does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Final, NamedTuple

import anyio
import pytest
from tests.support.task_calls import (
    CHARGE,
    DRIVERS,
    Driver,
    assert_ended_badly,
    attempt_posts,
    error_type_is,
    fails_unknown,
    span_tree,
    task_call_span,
    task_record,
)
from tests.support.telemetry import OLD_HTTP_STATUS, Telemetry

from harness import conformance as c
from otel_mcp_replay import telemetry as t

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300)]

TASKS_GET = b'"tasks/get"'
THROTTLED = (
    b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 0\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
)
DECLARATION = {"policy": "app-authorized", "tools": {"charge": {"changes": True}}}
# Past a poll's response headers (rmcp's, and nginx's in front: about 160 bytes) and before its
# answer's event: where a cut leaves a 200 without its answer.
STREAM_CUT_AFTER_BYTES: Final = 230


class Fault(NamedTuple):
    answer: bytes | None  # the proxy's answer in the server's place (the request not forwarded)
    after_bytes: int | None  # the request forwarded, its response cut after these bytes
    failure: str  # what the failed attempt says
    status: int | None  # its HTTP status


@pytest.fixture(params=list(DRIVERS))
def driver(request: pytest.FixtureRequest) -> Driver:
    return DRIVERS[str(request.param)]


@pytest.fixture(scope="module", params=[c.RUST_TASKS, c.RUST_TASKS_GZIP], ids=lambda mode: mode.name)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[c.RunningServer]:
    """rmcp's task server, alone and behind nginx gzipping its event streams (the polls' answers)."""
    mode: c.ServerMode = request.param
    try:
        built = c.builds()
    except c.BuildsMissing as exc:
        pytest.fail(str(exc), pytrace=False)
    with c.running(mode, built, tmp_path_factory.mktemp(mode.name.replace("+", "-"))) as running:
        yield running


@pytest.fixture
def instrumented(server: c.RunningServer, instrument: Callable[..., Any]) -> c.RunningServer:
    instrument(servers={server.url: DECLARATION})
    return server


async def _ran(server: c.RunningServer, tool: str, before: int, expected: int) -> int:
    """The tool's executions since `before`, once they reach `expected` or the guard ends (a guard on
    a hang: the count decides)."""
    with anyio.move_on_after(10):
        while server.executions().get(tool, 0) - before < expected:
            await anyio.sleep(0.02)
    return server.executions().get(tool, 0) - before


async def test_clean(instrumented: c.RunningServer, driver: Driver, telemetry: Telemetry) -> None:
    server = instrumented
    before = server.executions().get("charge", 0)
    async with driver(server.url) as (call, _):
        assert await call(*CHARGE) == "charged 7"
    assert await _ran(server, "charge", before, 1) == 1
    record = task_record(telemetry)
    assert record[t.VERDICT] == "completed" and record[t.EFFECT] == "applied"
    assert record[t.TASK_STATUS] == "completed" and str(record[t.TASK]).startswith("h:")
    span = task_call_span(telemetry, "charge")
    posts = attempt_posts(telemetry, span)
    # The creating request's attempt, then each poll's: all under the call span, none failed.
    assert len(posts) >= 2, span_tree(telemetry)
    assert not any(t.FAILURE in (p.attributes or {}) for p in posts), span_tree(telemetry)
    assert span.end_time is not None and all((p.end_time or 0) <= span.end_time for p in posts)


# A poll's fault on the TCP connection: cut before it reached the server; refused with a 429 (the
# proxy's, in the server's place); or its event stream cut once the server's first bytes passed
# (its headers, not its answer: the failed attempt's status, 200, says the premise held).
CUT: Final = Fault(None, None, "network", None)
REFUSED: Final = Fault(THROTTLED, None, "throttle", 429)
STREAM_CUT: Final = Fault(None, STREAM_CUT_AFTER_BYTES, "network", 200)


@pytest.mark.parametrize("fault", [CUT, REFUSED, STREAM_CUT], ids=["cut", "429", "stream-cut"])
async def test_a_failed_poll_is_repeated(
    instrumented: c.RunningServer, driver: Driver, telemetry: Telemetry, fault: Fault
) -> None:
    """A poll that failed on the wire is sent again: the call completes, its task ran once."""
    server = instrumented
    before = server.executions().get("charge", 0)
    _arm(server, fault)
    async with driver(server.url) as (call, _):
        assert await call(*CHARGE) == "charged 7"
    assert server.proxy.armed == 0, "the fault was not used by the call"
    assert await _ran(server, "charge", before, 1) == 1
    assert task_record(telemetry)[t.VERDICT] == "completed"
    posts = attempt_posts(telemetry, task_call_span(telemetry, "charge"))
    failed = [p.attributes or {} for p in posts if (p.attributes or {}).get(t.FAILURE) is not None]
    assert [a[t.FAILURE] for a in failed] == [fault.failure] and len(posts) >= 3, span_tree(telemetry)
    assert failed[0].get(OLD_HTTP_STATUS) == fault.status, span_tree(telemetry)


def _arm(server: c.RunningServer, fault: Fault) -> None:
    if fault.after_bytes is None:
        server.proxy.cut_next(forward_request=False, match=TASKS_GET, answer=fault.answer)
    else:
        server.proxy.cut_next(fault.after_bytes, match=TASKS_GET)


async def test_polls_cut_past_the_attempts_then_the_apps_recall(
    instrumented: c.RunningServer, driver: Driver, telemetry: Telemetry
) -> None:
    """Every attempt of a poll cut: only the call fails, with UnknownEffectError carrying its task's
    id; the app's recall of the changing tool is refused before anything is sent, and the task, polled
    again by its id, completed: it ran once."""
    server = instrumented
    before = server.executions().get("charge", 0)
    for _ in range(3):  # the policy's attempts of one poll (max_attempts 3)
        server.proxy.cut_next(forward_request=False, match=TASKS_GET)
    async with driver(server.url) as (call, session):
        await fails_unknown(call, session)
    assert server.proxy.armed == 0, "the faults were not used by the call"
    assert await _ran(server, "charge", before, 1) == 1
    record = task_record(telemetry)
    assert record[t.VERDICT] == "failed" and record[t.MAY_HAVE_RUN] is True
    assert record[t.EFFECT] == "unknown"  # its task may still run
    error_type_is(task_call_span(telemetry, "charge"), "otel_mcp_replay.UnknownEffectError")


@pytest.mark.parametrize("fault", [CUT, REFUSED, STREAM_CUT], ids=["cut", "429", "stream-cut"])
async def test_plain_a_failed_poll_fails_the_call(
    server: c.RunningServer, driver: Driver, fault: Fault
) -> None:
    """The control, without the plugin: the same failed poll fails the call (the client's own error),
    though its task ran and completed on the server: an app that calls again runs the tool twice."""
    before = server.executions().get("charge", 0)
    _arm(server, fault)
    raised: list[BaseException] = []
    # Each client raises its own kind, some again as their session closes on the lost connection.
    with pytest.raises(BaseException):  # noqa: B017
        async with driver(server.url) as (call, _):
            try:
                await call(*CHARGE)
            except BaseException as exc:
                raised.append(exc)
                raise
    assert raised, "the call itself failed"
    assert server.proxy.armed == 0, "the fault was not used by the call"
    assert await _ran(server, "charge", before, 1) == 1


@pytest.mark.parametrize(
    ("tool", "verdict", "error_type", "status"),
    [
        ("fail", "tool-error", "tool_error", "completed"),  # an isError result: its task COMPLETED
        ("reject", "failed", "-32602", "failed"),  # a JSON-RPC error: its task FAILED, with its code
    ],
)
async def test_a_task_that_ends_badly(
    instrumented: c.RunningServer,
    driver: Driver,
    telemetry: Telemetry,
    tool: str,
    verdict: str,
    error_type: str,
    status: str,
) -> None:
    server = instrumented
    before = server.executions().get(tool, 0)
    async with driver(server.url) as (call, _):
        with pytest.raises(Exception):  # noqa: B017 (each client raises its own kind)
            await call(tool, {})
    assert await _ran(server, tool, before, 1) == 1
    assert_ended_badly(telemetry, tool, verdict, status, error_type)
