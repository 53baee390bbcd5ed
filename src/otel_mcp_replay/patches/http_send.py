"""The seam where attempts happen: `AsyncClient.send` of the mcp line's HTTP client, for MCP POSTs.

Every other request of the process passes through untouched after two cheap checks. An MCP POST
is one made inside a tool call (the call rides the context), one that carries the streamable-HTTP
transport's Accept header, or one to the message endpoint a legacy-SSE stream announced (sse.py);
on mcp 1.x, while a call sent from a task of its own waits (patches/carrier.py), a JSON POST is
also read for its request. A repeat sends the same `Request` again: the same body bytes and
headers, with the client's auth flow run again for it.
A response that will not be delivered is closed. The code serves httpx2 (mcp 2.x) and httpx
(mcp 1.x) alike: what differs is the `HttpLibrary` bound in with the runtime.
"""

from __future__ import annotations

import contextvars
import functools
import time
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from itertools import repeat
from operator import is_, itemgetter
from types import ModuleType
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.context import _SUPPRESS_HTTP_INSTRUMENTATION_KEY
from opentelemetry.instrumentation.utils import is_instrumentation_enabled, suppress_instrumentation

from otel_mcp_replay.adapters import recognises_session_busy
from otel_mcp_replay.answers import AnswerWatch, Replay, answer_of, json_message
from otel_mcp_replay.call import CURRENT_CALL, Attempt, Route, ToolCall, route_of
from otel_mcp_replay.declaration import Declaration
from otel_mcp_replay.errors import RefusedError, RepeatRefusedError, ReplayUnavailableError
from otel_mcp_replay.law import (
    BUDGET,
    NOT_PERMITTED,
    PROTOCOL,
    Answer,
    Decision,
    Declined,
    Outcome,
    Permission,
    Repeat,
    Reply,
    Target,
    classify,
    permit,
    target_of,
)
from otel_mcp_replay.patches.carrier import Carriage, carried_call, sent_suppressed
from otel_mcp_replay.patches.sse import SseConnections, SseStream, watch_event_stream
from otel_mcp_replay.policy import ReplayPolicy, Wait
from otel_mcp_replay.runtime import Runtime
from otel_mcp_replay.telemetry import TOOLS_CALL_METHOD

_MAX_REFUSAL_BODY = 64 * 1024  # a refusal's body is read for its error code, never further
# How long a cut SSE POST's answer is awaited on the stream: a server that took the request answers
# there within milliseconds; past this the attempt's effect stays unknown.
SSE_ANSWER_GRACE_S = 1.0


@dataclass(frozen=True)
class HttpLibrary:
    """The names this seam uses of one HTTP client library (httpx2 and httpx share its API)."""

    module: ModuleType
    watch: type[AnswerWatch]  # AnswerWatch as that library's own async byte stream
    replay: type[Replay]  # Replay, the same
    # Never sent: the connection was not made, so the server cannot have run anything.
    not_sent: tuple[type[BaseException], ...]

    synthetic_status: int = 599  # the status of a synthetic JSON-RPC error answer (lines.Line)
    resolves_lost_answers: bool = True  # lines.Line: else a streamable session's calls keep their scope

    @classmethod
    def of(
        cls, module: ModuleType, synthetic_status: int = 599, resolves_lost_answers: bool = True
    ) -> HttpLibrary:
        watch = type("AnswerWatch", (AnswerWatch, module.AsyncByteStream), {})
        replay = type("Replay", (Replay, module.AsyncByteStream), {})
        not_sent = (
            module.ConnectError,
            module.ConnectTimeout,
            module.PoolTimeout,
            module.UnsupportedProtocol,
        )
        return cls(module, watch, replay, not_sent, synthetic_status, resolves_lost_answers)


def send(
    rt: Runtime,
    http: HttpLibrary,
    carriage: Carriage | None,  # mcp 1.x's carrier (patches/carrier.py); None on 2.x
    connections: SseConnections,  # the legacy-SSE connections watched (patches/sse.py)
    streamable_sessions: set[int],  # ids of the sessions seen speaking streamable HTTP (patches/session)
    wrapped: Callable[..., Awaitable[Any]],
    instance: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Awaitable[Any]:
    """The seam only routes: it hands back what the caller awaits, the client's own send for a
    request it passes through, else a protocol request's series (`_protocol_series`) or a tool
    call's (`_tool_series`). It is no coroutine itself: nothing of it is resumed at the awaits of
    the exchanges it routes."""
    request = args[0] if args else kwargs.get("request")
    call = CURRENT_CALL.get()
    # Inside a call, the call seam found instrumentation enabled in the context this one comes from.
    if not isinstance(request, http.module.Request) or (call is None and not is_instrumentation_enabled()):
        return wrapped(*args, **kwargs)
    if request.method != "POST":
        if request.method == "GET" and b"text/event-stream" in _accept_and_content_type(request.headers)[0]:
            return _event_stream(rt, http, connections, instance, request, wrapped(*args, **kwargs))
        return wrapped(*args, **kwargs)
    route = (rt, http, carriage, connections, streamable_sessions, call, request, wrapped, instance)
    if call is not None and call.attempt is not None and call.attempt.state == "redirected":
        # The next hop of a followed redirect: the same body, as a stream, read first.
        return _body_read(request, functools.partial(_post, *route, args, kwargs))
    return _post(*route, args, kwargs)


async def _event_stream(
    rt: Runtime,
    http: HttpLibrary,
    connections: SseConnections,
    instance: Any,
    request: Any,
    sending: Awaitable[Any],
) -> Any:
    call = CURRENT_CALL.get()
    return watch_event_stream(rt, http, connections, instance, request, await sending, call)


async def _body_read(request: Any, route: Callable[[], Awaitable[Any]]) -> Any:
    await request.aread()
    return await route()


def _post(
    rt: Runtime,
    http: HttpLibrary,
    carriage: Carriage | None,
    connections: SseConnections,
    streamable_sessions: set[int],
    call: ToolCall | None,  # the call in progress in the sender's context
    request: Any,  # the one the SDK handed the client (send read it from args or kwargs)
    wrapped: Callable[..., Awaitable[Any]],
    instance: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Awaitable[Any]:
    """A POST routed: passed through, or one of the two series."""
    if call is not None and id(call.session) in streamable_sessions:
        # A call's POST on a session seen speaking streamable HTTP is its transport's: never a
        # legacy-SSE message POST, its media types known (no header of the request is read).
        sse, streamable = None, True
        body = _json_body(http, request)
    else:
        # A message POST of a legacy-SSE connection: to the endpoint its stream announced.
        sse = connections.stream_for(instance, str(request.url)) if connections.by_client else None
        accept, content_type = _accept_and_content_type(request.headers)
        # The streamable-HTTP transport's signature: both media types in Accept (the spec requires it).
        streamable = b"text/event-stream" in accept and b"application/json" in accept
        if call is None and sse is None and not streamable and (carriage is None or not carriage.requests):
            return wrapped(*args, **kwargs)
        body = _json_body(http, request) if b"json" in content_type else None
    if type(body) is not dict or "method" not in body:
        unbound = call is not None and call.declaration is None  # the call's request not seen yet
        if body is None and unbound and (sse or streamable) and _unreadable_call(http, request):
            assert call is not None
            return _not_read(http, call, request)
        return wrapped(*args, **kwargs)  # a response to the server is never repeated
    url = str(request.url)
    # The legacy SSE transport's calls are declared under the URL the app connected to.
    declaration = sse.declaration if sse is not None else rt.servers.declaration_for(url)
    target = PROTOCOL
    if body.get("method") == TOOLS_CALL_METHOD and "id" in body:
        target = target_of(body, declaration, from_json=True)  # the body read once: its tool, its id, its key
    if (
        call is None
        and not streamable
        and carriage is not None
        and (carriage.requests or carriage.suppressed)
    ):
        # mcp 1.x: the legacy SSE transport POSTs from a task of its own (on a connection known or not)
        call = carried_call(carriage, target)
        if call is None and sent_suppressed(carriage, body):
            return _suppressed(wrapped, args, kwargs)
    # One exchange of this very request: the client's send as the SDK called it (no coroutine of
    # ours around it, so none is resumed at each of the exchange's awaits).
    exchange_once = functools.partial(wrapped, *args, **kwargs)
    if (
        call is not None
        and target.tool == call.tool
        and (call.declaration is None or call.request_id == target.request_id)
    ):
        # What the law says of a repeat after a cut: read by the answer watch (_read_reply).
        _AFTER_A_CUT[call] = NOT_PERMITTED if rt.fail_closed else permit(declaration, target, "network")
        return _tool_series(
            rt,
            http,
            call,
            request,
            url,
            body,
            declaration,
            target,
            exchange_once,
            sse,
            streamable,
            streamable_sessions,
        )
    # A tools/call outside call_tool (send_request, or a call begun before instrument()): the law
    # still holds for it, with nothing recorded.
    if sse is None and not streamable:
        return exchange_once()
    return _protocol_series(rt, declaration, target, url, exchange_once)


async def _suppressed(
    wrapped: Callable[..., Awaitable[Any]], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    with suppress_instrumentation():
        return await wrapped(*args, **kwargs)


async def _protocol_series(
    rt: Runtime,
    declaration: Declaration,
    target: Target,
    url: str,
    exchange_once: Callable[[], Awaitable[Any]],
) -> Any:
    """A request that runs no tool (or a tools/call outside call_tool, under the law, unrecorded):
    a 429 and the adapter's own refusal are asked again; a transport error is the SDK's, as it
    always was."""
    origin = rt.origin(url)  # whose bucket its attempts are charged to
    policy: ReplayPolicy | None = None  # made at the first failure, as a tool series' is
    latest: Any = None
    while True:
        if latest is not None:
            await latest.aclose()  # released before the next attempt is sent
        latest = await exchange_once()
        outcome = await _protocol_outcome(declaration, latest)
        rt.budgets.charge(origin, outcome)  # the endpoint's bucket, charged apart from the policy
        if outcome.failure is None:
            return latest  # nothing to decide
        if policy is None:
            policy = _policy(rt, declaration, target, origin)
        decision, policy = policy.after(outcome, rt.rng)
        if not isinstance(decision, Wait):
            return latest
        await anyio.sleep(decision.ms / 1000)


async def _protocol_outcome(declaration: Declaration, response: Any) -> Outcome:
    """What a protocol request's response came to, classified as any attempt's is (its body is not
    read: no answer is watched for)."""
    status = int(response.status_code)
    busy = (
        status != 429
        and declaration.adapter is not None
        and await _session_busy(declaration.adapter, response)
    )
    retry_after = response.headers.get("retry-after") if status == 429 or busy else None
    return classify(status, None, session_busy=busy, retry_after=retry_after, now_epoch_s=time.time())


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


# The request the client built last from a `json=` object, with that object (one tuple, swapped
# whole: a thread building meanwhile can only make the pair miss, never mismatch).
_NOTHING_BUILT: tuple[object, object] = (None, None)
_BUILT: list[tuple[object, object]] = [_NOTHING_BUILT]


def built(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
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
        _BUILT[0] = (request, message)
    return request


def _json_body(http: HttpLibrary, request: Any) -> object:
    """The request's JSON-RPC message: the dict it was built from (`built`), else its bytes parsed,
    of any size (no size lifts the law). None: it holds no JSON, or its body cannot be read."""
    built_from, message = _BUILT[0]
    if built_from is request:
        _BUILT[0] = _NOTHING_BUILT
        if type(message) is dict and _read_as_json(message):
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
    if not _str_keys(message):
        return False
    params = message.get("params")
    if type(params) is not dict:
        return True
    arguments = params.get("arguments") if _str_keys(params) else None
    return _str_keys(params) and (type(arguments) is not dict or _str_keys(arguments))


def _str_keys(level: dict[Any, Any]) -> bool:
    return all(map(is_, map(type, level), repeat(str)))  # in C: no key's own __eq__ runs


def _policy(rt: Runtime, declaration: Declaration, target: Target, origin: str) -> ReplayPolicy:
    # The retry budget is shared by every call to the endpoint's origin, as gRPC's is per server.
    endpoint_budget = rt.budgets.for_endpoint(origin)
    return ReplayPolicy(declaration, target, rt.settings, endpoint_budget, rt.fail_closed)


# -- a tool call's series --


async def _tool_series(
    rt: Runtime,
    http: HttpLibrary,
    call: ToolCall,
    request: Any,
    url: str,
    body: dict[str, Any],
    declaration: Declaration,
    target: Target,
    exchange_once: Callable[[], Awaitable[Any]],
    sse: SseStream | None,
    streamable: bool,
    streamable_sessions: set[int],
) -> Any:
    if sse is None and not streamable:  # answers not matched: its origin's strictest word holds
        declaration = rt.servers.strictest_on_origin(url)
        target = target_of(body, declaration, from_json=True)  # its key, as that declaration names it
    origin = rt.origin(url)  # the endpoint's, when undeclared; whose bucket the attempts are charged to
    if call.declaration is None:  # its first request (a redirect's next hop comes back here too)
        endpoint = sse.endpoint if sse is not None else declaration.label or origin
        call.bind(body["id"], declaration, endpoint, _route(rt, call, request, url, sse))
        if (
            streamable
            and sse is None
            and call.scope is not None
            and call.session is not None
            and http.resolves_lost_answers
        ):
            _seen_streamable(streamable_sessions, call.session)  # its next calls need no scope
        matched = sse is not None or streamable
        entry = declaration.tools.get(target.tool) if target.tool else None
        if (declaration.policy == "app-authorized" and not matched) or (
            entry is not None and entry.changes and not target.key_carried and rt.guard is not None
        ):
            refusal = await _refusal(rt, call, url, target, matched)
            if refusal is not None:
                repeat = isinstance(refusal, RepeatRefusedError)
                call.stop(refusal, declined="repeat-of-unknown" if repeat else None)
                if streamable and http.resolves_lost_answers:  # the SDK resolves this one request with it;
                    return _synthetic_error(
                        http, request, body["id"], "not sent"
                    )  # the call seam raises `refusal`
                # Nothing sent: the call's scope ends it (mcp 1.x would still be writing a synthetic
                # answer into a session the caller may be closing already).
                return http.module.Response(202, request=request)
    if sse is not None:  # its answer is awaited on the connection's stream
        sse.waiting[body["id"]] = call
        call.when_ended(functools.partial(sse.waiting.pop, body["id"], None))
    # One loop, read at once: open the attempt (its span), send it, classify what came back, charge
    # the endpoint's bucket, ask the policy, wait; the attempt ends (span, row) as the policy's word
    # on it is told (`decided`). The policy is made at the first failure: an answer decides nothing.
    watch_body = streamable and sse is None  # a 2xx's answer is watched for here, else on the SSE stream
    permission: Permission | None = None
    # The latest attempt's response, else its transport error: what the SDK is handed at the end.
    response: Any = None
    error: BaseException | None = None
    policy: ReplayPolicy | None = None
    try:
        while True:
            attempt = call.opened(permission)
            if response is not None:
                await response.aclose()  # a response that will not be delivered
            final, response, error = await _attempt(
                http, attempt, request, exchange_once, declaration, sse, watch_body
            )
            rt.budgets.charge(origin, final)
            if policy is None and final.failure is not None:
                policy = _policy(rt, declaration, target, origin)
            decision, policy = (None, None) if policy is None else policy.after(final, rt.rng)
            # A no-op for a redirect the client follows.
            attempt.exchanged(final, error, None if response is None else _http_version(response))
            if not isinstance(decision, Wait):
                attempt.decided(0, None if decision is None else decision.reason)
                break
            if not await call.wait_unless_abandoned(decision.ms):
                attempt.decided(0, BUDGET.reason)
                break
            attempt.decided(decision.ms, None)
            permission = decision.permission
    except BaseException:
        if sse is not None:
            sse.waiting.pop(body["id"], None)
        raise
    if call.abandoned and streamable and sse is None and response is not None and response.status_code >= 300:
        # The caller gave up (in a wait, or mid-exchange): no one waits for an answer. A refusal handed
        # to the SDK would tear mcp 1.x's whole session down under its other calls; a 202 ends it.
        await response.aclose()
        return http.module.Response(202, request=request)
    if (
        final.status == 0
        and error is not None
        and final.effect != "none"
        and declaration.policy == "app-authorized"
    ):
        # Fail this call, not the session: the SDK would tear the whole transport down.
        if sse is not None:  # the SDK would wait for an answer on the GET stream forever: end the call now
            sse.waiting.pop(body["id"], None)
            call.stop(error)
            return http.module.Response(202, request=request)
        return _synthetic_error(http, request, body["id"], "no response")
    if sse is not None and response is not None and not 200 <= response.status_code < 300:
        # The SDK's SSE writer would die on it, taking the session along, and the call would wait out
        # its timeout: end this call now with the server's refusal, as streamable HTTP does.
        sse.waiting.pop(body["id"], None)
        await response.aclose()
        call.stop(RefusedError(response.status_code))
        return http.module.Response(202, request=request)
    if response is None:
        assert error is not None  # an attempt without a response raised
        raise error
    if response.status_code >= 400:
        call.refused_with(response)  # its body, once the SDK read it, may be the server's JSON-RPC error
    return response


def _route(rt: Runtime, call: ToolCall, request: Any, url: str, sse: SseStream | None) -> Route:
    """Where the call's request goes, for its spans: read once per session and URL (the protocol
    version and the session id do not change once its calls begin)."""
    session = call.session
    known = rt.session_routes.get(session) if session is not None else None
    if known is not None and known[0] == url:
        found: Route = known[1]
        return found
    route = _read_route(rt, session, request, url, sse)
    if session is not None:
        rt.session_routes[session] = (url, route)
    return route


def _read_route(rt: Runtime, session: object, request: Any, url: str, sse: SseStream | None) -> Route:
    """The endpoint, the protocol version the session negotiated (2.x says; else the header the
    transport sends it in), the legacy-era session id."""
    version = getattr(session, "protocol_version", None)
    session_id: str | None = None
    for name, value in request.headers.raw:
        lowered = name.lower()
        if lowered == b"mcp-session-id":
            session_id = value.decode("latin-1")
        elif lowered == b"mcp-protocol-version" and type(version) is not str:
            version = value.decode("latin-1")
    if sse is not None and session_id is None:  # the legacy SSE transport's: in its message endpoint
        session_id = next(iter(parse_qs(urlsplit(url).query).get("session_id", ())), None)
    if version == "2026-07-28":
        session_id = None  # the conventions: no session id for 2026-07-28 calls
    version = version if type(version) is str else None
    return route_of(rt.session_key, rt.span_endpoint(url), version, session_id)


def _http_version(response: Any) -> str | None:
    """network.protocol.version of a response: `HTTP/1.1` -> `1.1`, `HTTP/2` -> `2`."""
    version = response.extensions.get("http_version")
    if version is None:
        return "1.1"  # what the client library itself reports without one
    text = version.decode("ascii", "replace") if isinstance(version, bytes) else str(version)
    return text.removeprefix("HTTP/")


async def _refusal(rt: Runtime, call: ToolCall, url: str, target: Target, matched: bool) -> Exception | None:
    """Why this call, of a changing tool without its key or on a connection whose answers cannot be
    matched, must not be sent at all, if it must not."""
    if not matched:
        return ReplayUnavailableError(call.tool)  # its answers could not be matched to it
    assert rt.guard is not None
    call.fingerprint = rt.guard.fingerprint(url.partition("?")[0], call.tool, target.arguments())
    if call.fingerprint is not None and await rt.guard.refuses_shared(
        call.fingerprint, repeat_confirmed=call.repeat_confirmed
    ):
        return RepeatRefusedError(call.tool)
    return None


def _followed(response: Any, request: Any) -> bool:
    """A redirect the client follows with the same request (307/308): the next hop is this attempt."""
    next_request = getattr(response, "next_request", None)
    return next_request is not None and next_request.method == request.method


async def _attempt(
    http: HttpLibrary,
    attempt: Attempt,
    request: Any,
    exchange_once: Callable[[], Awaitable[Any]],
    declaration: Declaration,
    sse: SseStream | None,
    watch_body: bool,
) -> tuple[Outcome, Any, BaseException | None]:
    """Send one attempt, under its span, the HTTP client span of its POST: its trace context goes in
    the POST's headers, and the HTTP client instrumentation makes no second span for it (OpenTelemetry's
    suppress-HTTP key, as the botocore instrumentation sets it under its client span)."""
    context = trace.set_span_in_context(attempt.span)
    context = otel_context.set_value(_SUPPRESS_HTTP_INSTRUMENTATION_KEY, True, context)
    propagate.inject(request.headers, context=context)
    token = otel_context.attach(context)
    try:
        outcome, response, error = await _tool_exchange(
            http, exchange_once, request, attempt, declaration, watch_body=watch_body
        )
    except BaseException:  # the caller gave up (or the client failed) mid-exchange
        attempt.abandon()
        raise
    finally:
        otel_context.detach(token)
    if 300 <= outcome.status < 400 and _followed(response, request):
        attempt.redirected(outcome.status)
        return outcome, response, error
    if sse is not None and outcome.status == 0 and outcome.effect == "unknown":
        # A POST cut after the server took it: its answer may come on the stream all the same.
        answer = await attempt.answer_within(SSE_ANSWER_GRACE_S)
        if answer is not None:  # it is the answer, whichever was told first
            outcome = outcome.after_stream(answer)
            response, error = http.module.Response(202, request=request), None
    return outcome, response, error


async def _tool_exchange(
    http: HttpLibrary,
    exchange_once: Callable[[], Awaitable[Any]],
    request: Any,
    attempt: Attempt,
    declaration: Declaration,
    *,
    watch_body: bool,
) -> tuple[Outcome, Any, BaseException | None]:
    """One attempt: what it came to, the response it got (None: none), and the error it raised."""
    exchanging = _EXCHANGING.set((attempt, request))
    try:
        response = await exchange_once()
    except Exception as exc:
        # Never sent: raised before the request reached the connection (its auth flow, an event hook,
        # building it: `reached_connection` never saw it), or the connection was never made.
        sent = attempt.wire > 1 or (attempt.wire == 1 and not isinstance(exc, http.not_sent))
        return classify(0, None, sent=sent), None, exc
    finally:
        _EXCHANGING.reset(exchanging)
    status = int(response.status_code)  # an IntEnum (HTTPStatus) is not a record's int
    busy = (
        status != 429
        and declaration.adapter is not None
        and await _session_busy(declaration.adapter, response)
    )
    reply: Reply | None = None
    if 200 <= status < 300 and not busy and watch_body:
        try:
            reply = await _read_reply(http, response, attempt)
        except http.module.TransportError as exc:  # the body was cut: as good as no response
            await response.aclose()
            return classify(status, "cut"), response, exc
    if status == 429 or busy:  # a refusal: its Retry-After is read, against the clock of now
        retry_after = response.headers.get("retry-after")
        outcome = classify(status, reply, session_busy=busy, retry_after=retry_after, now_epoch_s=time.time())
    else:
        outcome = classify(status, reply)
    if reply == "other" and http.resolves_lost_answers and declaration.policy == "app-authorized":
        # A whole JSON body without this id's answer: mcp 2.x would route it elsewhere and leave the
        # call waiting for its caller's timeout, where 1.x ends it at once (ToolCall.handled); the
        # call lacked its answer, so it ends now, as on 1.x: the SDK resolves it with this error,
        # which the call seam turns into UnknownEffectError.
        await response.aclose()
        response = _synthetic_error(http, request, attempt.call.request_id, "no answer to the request")
    return outcome, response, None


# The attempt whose request is being exchanged in this context, and that request, for
# `reached_connection` (the SDK's call to the client's send runs in this very task).
_EXCHANGING: contextvars.ContextVar[tuple[Attempt, Any] | None] = contextvars.ContextVar(
    "otel_mcp_replay_exchanging", default=None
)


def reached_connection(
    wrapped: Callable[..., Awaitable[Any]], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Awaitable[Any]:
    """`AsyncClient._send_single_request`: the one door from the client to its transport, past the
    auth flow and the event hooks, once per request that goes out (a redirect's hop, an auth flow's
    re-send). An attempt's request that passes here reached the connection, or tried to: a connection
    never made is told by its error (`HttpLibrary.not_sent`). Any other request passes straight on."""
    exchanging = _EXCHANGING.get()
    if exchanging is None:
        return wrapped(*args, **kwargs)
    attempt, request = exchanging
    going = args[0] if args else kwargs.get("request")
    if going is not request and not _same_message(going, request):
        return wrapped(*args, **kwargs)  # e.g. an OAuth flow's own request to its token endpoint
    return _hop(attempt, wrapped, args, kwargs)


async def _hop(
    attempt: Attempt, wrapped: Callable[..., Awaitable[Any]], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """One hop of `attempt`'s request to the connection: counted, its status kept."""
    if attempt.last_hop and not 300 <= attempt.last_hop < 400:  # not a redirect's next hop: a re-send
        attempt.resent_by_client(attempt.last_hop)
    attempt.wire += 1
    response = await wrapped(*args, **kwargs)
    attempt.last_hop = int(response.status_code)
    return response


def _same_message(going: Any, request: Any) -> bool:
    """An auth flow may send a copy of the request: the same method, URL and body is the same."""
    try:
        return bool(
            going.method == request.method and going.url == request.url and going.content == request.content
        )
    except Exception:  # a streaming body not read: not this attempt's request
        return False


async def _read_reply(http: HttpLibrary, response: Any, attempt: Attempt) -> Reply:
    """A 2xx: read a JSON answer now (so a cut body is a failure this series can still repeat), or
    watch an event stream for it as the SDK reads it."""
    content_type = response.headers.get("content-type", "").lower()  # the SDK reads it too
    if response.status_code == 202:
        return "accepted"
    if content_type.startswith("application/json"):
        content = await response.aread()  # a cut raises the client's TransportError
        found = answer_of(content)
        return found[1] if found is not None and found[0] == attempt.call.request_id else "other"
    if (
        content_type.startswith("text/event-stream")
        and response.headers.get("content-encoding", "identity").lower() in ("", "identity")
        and isinstance(response.stream, http.module.AsyncByteStream)
    ):
        request_id, transport_error = attempt.call.request_id, http.module.TransportError

        def on_answer(answer_id: object, kind: Answer) -> None:
            if answer_id == request_id:
                attempt.answered(kind)

        after_a_cut = _AFTER_A_CUT.get(attempt.call, NOT_PERMITTED)

        def on_end(error: BaseException | None) -> None:
            cut = error if isinstance(error, transport_error) else None
            if cut is not None and attempt.state == "awaiting" and isinstance(after_a_cut, Declined):
                attempt.declined = after_a_cut.reason  # why this cut is not repeated: the law's word
            attempt.stream_ended(cut)

        watch = http.watch(response.stream, on_answer, on_end)
        response.stream = watch
        if isinstance(after_a_cut, Repeat):
            return await _until_answer(http, response, watch, attempt)
        return "later"
    return "other"


# Per call, what the law says of a repeat after a `network` failure. Where it permits one, the
# call's event streams are read here until the answer (_until_answer), so a cut can be repeated.
_AFTER_A_CUT: weakref.WeakKeyDictionary[ToolCall, Decision] = weakref.WeakKeyDictionary()


async def _until_answer(http: HttpLibrary, response: Any, watch: AnswerWatch, attempt: Attempt) -> Reply:
    """Read an event stream here until the call's answer, the stream's end, or an event that asks
    the client something (the server waits for its answer: the SDK must see it now), then hand the
    SDK every byte read, unchanged, and the rest. A cut before any of them raises the client's
    TransportError here, before the SDK saw a byte: the attempt is `cut`, which the series repeats
    as the law permits, as it repeats a cut JSON body; once the SDK reads the stream, nothing can."""
    read: list[bytes] = []
    rest = watch.__aiter__()
    try:
        while attempt.early is None and not watch.asked:
            try:
                read.append(await rest.__anext__())
            except StopAsyncIteration:
                break
    except BaseException:  # cut, or the caller gave up: the response will not be delivered
        with anyio.CancelScope(shield=True):
            await response.aclose()
        raise
    response.stream = http.replay(read, rest, watch)
    if attempt.early is not None:
        return attempt.early  # the answer came whole: what it was is known now
    return "later" if watch.asked else "other"  # ended without the answer: a 2xx without it


async def _session_busy(adapter: str, response: Any) -> bool:
    async def body() -> bytes:
        length = response.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > _MAX_REFUSAL_BODY:
            return b""
        try:
            content: bytes = await response.aread()
            return content
        except Exception:  # the client's TransportError: no body is no refusal
            return b""

    return await recognises_session_busy(adapter, response.status_code, response.headers, body)


def _synthetic_error(http: HttpLibrary, request: Any, request_id: object, why: str) -> Any:
    """A JSON-RPC error the SDK resolves this one request with, instead of tearing down the session.

    Never a server's word. Under app-authorized the call seam turns the call's failure into
    `ReplayUnavailableError` or, when an attempt lacked an answer, `UnknownEffectError`.
    """
    body = {
        "jsonrpc": "2.0",
        "id": request_id,
        "error": {"code": -32000, "message": f"otel-mcp-replay: {why}"},
    }
    headers = {"content-type": "application/json"}
    return http.module.Response(http.synthetic_status, json=body, headers=headers, request=request)


def _seen_streamable(streamable_sessions: set[int], session: object) -> None:
    """`session` speaks streamable HTTP: remembered while it lives (the call seam's, bound in by
    instrument(): its calls need no scope to end them)."""
    key = id(session)
    if key not in streamable_sessions:
        streamable_sessions.add(key)
        weakref.finalize(session, streamable_sessions.discard, key)
