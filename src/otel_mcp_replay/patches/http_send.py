"""The seam where attempts happen: `AsyncClient.send` of the mcp line's HTTP client, for MCP POSTs.

The rule: this seam only routes. Every other request of the process passes through untouched after
two cheap checks. An MCP POST is one made inside a tool call (the call rides the context), one
that carries the streamable-HTTP transport's Accept header, or one to the message endpoint a
legacy-SSE stream announced (sse.py); on mcp 1.x, while a call sent from a task of its own waits
(patches/carrier.py), a JSON POST is also read for its request. Its body is read once, and the
request goes to a tool call's series, a task's poll's (a task-backed call's `tasks/get`, tasks.py) or
a protocol request's (series.py). A repeat sends the same `Request` again: the same body bytes and
headers, with the client's auth flow run again for it. As a request is about to leave, mcp 2.x's
dispatcher opens its client span for it (`sdk_span`): none for the call's own tools/call, whose
call span stands in.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from contextlib import nullcontext
from itertools import repeat
from operator import is_, itemgetter
from typing import Any, Final

from opentelemetry.instrumentation.utils import is_instrumentation_enabled, suppress_instrumentation
from opentelemetry.trace import INVALID_SPAN

from otel_mcp_replay.call import CURRENT_CALL, ToolCall
from otel_mcp_replay.errors import ReplayUnavailableError
from otel_mcp_replay.law import PROTOCOL, TASK_POLL, permit_on_network, target_of
from otel_mcp_replay.patches.carrier import carried_call, sent_suppressed
from otel_mcp_replay.patches.libraries import HttpLibrary, json_message
from otel_mcp_replay.patches.series import HttpSeam, SeamRequest, poll_series, protocol_series, tool_series
from otel_mcp_replay.patches.sse import SseStream, watch_event_stream
from otel_mcp_replay.tasks import CURRENT_POLL
from otel_mcp_replay.telemetry import MCP_METHOD_NAME, TASKS_GET_METHOD, TOOLS_CALL_METHOD


def send(
    seam: HttpSeam,
    builds: BuiltRequests,
    wrapped: Callable[..., Awaitable[Any]],
    instance: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Awaitable[Any]:
    """The seam only routes: it hands back what the caller awaits, the client's own send for a
    request it passes through, else a protocol request's series or a tool call's (series.py). It is
    no coroutine itself: nothing of it is resumed at the awaits of the exchanges it routes. `builds`:
    the request the build seam (`built`) kept last, bound in by instrument() with the same holder."""
    request = args[0] if args else kwargs.get("request")
    call = CURRENT_CALL.get()
    # Inside a call, the call seam found instrumentation enabled in the context this one comes from.
    if not isinstance(request, seam.http.module.Request) or (
        call is None and not is_instrumentation_enabled()
    ):
        return wrapped(*args, **kwargs)
    if request.method != "POST":
        if request.method == "GET" and b"text/event-stream" in _accept_and_content_type(request.headers)[0]:
            return _event_stream(seam, instance, request, wrapped(*args, **kwargs))
        return wrapped(*args, **kwargs)
    if call is not None and call.attempt is not None and call.attempt.state == "redirected":
        # The next hop of a followed redirect: the same body, as a stream, read first.
        return _body_read(
            request, functools.partial(_post, seam, builds, call, request, wrapped, instance, args, kwargs)
        )
    return _post(seam, builds, call, request, wrapped, instance, args, kwargs)


async def _event_stream(seam: HttpSeam, instance: Any, request: Any, sending: Awaitable[Any]) -> Any:
    call = CURRENT_CALL.get()
    return watch_event_stream(
        seam.runtime, seam.http, seam.connections, instance, request, await sending, call
    )


async def _body_read(request: Any, route: Callable[[], Awaitable[Any]]) -> Any:
    await request.aread()
    return await route()


def _post(
    seam: HttpSeam,
    builds: BuiltRequests,
    call: ToolCall | None,  # the call in progress in the sender's context
    request: Any,  # the one the SDK handed the client (send read it from args or kwargs)
    wrapped: Callable[..., Awaitable[Any]],
    instance: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Awaitable[Any]:
    """A POST routed: passed through, or one of the two series."""
    http, carriage = seam.http, seam.carriage
    if call is not None and id(call.session) in seam.streamable_sessions:
        # A call's POST on a session seen speaking streamable HTTP is its transport's: never a
        # legacy-SSE message POST, its media types known (no header of the request is read).
        sse, streamable = None, True
        body = _json_body(http, builds, request)
    else:
        accept, content_type = _accept_and_content_type(request.headers)
        # A message POST of a legacy-SSE connection: to the endpoint its stream announced (looked up
        # here, where the request is read, so that nothing of this seam is called after it).
        posts = seam.connections.by_client.get(id(instance))
        sse = posts.get(str(request.url)) if posts else None
        # The streamable-HTTP transport's signature: both media types in Accept (the spec requires it).
        streamable = b"text/event-stream" in accept and b"application/json" in accept
        if call is None and sse is None and not streamable and (carriage is None or not carriage.requests):
            return wrapped(*args, **kwargs)
        body = _json_body(http, builds, request) if b"json" in content_type else None
    if type(body) is not dict or "method" not in body:
        if _hides_its_call(http, call, request, body, sse, streamable):
            assert call is not None
            return _not_read(http, call, request)
        return wrapped(*args, **kwargs)  # a response to the server is never repeated
    return _request(seam, call, body, sse, streamable, functools.partial(wrapped, *args, **kwargs), request)


def _hides_its_call(
    http: HttpLibrary,
    call: ToolCall | None,
    request: Any,
    body: object,
    sse: SseStream | None,
    streamable: bool,
) -> bool:
    """A POST that holds no JSON-RPC request may yet hide its call's own tools/call, in a body that
    cannot be read, before the call's request was seen."""
    unbound = call is not None and call.declaration is None  # the call's request not seen yet
    return body is None and unbound and bool(sse or streamable) and _unreadable_call(http, request)


def _request(
    seam: HttpSeam,
    call: ToolCall | None,
    body: dict[str, Any],
    sse: SseStream | None,
    streamable: bool,
    exchange_once: Callable[[], Awaitable[Any]],
    request: Any,
) -> Awaitable[Any]:
    """A JSON-RPC request POSTed: its declaration and target read once, then its call's series, a
    protocol request's, or the client's own send."""
    runtime, carriage = seam.runtime, seam.carriage
    url = str(request.url)
    # The legacy SSE transport's calls are declared under the URL the app connected to.
    declaration = sse.declaration if sse is not None else runtime.servers.declaration_for(url)
    polled = False
    if "id" not in body:  # a notification: nothing of it for the law to read
        target = PROTOCOL
    else:  # a request, its body read once: its tool, its id, its key
        target = target_of(body, declaration, from_json=True)
        if target is PROTOCOL and body.get("method") == TASKS_GET_METHOD and (streamable or sse is not None):
            target, polled = TASK_POLL, True  # a poll is a pure read, as the law says
    if (
        call is None
        and not streamable
        and carriage is not None
        and (carriage.requests or carriage.suppressed)
    ):
        # mcp 1.x: the legacy SSE transport POSTs from a task of its own (on a connection known or not)
        call = carried_call(carriage, target)
        if call is None and sent_suppressed(carriage, body):
            return _suppressed(exchange_once)
    # The law's word on a network failure, asked once here, as the target was read.
    on_network = permit_on_network(declaration, target, runtime.fail_closed)
    req = SeamRequest(request, url, body, declaration, target, exchange_once, sse, streamable, on_network)
    if polled:
        poll = CURRENT_POLL.get()  # a poll of an open task-backed call's task (tasks.py)
        return protocol_series(seam, req) if poll is None else poll_series(seam, poll, req)
    if (
        call is not None
        and target.tool == call.tool
        and (call.declaration is None or call.request_id == target.request_id)
    ):
        return tool_series(seam, call, req)
    # A tools/call outside call_tool (send_request, or a call begun before instrument()): the law
    # still holds for it, with nothing recorded.
    if sse is None and not streamable:
        return exchange_once()
    return protocol_series(seam, req)


async def _suppressed(exchange_once: Callable[[], Awaitable[Any]]) -> Any:
    with suppress_instrumentation():
        return await exchange_once()


def _accept_and_content_type(headers: Any) -> tuple[bytes, bytes]:
    """Two request headers from the raw list (Headers.get would first decode every header of the
    request to learn their charset), each joined with ", " when repeated, as Headers.get joins."""
    raw = headers.raw
    # Built in C (no Python-level loop over the request's headers): names lowered, to their values.
    by_name = dict(zip(map(bytes.lower, map(itemgetter(0), raw)), map(itemgetter(1), raw), strict=True))
    if len(by_name) == len(raw):  # no header repeated: the usual case
        return by_name.get(b"accept", b""), by_name.get(b"content-type", b"")
    accept = b", ".join(value for key, value in raw if key.lower() == b"accept")
    return accept, b", ".join(value for key, value in raw if key.lower() == b"content-type")


_NOTHING_BUILT: Final[tuple[object, dict[Any, Any] | None]] = (None, None)


class BuiltRequests:
    """The request the client built last from a `json=` object, with that object: made by
    `instrument()` and bound into `built`, which fills it, and `send`, which takes it (one slot,
    the pair swapped whole: a thread building meanwhile can only make the pair miss, never mismatch)."""

    __slots__ = ("last",)

    def __init__(self) -> None:
        self.last: tuple[object, dict[Any, Any] | None] = _NOTHING_BUILT


def built(
    builds: BuiltRequests,
    wrapped: Callable[..., Any],
    instance: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """`AsyncClient.build_request`: a request built from a `json=` dict (the mcp SDK builds every
    message it POSTs so, on both lines) is kept with that dict until it is sent. Its bytes are that
    dict encoded, nothing else (no `content`, `data` or `files` beside it): the law reads the
    request's id, tool and key from the dict, and never parses the bytes again, whatever their size."""
    request = wrapped(*args, **kwargs)
    message = kwargs.get("json")
    if (
        type(message) is dict
        and kwargs.get("content") is None
        and not kwargs.get("data")
        and not kwargs.get("files")
    ):
        builds.last = (request, message)
    return request


def _json_body(http: HttpLibrary, builds: BuiltRequests, request: Any) -> object:
    """The request's JSON-RPC message: the dict it was built from (`built`), else its bytes parsed,
    of any size (no size lifts the law). None: it holds no JSON, or its body cannot be read."""
    built_from, message = builds.last
    if built_from is request and message is not None:  # (a request is kept only with a dict: `built`)
        builds.last = _NOTHING_BUILT
        if _read_as_json(message):
            return message
    try:
        content = request.content
    except http.module.RequestNotRead:
        return None
    return json_message(content)


def _unreadable_call(http: HttpLibrary, request: Any) -> bool:
    """A POST of a call's that may carry its tools/call, and whose body cannot be read as JSON."""
    try:
        content = request.content
    except http.module.RequestNotRead:
        return True  # a streamed body: what it carries cannot be known before it is sent
    return b"tools/call" in content


async def _not_read(http: HttpLibrary, call: ToolCall, request: Any) -> Any:
    """Fail closed before sending: the call ends with an error that says its request could not be
    read (the SDK is handed a 202, which ends nothing else; the call seam raises the error)."""
    call.stop(ReplayUnavailableError(call.tool, unreadable=True))
    return http.module.Response(202, request=request)


def _read_as_json(message: dict[Any, Any]) -> bool:
    """The levels of `message` the law reads (the request, its params, their arguments) have only
    exact str keys, as a parsed JSON text's have: then it reads them as it reads parsed JSON."""
    # Each level's keys checked in C (no key's own __eq__ runs), inline: no frame per level.
    if not all(map(is_, map(type, message), repeat(str))):
        return False
    params = message.get("params")
    if type(params) is not dict:
        return True
    if not all(map(is_, map(type, params), repeat(str))):
        return False
    arguments = params.get("arguments")
    return type(arguments) is not dict or all(map(is_, map(type, arguments), repeat(str)))


def sdk_span(
    wrapped: Callable[..., Any], instance: object, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """`otel_span` as mcp 2.x's dispatcher opens its client span for a request it sends: for the
    tools/call of the call in progress, none is made. The call's span, current here, is that
    call's MCP client span: the trace context the SDK puts into the request's `_meta` is the call
    span's, and the server's span its child. Every other request keeps the SDK's own span."""
    call = CURRENT_CALL.get()
    if call is not None and call.request_id is None:
        name = args[0] if args else kwargs.get("name")
        attributes = kwargs.get("attributes")
        if (
            type(attributes) is dict
            and attributes.get(MCP_METHOD_NAME) == TOOLS_CALL_METHOD
            and name == f"{_SDK_SPAN_PREFIX}{call.tool}"
        ):
            return _NO_SPAN
    return wrapped(*args, **kwargs)


# The SDK's name for its client span of a tools/call (mcp/shared/jsonrpc_dispatcher.py).
_SDK_SPAN_PREFIX = f"MCP send {TOOLS_CALL_METHOD} "
# What the SDK enters instead of its span: one for every call (a nullcontext holds nothing of a use).
_NO_SPAN: Final = nullcontext(INVALID_SPAN)
