"""The plugin reads a tool call's event stream as the SDK reads it, every time (issue 40): random
JSON-RPC messages in random event-stream framings (CR, LF or CRLF line ends, comments, `event`,
`id` and `retry` fields, data over several lines, empty and priming events, a byte-order mark), cut
into random chunks, sent as they are or gzip- or deflate-encoded chunk by chunk, and sometimes cut
off. What the plugin says of "the answer to the request came, and it was a result or an error"
equals what the SDK's own transport delivers its session for that request, reading the same
response, whether the plugin's watch reads the events as the SDK's reader yields them or the
series first reads the stream ahead of the SDK (until_answer, where the law permits a repeat
after a cut); and a stream cut before the read-ahead saw its answer is one whose answer the SDK
would not have delivered either (so a repeat never follows a call the SDK saw answered).

The SDK's side is its transport's own `_handle_sse_response` (mcp's streamable-HTTP client, a
private method: this test pins it, and fails loudly if an upgrade moves it), with its reconnection
and its stand-in errors for a lost answer switched off: what is compared is what the server's
stream said. Run on both mcp lines (scripts/test-lines runs this file on 1.30).
"""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.instrumentation.utils import unwrap
from tests.support.streams import encoded
from wrapt import wrap_function_wrapper

from harness.client import http
from harness.sdk import LINE as SDK_LINE
from otel_mcp_replay.lines import LINE
from otel_mcp_replay.patches.libraries import HttpLibrary
from otel_mcp_replay.patches.wire import EventWatch, answers_request, events_read, until_answer

if SDK_LINE == 2:
    import mcp_types as types
    from mcp.shared.message import SessionMessage
else:  # mcp 1.x
    import mcp.types as types  # type: ignore[no-redef]
    from mcp.shared.message import SessionMessage  # type: ignore[no-redef,assignment]
from mcp.client.streamable_http import RequestContext, StreamableHTTPTransport

REQUEST_ID = 7
PARSE_ERROR = -32700  # the SDK's stand-in for a message it could not parse: never a server's code here


class Transport(StreamableHTTPTransport):
    """The SDK's transport with what lies beyond this one stream switched off: no reconnection (a
    new GET), no stand-in error for a lost answer."""

    async def _handle_reconnection(self, *args: Any, **kwargs: Any) -> None:
        return None

    async def _resolve_abandoned_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class Body(http.AsyncByteStream):  # type: ignore[misc,name-defined]
    """The chunks, then a clean end or (`cut`) the connection lost."""

    def __init__(self, chunks: list[bytes], cut: bool) -> None:
        self._chunks, self._cut = chunks, cut

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk
        if self._cut:
            raise http.ReadError("peer closed the connection")

    async def aclose(self) -> None:
        return None


def response(chunks: list[bytes], encoding: str | None, cut: bool) -> Any:
    headers = {"content-type": "text/event-stream"}
    if encoding is not None:
        headers["content-encoding"] = encoding
    request = http.Request("POST", "http://127.0.0.1:9/mcp")
    return http.Response(200, headers=headers, stream=Body(encoded(chunks, encoding), cut), request=request)


def request_message() -> Any:
    params = {"name": "search", "arguments": {"query": "q"}}
    message = types.JSONRPCRequest(jsonrpc="2.0", id=REQUEST_ID, method="tools/call", params=params)
    return SessionMessage(message if SDK_LINE == 2 else types.JSONRPCMessage(message))  # type: ignore[arg-type]


def answer_in(delivered: list[Any]) -> str | None:
    """What the SDK delivered its session as the answer to the request: "result", "error" or None."""
    for item in delivered:
        message = getattr(item, "message", None)
        message = getattr(message, "root", message)  # 1.x wraps each message
        if isinstance(message, types.JSONRPCResponse) and message.id == REQUEST_ID:
            return "result"
        if isinstance(message, types.JSONRPCError) and message.id == REQUEST_ID:
            if message.error.code == PARSE_ERROR:
                return None  # the SDK's own stand-in for an event it could not parse
            return "error"
    return None


async def sdk_delivers(target: Any) -> str | None:
    """The SDK's transport reads `target` as it reads a POST's event stream."""
    writer, reader = anyio.create_memory_object_stream[Any](1000)
    # No client: the transport would use one only to reconnect, switched off here.
    ctx = RequestContext(None, None, request_message(), None, writer)  # type: ignore[arg-type]
    await Transport("http://127.0.0.1:9/mcp")._handle_sse_response(target, ctx)
    writer.close()
    return answer_in([item async for item in reader])


async def both_readings(
    library: HttpLibrary, chunks: list[bytes], encoding: str | None, cut: bool, ahead: bool
) -> tuple[str | None, str | None, bool]:
    """(the plugin's reading, the SDK's delivery, the read-ahead raised a cut) for one response."""
    told: list[str] = []

    def on_answer(answer_id: object, kind: str) -> None:
        if answers_request(answer_id, REQUEST_ID):
            told.append(kind)

    target = response(chunks, encoding, cut)
    library.watch(target, EventWatch(on_answer))  # type: ignore[arg-type]
    if ahead:
        try:
            await until_answer(library, target)
        except http.TransportError:
            return None, None, True  # the series repeats it: the SDK reads nothing of this one
    delivered = await sdk_delivers(target)
    return (told[0] if told else None), delivered, False


@pytest.fixture(scope="module")
def library() -> Iterator[HttpLibrary]:
    """The SDK's event-stream reader wrapped by the plugin's seam, as instrument() wraps it."""
    library = HttpLibrary.of(http)
    module, name = LINE.event_reader
    wrap_function_wrapper(module, name, functools.partial(events_read, library.watched))
    try:
        yield library
    finally:
        owner, _, attr = name.rpartition(".")
        unwrap(getattr(__import__(module), owner), attr)


# -- the streams --

IDS = st.one_of(st.just(REQUEST_ID), st.integers(-3, 10**6), st.text("7abé", max_size=3))
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-9, 9) | st.text('xé"\\\n', max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text("ab", max_size=2), inner, max_size=2),
    max_leaves=5,
)
CODES = st.sampled_from([-32603, -32602, -32601, -32000, 1, 42])
MESSAGES = st.one_of(
    st.builds(lambda i, v: {"jsonrpc": "2.0", "id": i, "result": {"content": [], "v": v}}, IDS, VALUES),
    st.builds(
        lambda i, c, v: {"jsonrpc": "2.0", "id": i, "error": {"code": c, "message": "no", "data": v}},
        IDS,
        CODES,
        VALUES,
    ),
    st.builds(lambda v: {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"v": v}}, VALUES),
    st.builds(lambda i: {"jsonrpc": "2.0", "id": i, "method": "ping"}, IDS),
)
ENDS = st.sampled_from([b"\n", b"\r", b"\r\n"])


@st.composite
def data_lines(draw: st.DrawFn, message: dict[str, Any]) -> list[bytes]:
    """A message's JSON as one or more `data:` lines: in the servers' own compact form or spaced,
    split at the newlines of an indented form, or (sometimes) anywhere, which no reader can parse."""
    form = draw(st.sampled_from(["compact", "spaced", "indented", "split anywhere"]))
    ascii_only = draw(st.booleans())
    if form == "compact":
        text = json.dumps(message, separators=(",", ":"), ensure_ascii=ascii_only)
    else:
        text = json.dumps(message, indent=2 if form == "indented" else None, ensure_ascii=ascii_only)
    raw = text.encode()
    if form == "split anywhere" and len(raw) > 1:
        at = draw(st.integers(1, len(raw) - 1))
        parts = [raw[:at], raw[at:]]
    else:
        parts = raw.split(b"\n")
    return [(b"data: " if draw(st.booleans()) else b"data:") + part for part in parts]


@st.composite
def event(draw: st.DrawFn) -> list[bytes]:
    """One event's lines (its dispatching blank line last), or a comment, or a priming event."""
    kind = draw(st.sampled_from(["message", "message", "message", "priming", "comment", "empty data"]))
    if kind == "priming":  # SEP-1699, as rmcp sends it
        return [b"id: 0", b"retry: 3000", b"data:", b""]
    if kind == "comment":
        return [b": keep-alive", b""]
    lines: list[bytes] = []
    if draw(st.booleans()):
        lines.append(draw(st.sampled_from([b"event: message", b"event:message", b"event: other", b"event:"])))
    if draw(st.booleans()):
        lines.append(b"id: " + str(draw(st.integers(0, 99))).encode())
    if draw(st.booleans()):
        lines.append(b"retry: " + draw(st.sampled_from([b"0", b"10", b"x"])))
    if draw(st.booleans()):
        lines.append(b": a comment")
    lines += [b"data:"] if kind == "empty data" else draw(data_lines(draw(MESSAGES)))
    return [*lines, b""]


@st.composite
def streams(draw: st.DrawFn) -> tuple[list[bytes], str | None, bool]:
    """A whole stream's bytes, cut into chunks; its encoding; whether the connection is lost at its end."""
    lines = [line for one in draw(st.lists(event(), max_size=6)) for line in one]
    stream = b"\xef\xbb\xbf" if draw(st.integers(0, 9)) == 0 else b""
    stream += b"".join(line + draw(ENDS) for line in lines)
    if draw(st.booleans()):
        stream = stream[: draw(st.integers(0, len(stream)))]  # ends anywhere, mid-line or mid-event
    cuts = sorted(set(draw(st.lists(st.integers(0, len(stream)), max_size=6))))
    bounds = [0, *cuts, len(stream)]
    chunks = [stream[a:b] for a, b in itertools.pairwise(bounds) if b > a]
    return chunks, draw(st.sampled_from([None, "gzip", "deflate"])), draw(st.integers(0, 4)) == 0


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(streams())
def test_the_plugin_reads_the_answer_the_sdk_delivers(
    library: HttpLibrary, stream: tuple[list[bytes], str | None, bool]
) -> None:
    chunks, encoding, cut = stream

    async def readings() -> tuple[tuple[str | None, str | None, bool], ...]:
        return tuple([await both_readings(library, chunks, encoding, cut, ahead) for ahead in (False, True)])

    (told, delivered, _), (told_ahead, delivered_ahead, cut_ahead) = anyio.run(readings)
    assert told == delivered
    if cut_ahead:  # the read-ahead met the cut before any answer: the SDK would have delivered none
        assert delivered is None
    else:  # the bytes read ahead were handed on unchanged: the SDK delivers what it did without it
        assert (told_ahead, delivered_ahead) == (delivered, delivered)
