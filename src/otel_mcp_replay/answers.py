"""What a response says of the JSON-RPC answer to a request id, read as the SDK reads it.

An HTTP status is not the call's answer: a 200 event stream can end without it. The answer is read
from the body as the HTTP client decoded it (any Content-Encoding it decodes), and on an event
stream from the events as the SDK's own reader parses them (`EventWatch`): the plugin parses no
event stream by hand. Nothing here changes a byte, and no size turns the reading off: an event of
any size the SDK reads is read, and a message's JSON is parsed whole by the parser the SDK itself
uses (pydantic's), whose cost per byte is small, and read as the SDK's models read it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, MutableMapping
from typing import Any, Final

from otel_mcp_replay.evidence import Answer
from otel_mcp_replay.lines import LINE

_fast_json: Callable[..., Any] | None
try:  # the Rust JSON parser pydantic (so the mcp SDK) parses every message with: wherever mcp is
    from pydantic_core import from_json as _fast_json
except ImportError:  # pragma: no cover - mcp requires pydantic; the stdlib reads the same JSON
    _fast_json = None

# Called with the request id as the server sent it and what it carried.
OnAnswer = Callable[[object, Answer], None]
# Called with the data of a legacy-SSE stream's `endpoint` event: the message endpoint it announces.
OnEndpoint = Callable[[str], None]
# Called once when the stream ends: None on a clean end, the exception on a cut.
OnEnd = Callable[[BaseException | None], None]

_BOM = b"\xef\xbb\xbf"  # json.loads skips a UTF-8 byte-order mark: so does this
_JSON_SPACE = " \t\n\r"  # JSON's whitespace (RFC 8259), all of it: str.strip() would take more
_DECODER = json.JSONDecoder()  # what json.loads uses when given no options, without its checks of type


def json_message(payload: bytes | bytearray | str) -> object:
    """One JSON-RPC message's bytes parsed, or None, whatever it is given. UTF-8 only (JSON over
    HTTP is UTF-8, and the mcp SDK reads nothing else). pydantic's parser reads it first (a tenth of
    the stdlib's time on a large message); what it refuses (a lone surrogate escape, nesting past its
    depth, a BOM) the stdlib's decoder reads as json.loads would, so the answer is json.loads'."""
    if _fast_json is not None:
        try:
            return _fast_json(payload, cache_strings="keys")
        except (ValueError, TypeError):  # TypeError: not bytes nor str, refused below too
            pass
    return _stdlib_message(payload)


def _stdlib_message(payload: bytes | bytearray | str) -> object:
    """json_message by the stdlib: decoding first spares the search for UTF-16 and UTF-32 that
    json.loads makes, and the decoder is called without json.loads' checks."""
    if isinstance(payload, (bytes, bytearray)):
        try:
            text = (payload[3:] if payload.startswith(_BOM) else payload).decode("utf-8")
        except UnicodeDecodeError:
            return None
    elif isinstance(payload, str):
        text = payload
    else:
        return None  # the decoder takes str only, and raises TypeError on anything else
    # What JSONDecoder.decode does, without its two regex scans for whitespace: a message opens with
    # its value (whitespace before it is rare: stripped only then), and only whitespace may follow.
    if text[:1] in _JSON_SPACE:  # (an empty text too: it is refused below, as by loads)
        text = text.lstrip(_JSON_SPACE)
    try:
        message, end = _DECODER.raw_decode(text)  # a str that still opens with a BOM is refused, as by loads
    except (ValueError, RecursionError):
        return None
    if end != len(text) and text[end:].lstrip(_JSON_SPACE):
        return None  # data after the value: not one message
    return message


def answer_of(payload: bytes | bytearray | str) -> tuple[object, Answer] | None:
    """The (id, kind) of a JSON-RPC response in `payload`, or None for anything else: what the
    SDK reads as a response, from the whole text (a response begun and then garbled, or two
    messages in one, the SDK refuses: so does this)."""
    found = message_of(payload)
    return None if found is ASKS else found  # type: ignore[return-value]


ASKS: Final = True  # message_of: a request of the server's (it asks the client something)


def message_of(payload: bytes | bytearray | str) -> tuple[object, Answer] | bool | None:
    """answer_of, or ASKS for a request the server sends the client. A message is read as the SDK's
    models (mcp_types' JSONRPCResponse, JSONRPCError, JSONRPCRequest; 1.x's alike) take one: the
    envelope `"jsonrpc": "2.0"`; an id that is an integer (never a bool or a float) or a string,
    which only an error may leave null; a result that is an object; an error that is an object with
    an integer code and a string message; a request's string method. Its JSON is parsed whole by
    pydantic's parser, which is the SDK's, at a small cost per byte (the SDK's own validation of the
    same message costs twenty times more)."""
    try:  # json_message, inline: it is read once per answer
        message = _fast_json(payload, cache_strings="keys")  # type: ignore[misc]
    except (ValueError, TypeError):  # (TypeError too when pydantic is absent: None is no parser)
        message = _stdlib_message(payload)
    if type(message) is not dict:
        return None
    get = message.get
    if get("jsonrpc") != "2.0":
        return None
    request_id = get("id", _ABSENT)
    if type(request_id) not in _ID_TYPES:  # an integer or a string: a response's, or a request's
        if request_id is None and "error" in message:  # an error that could not name the request
            return _error_of(message, None)
        return None
    result = get("result", _ABSENT)
    if result is not _ABSENT:
        return (request_id, "result") if type(result) is dict else None
    if "error" in message:
        return _error_of(message, request_id)
    return ASKS if type(get("method")) is str else None


_ABSENT: Final = object()  # a key the message does not have
_ID_TYPES: Final = (int, str)  # exactly these: a bool or a float is no id to the SDK's models


def _error_of(message: dict[str, Any], request_id: object) -> tuple[object, Answer] | None:
    error = message["error"]
    if type(error) is dict and type(error.get("code")) is int and type(error.get("message")) is str:
        return request_id, "error"
    return None


def _no_answer(answer_id: object, kind: Answer) -> None:
    """What a watch tells of an answer once its stream ended: nothing."""


class EventWatch:
    """One response's event stream, told event by event as the SDK's own reader yields it (the
    HTTP library's `EventSource`, over the body as the client decoded it: patches/wire.py's
    `events_read`): the answers it carries, whether it asked the client something, the message
    endpoint it announces, and its end. It reads what the SDK reads, and nothing else: an event
    the SDK's reader refuses (its size cap) is never seen here either.

    As the SDK's transports read an event: a `message` event (the default) with empty data is a
    priming event or a keep-alive, and says nothing; its data is one JSON-RPC message. Only an
    `endpoint` event announces a message endpoint (the legacy SSE transport's first).
    """

    __slots__ = ("_on_answer", "_on_end", "_on_endpoint", "asked", "ended")

    def __init__(
        self, on_answer: OnAnswer, on_end: OnEnd | None = None, on_endpoint: OnEndpoint | None = None
    ) -> None:
        self._on_answer, self._on_end, self._on_endpoint = on_answer, on_end, on_endpoint
        self.asked = False  # an event of the stream asked the client something (a server request)
        # Its reading was seen to its end: only then is an answer's absence known (the plugin turned
        # off or on again meanwhile, the SDK reads the stream unseen).
        self.ended = False

    def event(self, event: Any) -> None:
        """One event (a `ServerSentEvent` of the line's reader), before the SDK reads it."""
        name, data = event.event, event.data
        if name == "message":
            if data:
                found = message_of(data)
                if found is ASKS:
                    self.asked = True
                elif found is not None:
                    self._on_answer(*found)  # type: ignore[misc]
        elif name == "endpoint" and self._on_endpoint is not None:
            self._on_endpoint(data)

    async def read(self, events: AsyncIterator[Any]) -> AsyncIterator[Any]:
        """`events`, the SDK's reader's, passed on one by one, each told first; then its end: None
        when it ended or its reader stopped reading, else what it raised (a cut, a cancel)."""
        try:
            async for event in events:
                self.event(event)
                yield event
        except GeneratorExit:  # the SDK stopped reading (it had what it read for)
            self._end(None)
            raise
        except BaseException as exc:
            self._end(exc)
            raise
        self._end(None)

    def _end(self, error: BaseException | None) -> None:
        self.ended = True
        self._on_answer = _no_answer  # no answer counts past the end; its listener is let go
        on_end, self._on_end = self._on_end, None
        if on_end is not None:
            on_end(error)


def events_read(
    watched: MutableMapping[Any, EventWatch],
    wrapped: Callable[..., Any],
    instance: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """The SDK's reader of an event stream (lines.Line.event_reader), as it begins: a watched
    response's events (`watched`, the HTTP seam's: patches/wire.py) are told to its watch one by one,
    each before the SDK reads it, from what the SDK's own parser yields; any other reader passes
    straight on."""
    events = wrapped(*args, **kwargs)
    if not watched:
        return events
    watch = watched.pop(instance.response, None)
    return events if watch is None else watch.read(events)


def answers_request(answer_id: object, request_id: object) -> bool:
    """An answer on a request's own event stream is that request's: by its id on mcp 1.x, whatever
    its id on 2.x, whose transport writes the request's id into it (lines.Line)."""
    return LINE.stream_answers_its_request or answer_id == request_id


class RequestWatch(EventWatch):
    """A request's own event stream (patches/wire.py): the first answer it carried to the request
    (`answer`) and, when it ended without one, whether it was cut (`cut`, the client's error: its
    TransportError says so; the SDK's reader refusing the stream, its size cap,
    lines.Line.event_refused, is no cut). It tells no one: its attempt reads it as it is settled,
    so that the stream's news never calls into the attempt while the SDK reads."""

    __slots__ = ("_cuts", "_request_id", "answer", "cut")

    def __init__(self, request_id: object, cuts: type[BaseException]) -> None:
        super().__init__(self._answered, self._stream_ended)
        self._request_id, self._cuts = request_id, cuts
        self.answer: Answer | None = None
        self.cut: BaseException | None = None

    def _answered(self, answer_id: object, kind: Answer) -> None:
        if self.answer is None and answers_request(answer_id, self._request_id):
            self.answer = kind

    def _stream_ended(self, error: BaseException | None) -> None:
        if isinstance(error, self._cuts) and not isinstance(error, LINE.event_refused()):
            self.cut = error


class Tee:
    """The chunks of a stream's iteration `rest` as it is read, each kept in `read` on the way: the
    body of a stand-in response whose events the plugin reads ahead of the SDK (patches/wire.py).
    Closing it closes nothing: the stream is the SDK's, read on by `ReadAhead`. The HTTP seam makes it
    a subclass of its client library's AsyncByteStream (HttpLibrary.of)."""

    def __init__(self, read: list[bytes], rest: AsyncIterator[bytes]) -> None:
        self._read, self._rest = read, rest

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while True:
            try:
                chunk = await self._rest.__anext__()
            except StopAsyncIteration:
                return
            self._read.append(chunk)
            yield chunk

    async def aclose(self) -> None:
        return None


class ReadAhead:
    """A stream read in part already (`read`, its chunks), then the rest of its iteration (`rest`),
    passed through unchanged: the SDK reads every byte the server sent, in order. The HTTP seam makes
    it a subclass of its client library's AsyncByteStream (HttpLibrary.of)."""

    def __init__(self, read: list[bytes], rest: AsyncIterator[bytes], stream: Any) -> None:
        self._read, self._rest, self._stream = read, rest, stream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        read, self._read = self._read, []
        for chunk in read:
            yield chunk
        async for chunk in self._rest:
            yield chunk

    async def aclose(self) -> None:
        await self._stream.aclose()
