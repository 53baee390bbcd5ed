"""The seams where a tool call begins and ends: `ClientSession.call_tool`, and on mcp 2.x
`Client.call_tool`, the SDK's round driver (SEP-2322), whose rounds are one call.

It begins the call (its span, current in the context the SDK carries into the task that POSTs the
request), and when the call ends has it settled and filed. Under the app-authorized policy a
failure that lacked an answer reaches the caller as `UnknownEffectError`; every other outcome,
a caller's own cancellation or timeout above all, reaches the caller exactly as the SDK made it.
A call answered with a task (SEP-2663) goes on until its task ends (tasks.py): its polls, sent
through `ClientSession.send_request` by whichever client resolves the task, pass here under its span;
its session closing (`ClientSession.__aexit__`) ends it if nothing else did.
A round of a multi-round call is one `ClientSession.call_tool` of the driver's: its own request,
law and record, under the app's call span; a round that continues one answered with
`InputRequiredResult` is never refused as a repeat of it.
"""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable
from collections.abc import Set as AbstractSet
from typing import Any

import anyio
from opentelemetry import context as otel_context
from opentelemetry.instrumentation.utils import is_instrumentation_enabled

from otel_mcp_replay import tasks
from otel_mcp_replay.call import CURRENT_CALL, ToolCall
from otel_mcp_replay.call_span import AppCall
from otel_mcp_replay.errors import HEADER_MISMATCH, RepeatRefusedError
from otel_mcp_replay.guard import CONFIRMED, settle_shared
from otel_mcp_replay.runtime import Runtime
from otel_mcp_replay.telemetry import TASKS_GET_METHOD, TOOLS_CALL_METHOD

# The app's `Client.call_tool` in progress in this context (mcp 2.x), while its rounds are sent.
CURRENT_APP_CALL: contextvars.ContextVar[AppCall | None] = contextvars.ContextVar(
    "otel_mcp_replay_app_call", default=None
)


async def call_tool(
    runtime: Runtime,
    wrapped: Callable[..., Awaitable[Any]],
    instance: object,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    streamable_sessions: AbstractSet[int] = frozenset(),  # ids the HTTP seam saw speak streamable HTTP
) -> Any:
    name, arguments = _tool_and_arguments(args, kwargs)
    if type(name) is not str:
        return await wrapped(*args, **kwargs)
    app_call = outer = CURRENT_APP_CALL.get()
    # One of the app's call's rounds: the very arguments the app gave, on its Client's session (not
    # a call an input callback makes meanwhile).
    if app_call is not None and not (
        instance is app_call.session and name == app_call.tool and arguments is app_call.arguments
    ):
        app_call = None
    # A round's app call asked, in this very context, a moment ago (client_call_tool).
    if app_call is None and not is_instrumentation_enabled():
        return await wrapped(*args, **kwargs)
    continues = app_call is not None and app_call.continues
    # The HTTP seam reads the call's own flag (1.x sends from another task).
    call = ToolCall(runtime, name, instance, app_call, continues=continues)
    token = CURRENT_CALL.set(call)
    # What this call sends in turn (an in-process server's handler) is no round of the app's.
    app_token = CURRENT_APP_CALL.set(None) if outer is not None else None
    # The round after an InputRequiredResult answers the server's question: never a repeat (what
    # guard.repeat_confirmed() sets, set here only for such a round).
    confirmed = CONFIRMED.set(True) if continues else None
    otel_token = otel_context.attach(call.call_span.context)
    try:
        if id(instance) in streamable_sessions:  # no call of this session can need stopping
            result = await wrapped(*args, **kwargs)
        else:
            result = await _stoppable(call, wrapped, args, kwargs)
    except BaseException as exc:
        seen = await _failed(runtime, call, exc)
        if seen is None:
            raise
        raise seen from seen.__cause__
    finally:
        otel_context.detach(otel_token)
        if confirmed is not None:
            CONFIRMED.reset(confirmed)
        if app_token is not None:
            CURRENT_APP_CALL.reset(app_token)
        CURRENT_CALL.reset(token)
    if app_call is not None:
        app_call.mismatched = False
    if (
        getattr(result, "result_type", None) == "task"
        and (left := tasks.opened(runtime, call, result)) is not None
    ):  # a task: it ends as its task does
        await _tell_store_of(runtime, left)  # the calls the bound on open calls ended
        return result
    call.completed(result)
    if call.guarded is not None:
        await _tell_store(runtime, call)
    return result


async def _failed(runtime: Runtime, call: ToolCall, exc: BaseException) -> BaseException | None:
    """The SDK's call raised `exc`: the call ends; what its caller sees instead (None: `exc`)."""
    app_call = call.app_call
    # Whether the round before was rejected with HEADER_MISMATCH (read here, only when a round fails:
    # nothing else changes it while this round runs).
    after_mismatch = app_call is not None and app_call.mismatched
    if app_call is not None:
        app_call.mismatched = getattr(exc, "code", None) == HEADER_MISMATCH
    seen = call.failed(exc)
    if call.guarded is not None:
        await _tell_store(runtime, call)
    if after_mismatch and isinstance(seen, RepeatRefusedError):
        seen = RepeatRefusedError(call.tool, sdk_resend=True)  # the app called once: say what happened
    return seen


async def _tell_store(runtime: Runtime, call: ToolCall) -> None:
    """What the repeat guard remembered of this call, told to its shared store (if one is named),
    within the store's bound: a call that may have run arms it for every process, a completed one
    clears it."""
    await settle_shared(runtime.guard, call.guarded)


async def _tell_store_of(runtime: Runtime, calls: list[ToolCall]) -> None:
    """What the repeat guard remembered of each of these calls, which just ended, told to its store."""
    for call in calls:
        if call.guarded is not None:
            await _tell_store(runtime, call)


async def session_exit(
    runtime: Runtime,
    wrapped: Callable[..., Awaitable[Any]],
    instance: object,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """`ClientSession.__aexit__` (mcp 2.x): the session closed (its client's context exited, or, under
    fastmcp's `Client`, its session task ended with its transport): each task-backed call still open
    on it ends (tasks.session_closed), once its session's own exit is over, and the plugin lets the
    session go."""
    try:
        return await wrapped(*args, **kwargs)
    finally:
        await _tell_store_of(runtime, tasks.session_closed(runtime, instance))


async def client_call_tool(
    runtime: Runtime,
    wrapped: Callable[..., Awaitable[Any]],
    instance: object,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """`Client.call_tool` (mcp 2.x): one app-level call, however many rounds the SDK sends for it."""
    name, arguments = _tool_and_arguments(args, kwargs)
    if type(name) is not str or not is_instrumentation_enabled():
        return await wrapped(*args, **kwargs)
    try:
        session = instance.session  # type: ignore[attr-defined]
    except RuntimeError:  # not entered: the SDK raises its own error
        return await wrapped(*args, **kwargs)
    app_call = AppCall(runtime, name, arguments, session)
    token = CURRENT_APP_CALL.set(app_call)
    try:
        result = await wrapped(*args, **kwargs)
    except BaseException as exc:
        pending = app_call.ended(exc)  # a round handed on unended (a claimed result) ends with it
        if isinstance(pending, ToolCall):
            await _tell_store(runtime, pending)
        raise
    finally:
        CURRENT_APP_CALL.reset(token)
    pending = app_call.ended(None, result)
    if isinstance(pending, ToolCall):
        await _tell_store(runtime, pending)
    return result


def _tool_and_arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[object, object]:
    """The tool's name and its arguments, first in both `call_tool` signatures (ClientSession, Client)."""
    if len(args) > 1:  # both positional, as mcp 2.x's Client passes them on: the usual case first
        return args[0], args[1]
    return (args[0] if args else kwargs.get("name")), kwargs.get("arguments")


async def notify(
    wrapped: Callable[..., Awaitable[Any]], instance: object, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """`JSONRPCDispatcher.notify` (mcp 2.x): a caller that gives up on a call has the SDK send
    `notifications/cancelled` from the caller's own task, and wait (up to 5 s) for its transport to
    take it. On the legacy SSE transport that is the task running this call's series: so the call
    ends here, first, and a series waiting to repeat it stops and sends nothing more, instead of
    holding the caller's cancel for a Retry-After and then repeating a call no one waits for."""
    call = CURRENT_CALL.get()
    if (
        call is not None
        and (args[0] if args else kwargs.get("method")) == "notifications/cancelled"
        # The call's own session: an in-process server runs its handlers in the caller's context,
        # and cancels its own requests (to the client) through its own dispatcher.
        and getattr(call.session, "_dispatcher", None) is instance
    ):
        call.abandon()
    return await wrapped(*args, **kwargs)


async def _stoppable(
    call: ToolCall, wrapped: Callable[..., Awaitable[Any]], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """The SDK's call in a scope the HTTP seam can cancel (`ToolCall.stop`): on the legacy SSE
    transport, or a connection the plugin cannot match answers on, the SDK would wait for an answer
    that will never come. A session once seen speaking streamable HTTP, where the SDK resolves a
    failed request itself (mcp 2.x: `Line.resolves_lost_answers`), needs no scope (one costs about a
    tenth of the plugin's own work per call)."""
    with anyio.CancelScope() as scope:
        call.scope = scope  # (what `ToolCall.stop` cancels)
        result = await wrapped(*args, **kwargs)
    if scope.cancelled_caught and call.stopped_with is not None:
        raise call.stopped_with
    return result


def send_request(
    runtime: Runtime,
    wrapped: Callable[..., Awaitable[Any]],
    instance: object,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    streamable_sessions: AbstractSet[int] = frozenset(),
) -> Awaitable[Any]:
    """`ClientSession.send_request` (mcp 2.x; on 1.x the carrier's seam hands it here): a tools/call
    sent past call_tool, `session.send_request(CallToolRequest(...))`, is a call as call_tool's are
    (the call_tool seam runs it): its span, its record, the law, the repeat guard. Inside call_tool
    it is that call's own request, handed straight on (this seam is no coroutine: nothing of it is
    resumed while the SDK waits for the answer)."""
    if CURRENT_CALL.get() is not None:  # call_tool's own request (asked first: one lookup in C)
        return wrapped(*args, **kwargs)
    request = args[0] if args else kwargs.get("request")
    name = tool_of(request)
    if name is None:  # a poll of an open task-backed call's task is that call's (tasks.py)
        if getattr(request, "method", None) != TASKS_GET_METHOD:
            return wrapped(*args, **kwargs)
        return tasks.polled(runtime, instance, request, wrapped, args, kwargs)
    if not is_instrumentation_enabled():
        return wrapped(*args, **kwargs)

    async def sent(*_: Any, **__: Any) -> Any:
        return await wrapped(*args, **kwargs)

    return call_tool(runtime, sent, instance, (name,), {}, streamable_sessions)


def tool_of(request: object) -> str | None:
    """The tool a request object calls, if it is a tools/call that names one (1.x wraps each
    request in the ClientRequest union: its `root`)."""
    request = getattr(request, "root", request)
    if getattr(request, "method", None) != TOOLS_CALL_METHOD:
        return None
    name = getattr(getattr(request, "params", None), "name", None)
    return name if type(name) is str else None
