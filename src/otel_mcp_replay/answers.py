"""The answer watcher: whether the JSON-RPC answer to a request id was seen on the wire.

An HTTP status is not the call's answer: a 200 event stream can end without it. So the bytes of
each event stream the SDK reads pass through `AnswerWatch` on their way, untouched, and the answer
to a watched id is noted the moment its event is complete, before the SDK parses it. Nothing here
changes a byte, and a watch that cannot parse a stream only stops noting answers. No size turns the
watch off: an event of any size the SDK reads is read (the SDK's own cap, or none, bounds both), and
the JSON is parsed by the parser the SDK itself uses (pydantic's), whose cost per byte is small.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable
from typing import Any, Final

from otel_mcp_replay.law import Answer

_fast_json: Callable[..., Any] | None
try:  # the Rust JSON parser pydantic (so the mcp SDK) parses every message with: wherever mcp is
    from pydantic_core import from_json as _fast_json
except ImportError:  # pragma: no cover - mcp requires pydantic; the stdlib reads the same JSON
    _fast_json = None

# Called with the request id as the server sent it and what it carried.
OnAnswer = Callable[[object, Answer], None]
# Called with the data of a legacy-SSE stream's first event: the message endpoint it announces.
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


# The head of an answer as every mcp server writes one (pydantic's key order, no whitespace): its
# id (an integer, or a string without escapes) and whether a result or an error follows.
_ANSWER_HEAD = re.compile(
    rb'\{"jsonrpc":"2\.0","id":(?:(-?(?:0|[1-9][0-9]{0,17}))|"([^"\\\x00-\x1f]{0,256})"),"(result|error)":'
)


def answer_of(payload: bytes | bytearray | str) -> tuple[object, Answer] | None:
    """The (id, kind) of a JSON-RPC response in `payload`, or None for anything else. An answer in
    the servers' own form is read from its head, whatever its size (what follows is the result,
    which the law never reads); any other form is parsed whole."""
    found = _message_of(payload)
    return None if found is ASKS else found  # type: ignore[return-value]


ASKS: Final = True  # _message_of: a request of the server's (it asks the client something)


def _message_of(payload: bytes | bytearray | str) -> tuple[object, Answer] | bool | None:
    """answer_of, or ASKS for a request the server sends the client (a method and an id)."""
    if not isinstance(payload, str) and payload[-1:] == b"}":
        found = _head_answer(payload)
        if found is not None:
            return found
    message = json_message(payload)
    if type(message) is not dict or "id" not in message:
        return None
    if "result" in message:
        return message["id"], "result"
    if "error" in message:
        return message["id"], "error"
    return ASKS if "method" in message else None


def _head_answer(payload: bytes | bytearray) -> tuple[object, Answer] | None:
    """The (id, kind) an answer in the servers' own form opens with (None: not that form)."""
    head = _ANSWER_HEAD.match(payload)
    if head is None:
        return None
    number, text, kind = head.groups()
    answer: Answer = "result" if kind == b"result" else "error"
    if number is not None:
        return int(number), answer
    try:
        return text.decode("utf-8"), answer
    except UnicodeDecodeError:
        return None


# A line held across chunks up to this size is joined when it ends; a longer one is kept as the
# chunks' own slices (no copy): an answer's head is read off its first, whatever its size.
_SHORT_LINE = 64 * 1024
_HEAD = 512  # more than any answer head _ANSWER_HEAD matches
Pieces = list[memoryview]  # a long data line, as slices of the chunks it came in


def _first(pieces: Pieces, n: int) -> bytes:
    """The first `n` bytes of `pieces` (fewer when they hold fewer)."""
    out = bytearray()
    for piece in pieces:
        out += piece[: n - len(out)]
        if len(out) >= n:
            break
    return bytes(out)


def _long_message(pieces: Pieces) -> tuple[object, Answer] | bool | None:
    """_message_of a long data line: read from its head when it is an answer in the servers' own
    form (its last byte closes it), else joined and parsed whole."""
    if pieces and bytes(pieces[-1][-1:]) == b"}":
        found = _head_answer(_first(pieces, _HEAD))
        if found is not None:
            return found
    return _message_of(b"".join(pieces))


def _joined(data: list[bytes | Pieces]) -> bytes:
    return b"\n".join(b"".join(line) if type(line) is list else line for line in data)  # type: ignore[misc]


class SseAnswers:
    """Incremental server-sent-events reader that reports JSON-RPC responses as they complete.

    Linear in the bytes fed, however they are cut: each byte is searched once (by bytes.find, from a
    position that only moves forward) and copied at most once (a line past _SHORT_LINE: never; it is
    held as slices of its chunks, and an answer is read from its head). Lines end at CRLF, LF or CR (a CR at
    the end of a chunk ends its line at once; an LF opening the next chunk is then its pair). An
    event of any size is parsed: what is held is the event being read, as the SDK holds it.
    """

    __slots__ = (
        "_after_cr",
        "_data",
        "_on_answer",
        "_on_endpoint",
        "_partial",
        "_partial_len",
        "asked",
    )

    def __init__(self, on_answer: OnAnswer, on_endpoint: OnEndpoint | None = None) -> None:
        self._on_answer = on_answer
        self.asked = False  # an event of the stream asked the client something (a server request)
        # The legacy SSE transport's first event announces where to POST (`event: endpoint`, its
        # data a URL, never JSON): the first event's data goes here, once, unless it is JSON.
        self._on_endpoint = on_endpoint
        self._partial: Pieces = []  # the start of a line whose end has not come yet
        self._partial_len = 0
        # The data lines of the event being read (a long one as the slices it came in).
        self._data: list[bytes | Pieces] = []
        self._after_cr = False  # the last byte fed was a CR: an LF next is its pair, not a line

    def feed(self, chunk: bytes) -> None:
        end = len(chunk)
        if not end:
            return
        pos = 1 if self._after_cr and chunk[0] == 0x0A else 0
        self._after_cr = chunk[end - 1] == 0x0D  # a CR ends its line here, whatever follows
        if self._partial:
            pos = self._finish_line(chunk, pos, end)
        lf = chunk.find(b"\n", pos)
        cr = chunk.find(b"\r", pos)
        while pos < end:
            if not self._data:
                # Between events only a data line changes anything: skip to the next one, so blank
                # lines, comments and other fields between events pass at the speed of find.
                found = _next_data_line(chunk, pos)
                if found < 0:
                    self._keep(chunk, _after_last_line(chunk, pos), end)
                    return
                pos = found
                if -1 < lf < pos:
                    lf = chunk.find(b"\n", pos)
                if -1 < cr < pos:
                    cr = chunk.find(b"\r", pos)
            if cr < 0 or -1 < lf < cr:
                if lf < 0:
                    self._keep(chunk, pos, end)
                    return
                cut = lf
                next_pos = lf + 1
                lf = chunk.find(b"\n", next_pos)
            else:
                cut = cr
                next_pos = cr + 2 if cr + 1 < end and chunk[cr + 1] == 0x0A else cr + 1
                cr = chunk.find(b"\r", next_pos)
                if -1 < lf < next_pos:
                    lf = chunk.find(b"\n", next_pos)
            if pos == cut or chunk.startswith(b"data:", pos, cut):
                self._line(chunk[pos:cut])
            # (any other line, a comment or another field, notes nothing)
            pos = next_pos

    def _finish_line(self, chunk: bytes, pos: int, end: int) -> int:
        """End the line an earlier chunk began, if this chunk ends it; where the next line starts."""
        lf = chunk.find(b"\n", pos)
        cr = chunk.find(b"\r", pos)
        cut = lf if cr < 0 or -1 < lf < cr else cr
        if cut < 0:
            self._keep(chunk, pos, end)
            return end
        pieces, self._partial = self._partial, []
        if pos < cut:
            pieces.append(memoryview(chunk)[pos:cut])
        if self._partial_len + cut - pos <= _SHORT_LINE:
            self._line(b"".join(pieces))
        else:
            self._long_line(pieces)
        self._partial_len = 0
        return cut + 2 if cut == cr and cut + 1 < end and chunk[cut + 1] == 0x0A else cut + 1

    def end(self) -> None:
        """The stream ended. A CR it ended on has ended its line already; a line with no end is
        dropped, as the event it belongs to is."""
        self._after_cr = False

    def _keep(self, chunk: bytes, start: int, end: int) -> None:
        """Hold the start of a line whose end is in a later chunk."""
        if start < end:
            self._partial.append(memoryview(chunk)[start:end])  # the chunk's bytes, not a copy
            self._partial_len += end - start

    def _long_line(self, pieces: Pieces) -> None:
        """A line past _SHORT_LINE: a data line is kept as its slices, its field name dropped."""
        head = _first(pieces, 6)
        if not head.startswith(b"data:"):
            return  # any other field, or a comment: notes nothing
        skip = 6 if head[5:6] == b" " else 5
        while skip:
            first = pieces[0]
            if len(first) > skip:
                pieces[0] = first[skip:]
                break
            skip -= len(first)
            del pieces[0]
        self._data.append(pieces)

    def _line(self, line: bytes) -> None:
        if not line:  # a blank line dispatches the event
            data, self._data = self._data, []
            if data:
                on_endpoint, self._on_endpoint = self._on_endpoint, None
                payload = data[0] if len(data) == 1 and on_endpoint is None else _joined(data)
                if on_endpoint is not None and not payload.lstrip().startswith(b"{"):  # type: ignore[union-attr]
                    on_endpoint(payload.decode("utf-8", "replace"))  # type: ignore[union-attr]
                    return
                found = _long_message(payload) if type(payload) is list else _message_of(payload)  # type: ignore[arg-type]
                if found is ASKS:
                    self.asked = True
                elif found is not None:
                    self._on_answer(*found)  # type: ignore[misc]
            return
        if line.startswith(b"data:"):
            self._data.append(line[6:] if line[5:6] == b" " else line[5:])


def _next_data_line(chunk: bytes, pos: int) -> int:
    """Where the first line at or after `pos` (a line's start) that opens with `data:` starts, or -1."""
    found = chunk.find(b"data:", pos)
    while found > pos and chunk[found - 1] not in (0x0A, 0x0D):
        found = chunk.find(b"data:", found + 1)
    return found


def _after_last_line(chunk: bytes, pos: int) -> int:
    """Where the bytes after the last line end at or after `pos` (a line's start) start."""
    return max(chunk.rfind(b"\n", pos), chunk.rfind(b"\r", pos), pos - 1) + 1


class AnswerWatch:
    """The response's own byte stream, passed through, with its answers and its end reported. The
    HTTP seam makes it a subclass of its client library's AsyncByteStream (HttpLibrary.of)."""

    def __init__(
        self, inner: Any, on_answer: OnAnswer, on_end: OnEnd, on_endpoint: OnEndpoint | None = None
    ) -> None:
        self._inner = inner
        self._events = SseAnswers(on_answer, on_endpoint)
        self._on_end: OnEnd | None = on_end

    def _end(self, error: BaseException | None) -> None:
        on_end, self._on_end = self._on_end, None
        if on_end is not None:
            on_end(error)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._inner:
                self._events.feed(chunk)
                yield chunk
        except BaseException as exc:
            self._end(exc)
            raise
        self._events.end()
        self._end(None)

    @property
    def asked(self) -> bool:
        """An event read so far asked the client something (a request of the server's)."""
        return self._events.asked

    async def aclose(self) -> None:
        self._end(None)
        await self._inner.aclose()


class Replay:
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
