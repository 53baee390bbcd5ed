"""The seam where attempts happen: `httpx2.AsyncClient.send`, for MCP message POSTs only.

Every other request of the process passes through untouched after two cheap checks. An MCP POST
is one made inside a tool call (the call's state rides the context) or one that carries the
streamable-HTTP transport's Accept header, or one of a client the SSE transport built. A repeat
sends the same `httpx2.Request` again: the same body bytes and headers, with the client's auth
flow run again for it. A response that will not be delivered is closed.
"""

from __future__ import annotations

import functools
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import httpx2
from opentelemetry import context as otel_context
from opentelemetry.instrumentation.utils import is_instrumentation_enabled

from otel_mcp_replay import runtime as _runtime
from otel_mcp_replay.adapters import recognises_session_busy
from otel_mcp_replay.budget import retry_after_ms
from otel_mcp_replay.calls import CURRENT_CALL, CallState, ToolRequest
from otel_mcp_replay.declaration import Declaration, origin_of
from otel_mcp_replay.law import PROTOCOL, Effect, Target, target_of
from otel_mcp_replay.ledger import AnswerWatch, answer_of, json_message
from otel_mcp_replay.series import NoLog, Outcome, SeriesRules, run_series

# Clients the SSE transport built (marked by the sse_client patch): their GET stream carries answers.
SSE_CLIENTS: weakref.WeakSet[httpx2.AsyncClient] = weakref.WeakSet()
# Tool requests awaiting an answer on an SSE client's GET stream, by (client, JSON-RPC id).
SSE_WAITING: dict[tuple[int, object], ToolRequest] = {}

_MAX_JSON_BODY = 8 * 1024 * 1024  # a request body past this is not parsed: it passes through
_MAX_REFUSAL_BODY = 64 * 1024  # a refusal's body is read for its error code, never further
# Never sent: the connection was not made, so the server cannot have run anything.
_NOT_SENT = (httpx2.ConnectError, httpx2.ConnectTimeout, httpx2.PoolTimeout, httpx2.UnsupportedProtocol)


async def send(
    wrapped: Callable[..., Awaitable[httpx2.Response]],
    instance: httpx2.AsyncClient,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> httpx2.Response:
    rt = _runtime.current()
    request = args[0] if args else kwargs.get("request")
    if rt is None or not isinstance(request, httpx2.Request) or not is_instrumentation_enabled():
        return await wrapped(*args, **kwargs)
    if request.method != "POST":
        if request.method == "GET" and instance in SSE_CLIENTS:
            return _watch_sse_get(instance, await wrapped(*args, **kwargs))
        return await wrapped(*args, **kwargs)
    call = CURRENT_CALL.get()
    sse = bool(SSE_CLIENTS) and instance in SSE_CLIENTS
    accept, content_type = _accept_and_content_type(request.headers)
    # The streamable-HTTP transport's signature: both media types in Accept (the spec requires it).
    streamable = b"text/event-stream" in accept and b"application/json" in accept
    if call is None and not sse and not streamable:
        return await wrapped(*args, **kwargs)
    body = _json_body(request) if b"json" in content_type else None
    if type(body) is not dict or "method" not in body:
        return await wrapped(*args, **kwargs)  # a response to the server is never repeated
    rest = dict(kwargs)
    rest.pop("request", None)
    url = str(request.url)
    declaration = rt.servers.resolve(url)

    async def exchange_once() -> httpx2.Response:
        return await wrapped(request, *args[1:], **rest)

    target = PROTOCOL
    if body.get("method") == "tools/call" and "id" in body:
        if call is not None and _is_this_call(call, body):
            return await _tool_series(
                rt, call, instance, request, url, body, declaration, exchange_once, sse, streamable
            )
        # A tools/call outside call_tool (send_request, or a call begun before instrument()):
        # the law still holds for it, with nothing recorded.
        target = target_of(body, declaration)
    if not (sse or streamable):
        return await exchange_once()
    rules = _rules(rt, declaration, target, url)
    final = await run_series(rules, _protocol_exchange(exchange_once), _discard, _sleep, NoLog())
    return _deliver(final)


def _accept_and_content_type(headers: httpx2.Headers) -> tuple[bytes, bytes]:
    """Two request headers from the raw list (Headers.get would first decode every header of the
    request to learn their charset), each joined with ", " when repeated, as Headers.get joins."""
    raw = headers.raw
    by_name = {key.lower(): value for key, value in raw}
    if len(by_name) == len(raw):  # no header repeated: the usual case
        return by_name.get(b"accept", b""), by_name.get(b"content-type", b"")
    accept = b", ".join(value for key, value in raw if key.lower() == b"accept")
    return accept, b", ".join(value for key, value in raw if key.lower() == b"content-type")


def _json_body(request: httpx2.Request) -> object:
    try:
        content = request.content
    except httpx2.RequestNotRead:
        return None
    if len(content) > _MAX_JSON_BODY:
        return None
    return json_message(content)


def _is_this_call(call: CallState, body: dict[str, Any]) -> bool:
    params = body.get("params")
    name = params.get("name") if type(params) is dict else None
    if name != call.tool:
        return False
    bound = call.request
    return bound is None or bound.request_id == body["id"]


@functools.lru_cache(maxsize=256)
def _origin(url: str) -> str:
    # Parsed once per endpoint, not per request: an app talks to a handful of endpoints.
    return origin_of(url)


def _rules(rt: _runtime.Runtime, declaration: Declaration, target: Target, url: str) -> SeriesRules:
    # The retry budget is shared by every call to the endpoint's origin, as gRPC's is per server.
    endpoint_budget = rt.budgets.for_endpoint(_origin(url))
    return SeriesRules(declaration, target, rt.settings, endpoint_budget, rt.fail_closed, rt.rng)


# -- a tool call's series --


async def _tool_series(
    rt: _runtime.Runtime,
    call: CallState,
    client: httpx2.AsyncClient,
    request: httpx2.Request,
    url: str,
    body: dict[str, Any],
    declaration: Declaration,
    exchange_once: Callable[[], Awaitable[httpx2.Response]],
    sse: bool,
    streamable: bool,
) -> httpx2.Response:
    tool_request = call.request
    if tool_request is None:
        endpoint = declaration.label or _origin(url)
        tool_request = call.bind(body["id"], declaration, endpoint)
    target: Target = target_of(body, declaration)
    if declaration.policy == "app-authorized" and not (sse or streamable):
        # Answers on this connection cannot be matched to requests: refuse before sending.
        call.unavailable = True
        return _synthetic_error(request, body["id"], "replay unavailable")
    key = (id(client), body["id"])
    if sse:
        SSE_WAITING[key] = tool_request
        tool_request.sse_key = key
    rules = _rules(rt, declaration, target, url)
    watch_body = streamable and not sse  # a body this transport's SDK code reads as the answer

    async def exchange(number: int) -> Outcome:
        attempt_context = tool_request.attempt_context()
        token = otel_context.attach(attempt_context) if attempt_context is not None else None
        try:
            outcome = await _tool_exchange(exchange_once, tool_request, declaration, watch_body, sse)
        except BaseException:  # the caller gave up (or the client failed) mid-exchange
            tool_request.cut_short()
            raise
        finally:
            if token is not None:
                otel_context.detach(token)
        tool_request.exchanged(outcome)
        return outcome

    try:
        final = await run_series(rules, exchange, _discard, call.wait_unless_given_up, tool_request)
    except BaseException:
        SSE_WAITING.pop(key, None)
        raise
    if final.status == 0 and final.error is not None and declaration.policy == "app-authorized":
        # Fail this call, not the session: the SDK would tear the whole transport down.
        SSE_WAITING.pop(key, None)
        if sse:
            call.fail_without_answer(final.error)
            return httpx2.Response(202, request=request)
        return _synthetic_error(request, body["id"], "no response")
    return _deliver(final)


async def _tool_exchange(
    exchange_once: Callable[[], Awaitable[httpx2.Response]],
    tool_request: ToolRequest,
    declaration: Declaration,
    watch_body: bool,
    sse: bool,
) -> Outcome:
    try:
        response = await exchange_once()
    except httpx2.TransportError as exc:
        effect: Effect = "none" if isinstance(exc, _NOT_SENT) else "unknown"
        return Outcome(0, "network", effect, error=exc, ended_ns=time.time_ns())
    status = response.status_code
    outcome = Outcome(status, None, None, payload=response)
    if status == 429:
        outcome.failure, outcome.effect = "throttle", "unknown"
        outcome.server_wait_ms = retry_after_ms(response.headers.get("retry-after"), time.time())
    elif declaration.adapter is not None and await _session_busy(declaration.adapter, response):
        outcome.failure, outcome.effect = "session-busy", "unknown"
        outcome.server_wait_ms = retry_after_ms(response.headers.get("retry-after"), time.time())
    elif status >= 400:
        outcome.failure, outcome.effect = "error", "unknown"
    elif sse and status == 202:
        pass  # the SSE transport's answer comes on the GET stream: the ledger waits for it
    elif 200 <= status < 300 and watch_body:
        await _read_answer(response, outcome, tool_request)
    elif 200 <= status < 300:
        pass
    else:
        outcome.effect = "unknown"  # a redirect the transport may follow: its own attempt follows
    outcome.ended_ns = time.time_ns()
    return outcome


async def _read_answer(response: httpx2.Response, outcome: Outcome, tool_request: ToolRequest) -> None:
    """A 2xx: read a JSON answer now (so a cut body is a failure this series can still repeat), or
    watch an event stream for it as the SDK reads it."""
    content_type = response.headers.get("content-type", "").lower()  # the SDK reads it too
    if response.status_code == 202:
        outcome.failure, outcome.effect = "network", "unknown"  # accepted, and no answer will follow
    elif content_type.startswith("application/json"):
        try:
            content = await response.aread()
        except httpx2.TransportError as exc:
            await response.aclose()
            outcome.failure, outcome.effect, outcome.error = "network", "unknown", exc
            outcome.status = 0  # the response never arrived whole: as good as none
            return
        found = answer_of(content)
        if found is not None and found[0] == tool_request.request_id:
            tool_request.facts.answered()
            if found[1] == "result":
                outcome.effect = "applied"
            else:
                outcome.failure, outcome.effect = "error", "unknown"
        else:
            outcome.failure, outcome.effect = "error", "unknown"
    elif (
        content_type.startswith("text/event-stream")
        and response.headers.get("content-encoding", "identity").lower() in ("", "identity")
        and isinstance(response.stream, httpx2.AsyncByteStream)
    ):
        response.stream = AnswerWatch(response.stream, _answer_for(tool_request), _end_for(tool_request))
    else:
        outcome.failure, outcome.effect = "error", "unknown"


def _answer_for(tool_request: ToolRequest) -> Callable[[object, Any], None]:
    def on_answer(request_id: object, kind: Any) -> None:
        if request_id == tool_request.request_id:
            tool_request.answered(kind)

    return on_answer


def _end_for(tool_request: ToolRequest) -> Callable[[BaseException | None], None]:
    def on_end(error: BaseException | None) -> None:
        tool_request.stream_ended(error if isinstance(error, httpx2.TransportError) else None)

    return on_end


async def _session_busy(adapter: str, response: httpx2.Response) -> bool:
    async def body() -> bytes:
        length = response.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > _MAX_REFUSAL_BODY:
            return b""
        try:
            return await response.aread()
        except httpx2.TransportError:
            return b""

    return await recognises_session_busy(adapter, response.status_code, response.headers, body)


# -- protocol requests: a 429 is asked again, nothing is recorded --


def _protocol_exchange(
    exchange_once: Callable[[], Awaitable[httpx2.Response]],
) -> Callable[[int], Awaitable[Outcome]]:
    async def exchange(number: int) -> Outcome:
        response = await exchange_once()  # a transport error is the SDK's, as it always was
        if response.status_code == 429:
            wait = retry_after_ms(response.headers.get("retry-after"), time.time())
            return Outcome(429, "throttle", "unknown", server_wait_ms=wait, payload=response)
        return Outcome(response.status_code, None, "unknown", payload=response)

    return exchange


# -- delivering and discarding --


def _deliver(final: Outcome) -> httpx2.Response:
    if isinstance(final.payload, httpx2.Response):
        return final.payload
    assert final.error is not None
    raise final.error


async def _discard(outcome: Outcome) -> None:
    if isinstance(outcome.payload, httpx2.Response):
        await outcome.payload.aclose()


async def _sleep(delay_ms: int) -> bool:
    await anyio.sleep(delay_ms / 1000)
    return True


def _synthetic_error(request: httpx2.Request, request_id: object, why: str) -> httpx2.Response:
    """A JSON-RPC error the SDK resolves this one request with, instead of tearing down the session.

    Never a server's word: the call patch replaces it with `UnknownEffectError` or
    `ReplayUnavailableError` before the caller sees it.
    """
    body = {
        "jsonrpc": "2.0",
        "id": request_id,
        "error": {"code": -32000, "message": f"otel-mcp-replay: {why}"},
    }
    return httpx2.Response(599, json=body, headers={"content-type": "application/json"}, request=request)


# -- the SSE transport's GET stream: where its answers arrive --


def _watch_sse_get(client: httpx2.AsyncClient, response: httpx2.Response) -> httpx2.Response:
    client_id = id(client)

    def on_answer(request_id: object, kind: Any) -> None:
        waiting = SSE_WAITING.pop((client_id, request_id), None)
        if waiting is not None:
            waiting.answered(kind)

    def on_end(error: BaseException | None) -> None:
        for key in [key for key in SSE_WAITING if key[0] == client_id]:
            SSE_WAITING.pop(key).stream_ended(None)

    event_stream = response.headers.get("content-type", "").lower().startswith("text/event-stream")
    if event_stream and isinstance(response.stream, httpx2.AsyncByteStream):
        response.stream = AnswerWatch(response.stream, on_answer, on_end)
    return response
