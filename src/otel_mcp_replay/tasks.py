"""A task-backed call (the MCP tasks extension, SEP-2663): one call until its task ends.

The rule: a `tools/call` answered with a task (`CreateTaskResult`) is applied (the task durably
exists) and not over. It stays open, its span with it, until a poll (`tasks/get`, whoever sends it:
the SDK's claim resolver, fastmcp's, a task handle) shows its task's terminal status, which is its
verdict (the verdict of every call its server gave that task); or until polling fails, or answers
with another task's status, when only that call fails, with `UnknownEffectError` carrying the task
id; or until its caller stops waiting; or until its app leaves it: its session closing, or the bound
on a session's open calls, ends it as one that may have run. Each ends once, with its record. A poll
is a pure, idempotent read: the HTTP seam repeats it as the law says of one (law.permit), each
attempt a `POST` span under the call's span. The task id is the app's, never exported: the record
holds its keyed hash.
"""

from __future__ import annotations

import contextvars
import hashlib
import hmac
from collections.abc import Awaitable, Callable
from typing import Any, Final

import anyio
from opentelemetry import context as otel_context
from opentelemetry.instrumentation.utils import is_instrumentation_enabled

from otel_mcp_replay import telemetry as t
from otel_mcp_replay.attempt import Attempt
from otel_mcp_replay.call import ToolCall
from otel_mcp_replay.call_span import CallSpan
from otel_mcp_replay.errors import UnknownEffectError, foreign_task_answer, type_name
from otel_mcp_replay.evidence import Answer
from otel_mcp_replay.guard import settle_shared
from otel_mcp_replay.ledger import RequestReplay
from otel_mcp_replay.lines import LINE
from otel_mcp_replay.runtime import Runtime
from otel_mcp_replay.telemetry import CallVerdict

# The open task-backed calls one session keeps: past it, the oldest (a task handle its app never
# drove to the end) ends as one its app left.
MAX_OPEN_PER_SESSION: Final = 1024
# error.type of a task that failed without a JSON-RPC code (the spec gives one; a server may not).
_NO_CODE: Final = "_OTHER"


class CallTask:
    """A task-backed call's task: its id as the server named it (never exported), its keyed hash as
    the record says it, the last status seen of it, the error.type and JSON-RPC code of a task that
    ended failed or cancelled, and the open calls of its session it is one of."""

    __slots__ = ("code", "failure", "hash", "id", "open_calls", "status")

    def __init__(self, task_id: str, hashed: str, status: t.TaskStatus, open_calls: OpenCalls) -> None:
        self.id, self.hash, self.status, self.open_calls = task_id, hashed, status, open_calls
        self.failure: str | None = None
        self.code: int | None = None

    def let_go(self, call: ToolCall) -> None:
        """`call` ended: its task's polls are no longer its."""
        self.open_calls.discard(call)


def _task(call: ToolCall) -> CallTask | None:
    """`call`'s task, as this module made it (call.Task is what the call reads of it)."""
    task = call.task
    return task if isinstance(task, CallTask) else None


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


class OpenCalls:
    """One session's task-backed calls not ended yet, oldest first, found by the task each was given
    (a server may give two calls one task id: each is a call of its own, ended with its own record).
    Held by the runtime for its session only until the session closes (`session_closed`)."""

    __slots__ = ("_by_task", "_oldest_first")

    def __init__(self) -> None:
        self._oldest_first: dict[ToolCall, None] = {}  # insertion-ordered: the oldest is the first
        self._by_task: dict[str, list[ToolCall]] = {}

    def add(self, call: ToolCall, task_id: str) -> ToolCall | None:
        """`call` is open on `task_id`; returns the oldest open call when the bound is passed."""
        self._oldest_first[call] = None
        self._by_task.setdefault(task_id, []).append(call)
        if len(self._oldest_first) > MAX_OPEN_PER_SESSION:
            return next(iter(self._oldest_first))
        return None

    def of(self, task_id: str) -> list[ToolCall]:
        """The open calls given `task_id`, oldest first (a copy: ending one changes these)."""
        return list(self._by_task.get(task_id, ()))

    def all(self) -> list[ToolCall]:
        """Every open call, oldest first (a copy)."""
        return list(self._oldest_first)

    def discard(self, call: ToolCall) -> None:
        """`call` ended: its task's polls are no longer its."""
        task = _task(call)
        if call not in self._oldest_first or task is None:
            return
        del self._oldest_first[call]
        calls = self._by_task[task.id]
        calls.remove(call)
        if not calls:
            del self._by_task[task.id]

    def __contains__(self, call: object) -> bool:
        return call in self._oldest_first


def opened(runtime: Runtime, call: ToolCall, result: object) -> list[ToolCall] | None:
    """`call`'s session call returned `result`: when it is a task, the call goes on, open on its
    session until its task ends, and the calls the bound on open calls let go (ended, as their app
    left them) are returned, for the repeat guard's store; None when it is no task. Its creating
    request is timed now, as the MCP conventions time one request."""
    found = task_of(result)
    session = call.session
    if found is None or session is None:
        return None
    task_id, status = found
    calls = runtime.open_tasks.get(session)
    if calls is None:
        calls = runtime.open_tasks[session] = OpenCalls()
    call.task = CallTask(task_id, hashed_task_id(runtime.session_key, task_id), status, calls)
    oldest = calls.add(call, task_id)
    call.went_on()  # its request is over, its call is not: timed now, and handed on
    runtime.task_ids.saw(task_id)  # a credential to the redaction from now on
    if oldest is None:
        return []
    left(oldest)
    return [oldest]


def polled(
    runtime: Runtime,
    session: object,
    request: object,
    wrapped: Callable[..., Awaitable[Any]],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Awaitable[Any]:
    """`ClientSession.send_request` of a `tasks/get` (patches/session.py routes it here): a poll of
    an open task-backed call's task is sent under that call's span (`_poll`); any other is passed
    straight on."""
    task_id = request_task(request)
    call = None if task_id is None else open_call(runtime, session, task_id)
    if call is None or not is_instrumentation_enabled():
        return wrapped(*args, **kwargs)
    return _poll(runtime, call, wrapped, args, kwargs)


async def _poll(
    runtime: Runtime,
    call: ToolCall,
    wrapped: Callable[..., Awaitable[Any]],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """A poll of `call`'s task: sent under the call's span, its answer read for the task's status;
    a poll that fails ends that call alone. What the repeat guard remembers of a call it ended is
    told to its store."""
    poll = TaskPoll(runtime, call)
    token = CURRENT_POLL.set(poll)
    otel_token = otel_context.attach(call.call_span.context)
    try:
        result = await wrapped(*args, **kwargs)
    except BaseException as exc:
        poll.ended()  # (what its streams said is read first: its final error among it)
        seen = poll_failed(call, poll, exc)
        if call.guarded is not None:
            await settle_shared(runtime.guard, call.guarded)
        if seen is None:
            raise
        raise seen from seen.__cause__
    finally:
        otel_context.detach(otel_token)
        CURRENT_POLL.reset(token)
    poll.ended()
    seen = status_seen(call, result)
    if call.guarded is not None:  # its task ended: what the guard remembers, told
        await settle_shared(runtime.guard, call.guarded)
    if seen is not None:  # an answer that is not its task's: never handed to its caller
        raise seen from seen.__cause__
    return result


def open_call(runtime: Runtime, session: object, task_id: str) -> ToolCall | None:
    """The open task-backed call of `session` whose task is `task_id` (the oldest, when the server
    gave two calls that task), if there is one: its poll is sent under its span."""
    calls = runtime.open_tasks.get(session)
    found = calls.of(task_id) if calls is not None else ()
    return found[0] if found else None


def left(call: ToolCall) -> None:
    """Its app left `call` open (its session closed, or the bound on open calls let it go) before its
    task's terminal status was seen: it ends failed, as one that may have run (the task may still
    run), with the last status seen."""
    task = _task(call)
    task_ended(call, "failed", UnknownEffectError(call.tool, task_id=task.id if task is not None else None))


def task_ended(call: ToolCall, verdict: CallVerdict, error: BaseException | None = None) -> None:
    """`call`'s task reached its terminal status (`verdict` says how; its task's `failure` its
    error.type, `code` its JSON-RPC code), or its call failed with `error` while polling it (an
    UnknownEffectError: it may have run): it ends (ToolCall.ended), or with the app's call it is a
    round of, whose span ends with this verdict. Its request was timed as it ended."""
    call_span = call.call_span
    if not call_span.span.is_recording():  # an outer span, which timed its creating request, ended
        call_span.outlives_its_request(call.runtime.tracer, call.tool)
    task = _task(call)
    if error is not None:
        failure_type: str | None = type_name(error)
    else:
        failure = task.failure if task is not None else None
        failure_type = t.TOOL_ERROR if verdict == "tool-error" else failure
    code = task.code if task is not None else None
    if task is not None:  # its task's polls end with it
        task.open_calls.discard(call)
    call.ended(verdict, failure_type, may_have_run=isinstance(error, UnknownEffectError), code=code)


def session_closed(runtime: Runtime, session: object) -> list[ToolCall]:
    """`session` closed: each task-backed call still open on it ends (`left`), and the runtime lets
    the session go. Returns the calls ended, for the repeat guard's store."""
    calls = runtime.open_tasks.pop(session, None)
    ended = calls.all() if calls is not None else []
    for call in ended:
        left(call)
    return ended


class TaskPoll:
    """One `tasks/get` of an open task-backed call, as the HTTP seam's series sends it (the
    `attempt.AttemptsOwner` of its attempts): its attempts are `POST` spans under the call's span,
    written to a ledger of its own (a poll files no record)."""

    attempt: Attempt | None = None
    request_id: object = None  # its JSON-RPC id, once the HTTP seam saw it leave
    heard: Answer | None = None  # (no connection's stream carries a poll's answer: 2026-07-28 era)

    def __init__(self, runtime: Runtime, call: ToolCall) -> None:
        self.runtime, self.call, self.tool = runtime, call, call.tool
        self.call_span: CallSpan = call.call_span
        self.ledger = RequestReplay()

    def ended(self) -> None:
        """Its request is over (the SDK read its answer, or it failed): an attempt still awaiting its
        answer on its event stream (a server that answers polls so: rmcp) is settled now as what that
        stream said, its span ended, before its call may end."""
        attempt = self.attempt
        if attempt is not None and attempt.state != "done":
            attempt.abandon()


# The poll being sent in this context (the SDK carries the context into the task that POSTs it).
CURRENT_POLL: contextvars.ContextVar[TaskPoll | None] = contextvars.ContextVar(
    "otel_mcp_replay_task_poll", default=None
)


def _still_open(call: ToolCall) -> bool:
    """`call` is open yet: no other poll of its task (a handle's `status()` beside its `result()`)
    ended it meanwhile, nor its app's call, nor its session closing."""
    task = _task(call)
    return task is not None and call in task.open_calls


def status_seen(call: ToolCall, result: object) -> BaseException | None:
    """A poll of `call`'s task was answered with `result`: a terminal status ends every call open on
    that task. An answer that names another task is not this task's status: its status could not be
    read, and the call fails as when polling fails. Returns what the caller sees instead of `result`
    (None: `result` itself)."""
    status = getattr(result, "status", None)
    task = _task(call)
    if status not in t.TASK_STATUSES or not _still_open(call) or task is None:
        return None  # no task's answer, or another's ended it: nothing more to say
    named = getattr(result, "task_id", None)
    if type(named) is str and named != task.id:  # the server's mix-up: never this task's verdict
        error = UnknownEffectError(call.tool, task_id=task.id)  # its status could not be read
        error.__cause__ = foreign_task_answer()
        task_ended(call, "failed", error)
        return error
    for each in task.open_calls.of(task.id):
        _task_status(each, status, result)
    return None


def _task_status(call: ToolCall, status: t.TaskStatus, result: object) -> None:
    """`call`'s task was seen with `status`: the last status seen; a terminal status ends the call."""
    task = _task(call)
    assert task is not None  # an open task-backed call's
    task.status = status
    if status == "completed":
        inline = getattr(result, "result", None)
        is_error = inline.get("isError") if type(inline) is dict else getattr(inline, "is_error", None)
        task_ended(call, "tool-error" if is_error is True else "completed")
    elif status == "failed":
        error = getattr(result, "error", None)
        code = error.get("code") if type(error) is dict else getattr(error, "code", None)
        if type(code) is int:
            task.code = code
        task.failure = str(code) if type(code) is int else _NO_CODE
        task_ended(call, "failed")
    elif status == "cancelled":
        task.failure = t.TASK_CANCELLED
        task_ended(call, "failed")


def poll_failed(call: ToolCall, poll: TaskPoll, exc: BaseException) -> BaseException | None:
    """A poll of `call`'s task ended with `exc`: the call ends. Returns what the caller sees instead
    (None: `exc` itself, the caller's own cancellation or timeout, or the call ended meanwhile)."""
    if not _still_open(call):
        return None
    if isinstance(exc, anyio.get_cancelled_exc_class()) or LINE.is_callers_timeout(exc):
        task_ended(call, "failed", exc)  # it stopped waiting: the task may run on
        return None
    task = _task(call)
    error = UnknownEffectError(call.tool, task_id=task.id if task is not None else None)
    final_error = poll.ledger.final_error
    error.__cause__ = final_error if final_error is not None else exc
    task_ended(call, "failed", error)
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
