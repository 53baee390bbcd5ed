"""A task-backed call (the MCP tasks extension, SEP-2663): one call until its task ends.

The rule: a `tools/call` answered with a task (`CreateTaskResult`) is applied (the task durably
exists) and not over. It stays open, its span with it, until a poll (`tasks/get`, whoever sends it:
the SDK's claim resolver, fastmcp's, a task handle) shows its task's terminal status, which is its
verdict; or until polling fails, when only that call fails, with `UnknownEffectError` carrying the
task id; or until its caller stops waiting. A poll is a pure, idempotent read: the HTTP seam repeats
it as the law says of one (law.permit), each attempt a `POST` span under the call's span. The task
id is the app's, never exported: the record holds its keyed hash.
"""

from __future__ import annotations

import contextvars
import hashlib
import hmac
from typing import Any, Final

import anyio

from otel_mcp_replay import telemetry as t
from otel_mcp_replay.attempt import Attempt
from otel_mcp_replay.call import CallTask, ToolCall
from otel_mcp_replay.call_span import CallSpan
from otel_mcp_replay.errors import UnknownEffectError
from otel_mcp_replay.ledger import RequestReplay
from otel_mcp_replay.lines import LINE, http_instrumented
from otel_mcp_replay.runtime import Runtime

# The open task-backed calls one session keeps: past it, the oldest (a task handle its app never
# drove to the end) ends as its caller stopped waiting.
MAX_OPEN_PER_SESSION: Final = 1024
# error.type of a task that failed without a JSON-RPC code (the spec gives one; a server may not).
_NO_CODE: Final = "_OTHER"


def task_of(result: object) -> tuple[str, t.TaskStatus] | None:
    """The task id and status of a session call's result that is a task (`resultType` "task", as
    the tasks client's claim parsed it), else None."""
    if getattr(result, "result_type", None) != "task":
        return None
    task_id, status = getattr(result, "task_id", None), getattr(result, "status", None)
    if type(task_id) is not str or not task_id:
        return None
    return task_id, status if status in t.TASK_STATUSES else "working"


def hashed_task_id(key: bytes, task_id: str) -> str:
    """A task id as the record holds it: a keyed hash (the session ids' key), never the id, which a
    server may use as a bearer token."""
    digest = hmac.new(key, task_id.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()
    return "h:" + digest[:16]


def opened(runtime: Runtime, call: ToolCall, result: object) -> bool:
    """`call`'s session call returned `result`: when it is a task, the call goes on, open on its
    session until its task ends (True); its creating request is timed now, as the MCP conventions
    time one request."""
    found = task_of(result)
    session = call.session
    if found is None or session is None:
        return False
    call.abandon()  # its request is over: its attempts are settled
    task_id, status = found
    runtime.task_ids.saw(task_id)  # a credential to the redaction from now on
    call.task = CallTask(task_id, hashed_task_id(runtime.session_key, task_id), status)
    calls: dict[str, ToolCall] = runtime.open_tasks.setdefault(session, {})
    calls[task_id] = call
    if len(calls) > MAX_OPEN_PER_SESSION:
        calls[next(iter(calls))].task_ended("failed")  # the oldest: its caller stopped waiting
    app_call = call.app_call
    call.ended("completed", None, filed=False, ends=False)  # its creating request: its operation point
    if app_call is not None:  # its app's call files it if no poll of its does (AppCall.ended)
        app_call.round_ended(call, "completed", filed=False)
    return True


def open_call(runtime: Runtime, session: object, task_id: str) -> ToolCall | None:
    """The open task-backed call of `session` whose task is `task_id`, if there is one."""
    calls = runtime.open_tasks.get(session)
    return calls.get(task_id) if calls is not None else None


class TaskPoll:
    """One `tasks/get` of an open task-backed call, as the HTTP seam's series sends it (the
    `attempt.AttemptsOwner` of its attempts): its attempts are `POST` spans under the call's span,
    written to a ledger of its own (a poll files no record)."""

    attempt: Attempt | None = None

    def __init__(self, runtime: Runtime, call: ToolCall) -> None:
        self.runtime, self.call, self.tool = runtime, call, call.tool
        self.call_span: CallSpan = call.call_span
        self.ledger = RequestReplay()
        self.ledger.records_http_duration = call.call_span.route is not None and http_instrumented()

    async def wait_unless_abandoned(self, delay_ms: int) -> bool:
        """Sleep `delay_ms` before the next attempt (a poll is of the 2026-07-28 era, whose caller's
        cancel cancels the scope of the POST this wait runs in)."""
        await anyio.sleep(delay_ms / 1000)
        return True


# The poll being sent in this context (the SDK carries the context into the task that POSTs it).
CURRENT_POLL: contextvars.ContextVar[TaskPoll | None] = contextvars.ContextVar(
    "otel_mcp_replay_task_poll", default=None
)


def _still_open(call: ToolCall) -> bool:
    """`call` is open yet: no other poll of its task (a handle's `status()` beside its `result()`)
    ended it meanwhile, nor its app's call."""
    calls = call.runtime.open_tasks.get(call.session) if call.session is not None else None
    return calls is not None and call.task is not None and calls.get(call.task.id) is call


def status_seen(call: ToolCall, result: object) -> None:
    """A poll of `call`'s task was answered with `result`: a terminal status ends the call."""
    status = getattr(result, "status", None)
    task = call.task
    if status not in t.TASK_STATUSES or not _still_open(call) or task is None:
        return  # no task's answer, or another's ended it: nothing more to say
    task.status = status
    if status == "completed":
        inline = getattr(result, "result", None)
        is_error = inline.get("isError") if type(inline) is dict else getattr(inline, "is_error", None)
        call.task_ended("tool-error" if is_error is True else "completed")
    elif status == "failed":
        error = getattr(result, "error", None)
        code = error.get("code") if type(error) is dict else getattr(error, "code", None)
        if type(code) is int:
            call.server_code = code
        task.failure = str(code) if type(code) is int else _NO_CODE
        call.task_ended("failed")
    elif status == "cancelled":
        task.failure = t.TASK_CANCELLED
        call.task_ended("failed")


def poll_failed(call: ToolCall, poll: TaskPoll, exc: BaseException) -> BaseException | None:
    """A poll of `call`'s task ended with `exc`: the call ends. Returns what the caller sees instead
    (None: `exc` itself, the caller's own cancellation or timeout, or the call ended meanwhile)."""
    if not _still_open(call):
        return None
    if isinstance(exc, anyio.get_cancelled_exc_class()) or LINE.is_callers_timeout(exc):
        call.task_ended("failed", exc)  # it stopped waiting: the task may run on
        return None
    error = UnknownEffectError(call.tool, task_id=call.task.id if call.task is not None else None)
    final_error = poll.ledger.final_error
    error.__cause__ = final_error if final_error is not None else exc
    call.task_ended("failed", error)
    return error


def request_task(request: Any) -> str | None:
    """The task id a `tasks/get` request object polls, else None."""
    if getattr(request, "method", None) != t.TASKS_GET_METHOD:
        return None
    params = getattr(request, "params", None)
    task_id = getattr(params, "task_id", None)
    if task_id is None and isinstance(params, dict):
        task_id = params.get("taskId")
    return task_id if type(task_id) is str else None
