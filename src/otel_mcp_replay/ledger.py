"""The ledger: whether the JSON-RPC answer to a request id was seen on the wire.

An HTTP status is not the call's answer: a 200 event stream can end without it. So the bytes of
each event stream the SDK reads pass through `AnswerWatch` on their way, untouched, and the answer
to a watched id is noted the moment its event is complete, before the SDK parses it. Nothing here
changes a byte, and a watch that cannot parse a stream only stops noting answers.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from otel_mcp_replay.law import Answer

# Called with the request id as the server sent it and what it carried.
OnAnswer = Callable[[object, Answer], None]
# Called once when the stream ends: None on a clean end, the exception on a cut.
OnEnd = Callable[[BaseException | None], None]

_BOM = b"\xef\xbb\xbf"  # json.loads skips a UTF-8 byte-order mark: so does this
_DECODER = json.JSONDecoder()  # what json.loads uses when given no options, without its checks of type
_MAX_EVENT_BYTES = 4 * 1024 * 1024  # past this an event is not parsed (the SDK caps events at 1 MiB)


def json_message(payload: bytes | bytearray | str) -> object:
    """One JSON-RPC message's bytes parsed, or None, whatever it is given. UTF-8 only (JSON over
    HTTP is UTF-8, and the mcp SDK reads nothing else): decoding first spares the search for UTF-16
    and UTF-32 that json.loads makes, and the decoder is called without json.loads' checks."""
    if isinstance(payload, (bytes, bytearray)):
        try:
            text = (payload[3:] if payload.startswith(_BOM) else payload).decode("utf-8")
        except UnicodeDecodeError:
            return None
    elif isinstance(payload, str):
        text = payload
    else:
        return None  # the decoder takes str only, and raises TypeError on anything else
    try:
        return _DECODER.decode(text)  # a str that still opens with a BOM is refused, as by loads
    except (ValueError, RecursionError):
        return None


def answer_of(payload: bytes | str) -> tuple[object, Answer] | None:
    """The (id, kind) of a JSON-RPC response in `payload`, or None for anything else."""
    message = json_message(payload)
    if type(message) is not dict or "id" not in message:
        return None
    if "result" in message:
        return message["id"], "result"
    if "error" in message:
        return message["id"], "error"
    return None


class SseAnswers:
    """Incremental server-sent-events reader that reports JSON-RPC responses as they complete."""

    __slots__ = ("_buffer", "_data", "_on_answer", "_skipping")

    def __init__(self, on_answer: OnAnswer) -> None:
        self._on_answer = on_answer
        self._buffer = b""
        self._data: list[bytes] = []
        self._skipping = False

    def feed(self, chunk: bytes) -> None:
        self._buffer += chunk
        while True:
            cut = _line_end(self._buffer)
            if cut is None:
                if len(self._buffer) > _MAX_EVENT_BYTES:
                    self._buffer, self._data, self._skipping = b"", [], True
                return
            end, width = cut
            line, self._buffer = self._buffer[:end], self._buffer[end + width :]
            self._line(line)

    def end(self) -> None:
        """The stream ended: a CR it ended on ends a line (no LF can follow it now)."""
        if self._buffer.endswith(b"\r"):
            self.feed(b"\n")

    def _line(self, line: bytes) -> None:
        if not line:  # a blank line dispatches the event
            data, self._data = self._data, []
            if data and not self._skipping:
                found = answer_of(b"\n".join(data))
                if found is not None:
                    self._on_answer(*found)
            self._skipping = False
            return
        if line.startswith(b"data:"):
            value = line[5:]
            self._data.append(value[1:] if value.startswith(b" ") else value)


def _line_end(buffer: bytes) -> tuple[int, int] | None:
    """Where the first line of `buffer` ends and how wide its terminator is (CRLF, LF or CR)."""
    lf = buffer.find(b"\n")
    cr = buffer.find(b"\r")
    if cr == -1 and lf == -1:
        return None
    if cr == -1 or (lf != -1 and lf < cr):
        return lf, 1
    if cr + 1 < len(buffer):
        return cr, 2 if buffer[cr + 1 : cr + 2] == b"\n" else 1
    return None  # a CR at the very end: wait for the next byte to know whether LF follows


class AnswerWatch:
    """The response's own byte stream, passed through, with its answers and its end reported. The
    HTTP seam makes it a subclass of its client library's AsyncByteStream (HttpClient.of)."""

    def __init__(self, inner: Any, on_answer: OnAnswer, on_end: OnEnd) -> None:
        self._inner = inner
        self._events = SseAnswers(on_answer)
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

    async def aclose(self) -> None:
        self._end(None)
        await self._inner.aclose()
