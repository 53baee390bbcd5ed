"""The skeleton: the least Python any implementation of the contract runs on a clean tool call.

What the floor (benchmarks/_floor.py) leaves out, the skeleton adds, and only that: the seams
where a call and its round begin (`Client.call_tool`, `ClientSession.call_tool`), the HTTP seam
that reads the request id from the POST's body, looks up its URL's declaration (the record's policy
and endpoint) and sends the attempt under its span (made current, the HTTP client's span's parent),
the count of the request reaching the connection (a request never sent has effect none), the answer
to that id found in the response (its JSON body read, or its event stream watched: a 200 is not the
answer), the attempt ended as its answer comes (with the HTTP conventions' request duration in the
suppressed HTTP instrumentation's place, when one is on), and the record, its values from outside
checked.
It is an optimistic lower bound, never a plugin: no law, no declarations, no budget, no
repeat guard, no redirects, no auth re-sends, no failure of any kind handled, no legacy SSE, and a
parser that trusts the stream. Whatever an implementation of the contract costs beyond the floor,
it costs at least what this does.
"""

from __future__ import annotations

import contextvars
import functools
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager, nullcontext
from operator import itemgetter
from typing import Any

import httpx2
import mcp.shared.jsonrpc_dispatcher
import wrapt  # type: ignore[import-untyped]
from mcp.client.client import Client
from mcp.client.session import ClientSession
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.context import _SUPPRESS_HTTP_INSTRUMENTATION_KEY
from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import INVALID_SPAN, Span, SpanKind, TracerProvider

from otel_mcp_replay import telemetry as t
from otel_mcp_replay.attempt import _http_instrumented
from otel_mcp_replay.call import hashed_session_id
from otel_mcp_replay.call_span import start_call_span
from otel_mcp_replay.endpoints import span_endpoint_of
from otel_mcp_replay.patches.libraries import json_message
from otel_mcp_replay.runtime import Instruments

Wrapped = Callable[..., Awaitable[Any]]


# The operation duration's attributes every clean call over HTTP has (its route's are the round's).
_OPERATION = {t.MCP_METHOD_NAME: t.TOOLS_CALL_METHOD, t.GEN_AI_OPERATION_NAME: t.EXECUTE_TOOL}


class _Round:
    """One round's request: its id, its one attempt, what is known of it."""

    __slots__ = ("attempt", "endpoint", "policy", "request_id", "route", "session", "span", "status", "wire")

    def __init__(self, span: Span, session: object) -> None:
        self.span = span  # the call's
        self.session = session
        self.request_id: object = None
        self.policy = self.endpoint = ""  # its URL's declaration's
        self.route: dict[str, str | int] = {}  # where its request went, as the metric says it
        self.attempt: Span | None = None
        self.status = 0
        self.wire = 0


class _Watch(httpx2.AsyncByteStream):
    """The response's event stream passed through; the answer to the round's id ends the attempt."""

    def __init__(self, inner: Any, ended: Callable[[], None], request_id: object) -> None:
        self.inner, self.ended, self.request_id = inner, ended, request_id

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self.inner:
            for line in chunk.splitlines():
                if line.startswith(b"data:"):
                    message = json_message(line[5:].lstrip())
                    if type(message) is dict and message.get("id") == self.request_id and "result" in message:
                        self.ended()
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


@contextmanager
def skeleton(
    tracer_provider: TracerProvider, meter_provider: MeterProvider, servers: dict[str, dict[str, Any]]
) -> Iterator[None]:
    """The skeleton's seams, while the block runs. `servers`: the declarations by URL (the plugin's
    `servers`); the record's policy and endpoint are the declaration's of the URL a POST goes to."""
    declarations = {url: (server["policy"], server["label"]) for url, server in servers.items()}
    tracer = tracer_provider.get_tracer(t.INSTRUMENTATION_NAME)
    instruments = Instruments.on(meter_provider.get_meter(t.INSTRUMENTATION_NAME))
    http = instruments.http
    current: contextvars.ContextVar[_Round | None] = contextvars.ContextVar("skeleton_round", default=None)
    # The app's call in progress: its round tells it its own, whose policy and route it is counted by.
    app: contextvars.ContextVar[list[_Round] | None] = contextvars.ContextVar("skeleton_app", default=None)
    session_key = os.urandom(32)
    endpoints: dict[str, Any] = {}  # the span endpoint of each URL, parsed once

    async def app_call(
        wrapped: Wrapped, instance: object, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        name = args[0] if args else kwargs["name"]
        span, _ = start_call_span(tracer, name)  # the plugin's: the same one SDK call
        token = otel_context.attach(trace.set_span_in_context(span))
        rounds: list[_Round] = []
        app_token = app.set(rounds)
        try:
            result = await wrapped(*args, **kwargs)
        finally:
            app.reset(app_token)
            otel_context.detach(token)
        (call,) = rounds
        span.set_attributes(
            {
                t.SENT: 1,
                t.EFFECT: "applied",
                t.VERDICT: "completed",
                t.MAY_HAVE_RUN: False,
                t.POLICY: call.policy,
                t.NETWORK_PROTOCOL_VERSION: "1.1",
            }
        )
        span.end()
        instruments.calls.add(
            1, {t.VERDICT: "completed", t.EFFECT: "applied", t.POLICY: call.policy, t.GEN_AI_TOOL_NAME: name}
        )
        return result

    async def round_call(
        wrapped: Wrapped, instance: object, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        name = args[0] if args else kwargs["name"]
        started = time.perf_counter_ns()
        call = _Round(trace.get_current_span(), instance)
        token = current.set(call)
        try:
            result = await wrapped(*args, **kwargs)
        finally:
            current.reset(token)
        # The round's request ended: its point of the operation duration, every attribute it has.
        metric = {**_OPERATION, t.GEN_AI_TOOL_NAME: name, **call.route}
        instruments.operation_duration.record((time.perf_counter_ns() - started) / 1e9, metric)
        outer = app.get()
        if outer is not None:
            outer.append(call)
        request_id = str(call.request_id)
        if not (name.isprintable() and request_id.isprintable() and 100 <= call.status <= 999):
            raise ValueError("record refused")
        call.span.add_event(
            t.RECORD_EVENT,
            {
                t.POLICY: call.policy,
                t.SENT: 1,
                t.EFFECT: "applied",
                t.VERDICT: "completed",
                t.MAY_HAVE_RUN: False,
                t.ENDPOINT: call.endpoint,
                t.OMITTED: 0,
                t.GEN_AI_TOOL_NAME: name,
                t.JSONRPC_REQUEST_ID: request_id,
                t.ROUND: 1,
                t.ATTEMPTS_STATUS: (call.status,),
                t.ATTEMPTS_FAILURE: ("",),
                t.ATTEMPTS_EFFECT: ("applied",),
                t.ATTEMPTS_PERMISSION: ("first",),
                t.ATTEMPTS_WAIT_MS: (0,),
            },
        )
        return result

    def send(
        wrapped: Wrapped, instance: object, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Awaitable[Any]:
        call = current.get()
        if call is None:
            return wrapped(*args, **kwargs)
        request = args[0] if args else kwargs["request"]
        body = json_message(request.content)
        if type(body) is not dict or body.get("method") != t.TOOLS_CALL_METHOD:
            return wrapped(*args, **kwargs)
        url = str(request.url)
        call.policy, call.endpoint = declarations[url]
        endpoint = endpoints.get(url)
        if endpoint is None:  # with its POST in the HTTP names in force, as the plugin's route holds it
            found = span_endpoint_of(url)
            endpoint = endpoints[url] = (found, *http.request(found))
        return attempt(call, body, request, endpoint, functools.partial(wrapped, *args, **kwargs))

    async def attempt(
        call: _Round, body: dict[str, Any], request: Any, where: Any, sending: Callable[[], Awaitable[Any]]
    ) -> Any:
        endpoint, post_span, post_metric = where
        call.request_id = request_id = body["id"]
        name = body["params"]["name"]
        version = getattr(call.session, "protocol_version", None)
        session_id = request.headers.get("mcp-session-id")
        attributes: dict[str, str | int] = {
            t.JSONRPC_REQUEST_ID: str(request_id),
            t.POLICY: call.policy,
            t.NETWORK_TRANSPORT: t.TCP,
            t.NETWORK_PROTOCOL_NAME: t.HTTP,
            t.SERVER_ADDRESS: endpoint.address,
            t.SERVER_PORT: endpoint.port,
            t.MCP_PROTOCOL_VERSION: version,
        }
        if session_id is not None:
            attributes[t.MCP_SESSION_ID] = hashed_session_id(session_key, session_id)
        call.span.set_attributes(attributes)
        call.route = {
            t.NETWORK_TRANSPORT: t.TCP,
            t.NETWORK_PROTOCOL_NAME: t.HTTP,
            t.NETWORK_PROTOCOL_VERSION: "1.1",
            t.MCP_PROTOCOL_VERSION: version,
            t.SERVER_ADDRESS: endpoint.address,
            t.SERVER_PORT: endpoint.port,
        }
        span = call.attempt = tracer.start_span(
            t.ATTEMPT_SPAN_NAME,
            trace.set_span_in_context(call.span),
            SpanKind.CLIENT,
            {**post_span, t.GEN_AI_TOOL_NAME: name, t.JSONRPC_REQUEST_ID: str(request_id), t.ATTEMPT: 1},
        )
        context = otel_context.set_value(
            _SUPPRESS_HTTP_INSTRUMENTATION_KEY, True, trace.set_span_in_context(span)
        )
        propagate.inject(request.headers, context=context)
        token = otel_context.attach(context)
        try:
            response = await sending()
        finally:
            otel_context.detach(token)
        call.status = status = response.status_code

        def ended() -> None:
            timed = post_metric if _http_instrumented() else None
            said = http.exchanged(status, "1.1", None, span, time.time_ns(), timed)
            span.set_attributes({**said, t.EFFECT: "applied"})
            span.end()
            instruments.attempts.add(1, {t.GEN_AI_TOOL_NAME: name})

        raw = response.headers.raw  # read as the plugin reads it: names lowered in C, no decoding
        content_type = dict(
            zip(map(bytes.lower, map(itemgetter(0), raw)), map(itemgetter(1), raw), strict=True)
        ).get(b"content-type", b"")
        if content_type.startswith(b"application/json"):
            message = json_message(await response.aread())
            if type(message) is dict and message.get("id") == request_id and "result" in message:
                ended()
        elif content_type.startswith(b"text/event-stream"):
            response.stream = _Watch(response.stream, ended, request_id)
        return response

    def reached_connection(
        wrapped: Wrapped, instance: object, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Awaitable[Any]:
        call = current.get()
        if call is not None and call.attempt is not None:
            call.wire += 1  # read only when an attempt fails (sent or not), which here none does
        return wrapped(*args, **kwargs)

    def sdk_span(wrapped: Any, instance: object, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        # The call span stands in for the SDK's own span of the round's tools/call.
        attributes = kwargs.get("attributes")
        if (
            current.get() is not None
            and type(attributes) is dict
            and attributes.get(t.MCP_METHOD_NAME) == t.TOOLS_CALL_METHOD
        ):
            return nullcontext(INVALID_SPAN)
        return wrapped(*args, **kwargs)

    seams = (
        (Client, "call_tool", app_call),
        (ClientSession, "call_tool", round_call),
        (httpx2.AsyncClient, "send", send),
        (httpx2.AsyncClient, "_send_single_request", reached_connection),
        (mcp.shared.jsonrpc_dispatcher, "otel_span", sdk_span),
    )
    originals = [(owner, name, owner.__dict__[name]) for owner, name, _ in seams]
    for owner, name, wrapper in seams:
        wrapt.wrap_function_wrapper(owner, name, wrapper)
    try:
        yield
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)
