"""mcp 1.x only: carry the call from `call_tool` to the task that POSTs its request.

On 2.x the SDK itself runs each message's sending under the context it was sent from. On 1.x the
streamable-HTTP transport POSTs from a task it started when it was entered, so the call set in
`call_tool` is not there. The rule: a message sent on a session's write stream while a call is
current is remembered with that call (a carrier on the stream `ClientSession.__init__` is given),
and when the transport's `post_writer` takes it off the stream, that call becomes current in the
transport's task, before it starts the task that POSTs the message (which copies the context).
The task that POSTs a call's request also reads its response; when it ends, the call is told
(`ToolCall.handled`): 1.x leaves a call whose 2xx never brought its answer waiting, and the call
ends itself there. The legacy SSE transport POSTs from a closure's task no seam reaches: there the
HTTP seam asks `carried_call` for the call waiting with the request's id and tool. Both seams are
class attributes: import order cannot matter. What the carrier remembers is its own `Carriage`,
made by `instrument()` on 1.x only and bound into these seams: on 2.x none exists to be consulted.
"""

from __future__ import annotations

import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import wrapt
from opentelemetry.instrumentation.utils import is_instrumentation_enabled, suppress_instrumentation

from otel_mcp_replay.call import CURRENT_CALL, ToolCall
from otel_mcp_replay.law import Target
from otel_mcp_replay.patches import session
from otel_mcp_replay.runtime import Runtime
from otel_mcp_replay.telemetry import TOOLS_CALL_METHOD


@dataclass(frozen=True, eq=False)
class Carriage:
    """mcp 1.x: the messages sent during a call, kept for the task that POSTs them, with the runtime
    of the `instrument()` that made it."""

    runtime: Runtime
    # Messages sent during a call, by id, with that call.
    carried: dict[int, tuple[Any, Any]] = field(default_factory=dict)
    # ... and those sent while instrumentation was suppressed (weak: a message gone is forgotten,
    # whichever transport took it, or none).
    suppressed: weakref.WeakValueDictionary[int, Any] = field(default_factory=weakref.WeakValueDictionary)
    # ... and their tools/call requests by (JSON-RPC id, tool), for the legacy SSE transport's POSTs.
    requests: dict[tuple[Any, str], list[Any]] = field(default_factory=dict)


class StreamProxy(wrapt.ObjectProxy):  # type: ignore[misc,type-arg]
    """A proxy of an anyio stream that `async with` enters as itself: wrapt 1.x's ObjectProxy (the
    one opentelemetry-instrumentation < 0.62 allows) proxies no async protocol, and mcp 2.x's
    dispatcher enters its write stream."""

    async def __aenter__(self) -> Any:
        await self.__wrapped__.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> Any:
        return await self.__wrapped__.__aexit__(*exc)


class _Carrier(wrapt.ObjectProxy):  # type: ignore[misc,type-arg]
    """A session's write stream: each message sent during a call is remembered with it, and a tool
    call's request by its (id, tool) too, for the legacy SSE transport's POSTs."""

    def __init__(self, wrapped: Any, carriage: Carriage) -> None:
        super().__init__(wrapped)
        self._self_carriage = carriage

    async def send(self, item: Any) -> None:
        call = CURRENT_CALL.get()
        if call is not None:
            carriage, key = self._self_carriage, id(item)
            carriage.carried[key] = (item, call)
            call.when_ended(lambda: carriage.carried.pop(key, None))
            request = _request_of(item)
            if getattr(request, "method", None) == TOOLS_CALL_METHOD:
                by_request = (getattr(request, "id", None), call.tool)
                carriage.requests.setdefault(by_request, []).append(call)
                call.when_ended(lambda: _forget(carriage, by_request, call))
        elif not is_instrumentation_enabled():  # its POST is sent suppressed too (_Delivering)
            self._self_carriage.suppressed[id(item)] = item
        await self.__wrapped__.send(item)


def carried_call(carriage: Carriage, target: Target) -> ToolCall | None:
    """The call that sent this tools/call request (the legacy SSE transport POSTs it from a task of
    its own, where no call is current): the first still waiting with its id and tool. Two sessions
    sending the very same id and tool at once are told apart by order only."""
    if target.tool is None:
        return None
    waiting = carriage.requests.get((target.request_id, target.tool))
    return waiting.pop(0) if waiting else None


def sent_suppressed(carriage: Carriage, body: dict[str, Any]) -> bool:
    """Whether this request was sent while its sender suppressed instrumentation (the legacy SSE
    transport POSTs it from a task of its own, which no seam reaches to suppress): the first such
    message still alive with its id and method is taken."""
    suppressed = carriage.suppressed
    for key, item in list(suppressed.items()):  # only messages sent suppressed, not yet gone
        request = _request_of(item)
        if getattr(request, "id", None) == body.get("id") and getattr(request, "method", None) == body.get(
            "method"
        ):
            suppressed.pop(key, None)
            return True
    return False


def _request_of(item: Any) -> Any:
    """The JSON-RPC message a `SessionMessage` holds (1.x wraps it in a `RootModel`)."""
    return getattr(getattr(item, "message", None), "root", None)


def _call_of(carried: dict[int, tuple[Any, Any]], item: Any, *, take: bool) -> ToolCall | None:
    """The call that sent this very message (its id alone could be another's, once it is gone)."""
    found = carried.pop(id(item), None) if take else carried.get(id(item))
    return found[1] if found is not None and found[0] is item else None


def _forget(carriage: Carriage, key: tuple[Any, str], call: ToolCall) -> None:
    waiting = carriage.requests.get(key)
    if waiting is not None:
        if call in waiting:
            waiting.remove(call)
        if not waiting:
            del carriage.requests[key]


def send_request(
    carriage: Carriage,
    wrapped: Callable[..., Any],
    instance: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """`BaseSession.send_request`: a session made before instrument() never had its write stream
    given to a carrier (`session_init`); it is given one when it first sends during a call, so that
    call's POST is still known (`handle_post_request`; on SSE by its id and tool, `carried_call`).
    A tools/call sent past call_tool becomes a call of its own first (session.send_request)."""
    if (
        CURRENT_CALL.get() is None
        and is_instrumentation_enabled()
        and session.tool_of(args[0] if args else kwargs.get("request")) is not None
    ):
        return session.send_request(
            carriage.runtime,
            lambda *a, **k: _carried(carriage, wrapped, instance, a, k),
            instance,
            args,
            kwargs,
        )
    return _carried(carriage, wrapped, instance, args, kwargs)


def _carried(
    carriage: Carriage,
    wrapped: Callable[..., Any],
    instance: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    if CURRENT_CALL.get() is not None:
        stream = getattr(instance, "_write_stream", None)
        if stream is not None and not isinstance(stream, _Carrier):
            instance._write_stream = _Carrier(stream, carriage)
    return wrapped(*args, **kwargs)


async def handle_post_request(
    carriage: Carriage,
    wrapped: Callable[..., Any],
    instance: object,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """`StreamableHTTPTransport._handle_post_request(ctx)`, in the task that POSTs `ctx`'s message: a
    transport entered before instrument() takes its messages unwrapped (`post_writer`), so no call
    is current there; the call that sent this very message becomes current for its POST."""
    if CURRENT_CALL.get() is None:
        ctx = args[0] if args else kwargs.get("ctx")
        call = _call_of(carriage.carried, getattr(ctx, "session_message", None), take=False)
        if call is not None:
            token = CURRENT_CALL.set(call)
            try:
                return await wrapped(*args, **kwargs)
            finally:
                CURRENT_CALL.reset(token)
    return await wrapped(*args, **kwargs)


class _Delivering(StreamProxy):
    """The transport's end of that stream: the call of each message it takes becomes current, and
    instrumentation is suppressed while it takes one its sender sent suppressed (as 2.x's SDK sends
    each message under its sender's whole context)."""

    def __init__(self, wrapped: Any, carriage: Carriage) -> None:
        super().__init__(wrapped)
        self._self_carriage = carriage
        self._self_suppressing: Any = None  # the suppression entered for the last message, if any

    def __aiter__(self) -> _Delivering:
        return self

    async def __anext__(self) -> Any:
        item = await self.__wrapped__.__anext__()
        carriage = self._self_carriage
        CURRENT_CALL.set(_call_of(carriage.carried, item, take=True))
        suppressed = carriage.suppressed.pop(id(item), None) is item
        suppressing = self._self_suppressing
        if suppressed and suppressing is None:
            suppressing = self._self_suppressing = suppress_instrumentation()
            suppressing.__enter__()
        elif not suppressed and suppressing is not None:
            self._self_suppressing = None
            suppressing.__exit__(None, None, None)
        return item


class _Handling(wrapt.ObjectProxy):  # type: ignore[misc,type-arg]
    """The transport's task group: a task it starts for a message sent during a call (the POST and
    the reading of its response) tells the call when it ends, unless it failed (then the SDK tears
    the session down, and every call with it)."""

    def start_soon(self, func: Callable[..., Awaitable[Any]], *args: Any, name: object = None) -> Any:
        call = CURRENT_CALL.get()
        if call is None:
            return self.__wrapped__.start_soon(func, *args, name=name)

        async def handling() -> None:
            await func(*args)
            call.handled()

        return self.__wrapped__.start_soon(handling, name=name)


def session_init(
    carriage: Carriage,
    wrapped: Callable[..., Any],
    instance: object,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """`ClientSession(read_stream, write_stream, ...)`: its write stream carries calls."""
    carrier = _replaced(args, kwargs, 1, "write_stream", lambda s: _Carrier(s, carriage))
    return wrapped(*carrier, **kwargs)


def post_writer(
    carriage: Carriage,
    wrapped: Callable[..., Any],
    instance: object,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """`post_writer(client, write_stream_reader, read_stream_writer, write_stream, start_get_stream,
    tg)`: each message's call becomes current, and the task the message is sent from tells it when
    it ends."""
    args = _replaced(args, kwargs, 1, "write_stream_reader", lambda s: _Delivering(s, carriage))
    return wrapped(*_replaced(args, kwargs, 5, "tg", _Handling), **kwargs)


def _replaced(
    args: tuple[Any, ...], kwargs: dict[str, Any], index: int, name: str, replace: Callable[[Any], Any]
) -> tuple[Any, ...]:
    """The call's positional arguments with the one at `index` (or the keyword `name`) replaced; the
    keywords are replaced in place."""
    if len(args) > index:
        return (*args[:index], replace(args[index]), *args[index + 1 :])
    if name in kwargs:
        kwargs[name] = replace(kwargs[name])
    return args
