"""The libraries the HTTP seam works through, as the mcp SDK itself uses them: its HTTP client
(httpx2 on mcp 2.x, httpx on 1.x, one API: `HttpLibrary`) and its JSON parser (pydantic's:
`json_message`).

The rule: the seam reads with the SDK's own libraries, so it reads what the SDK reads, and makes
only what the library itself makes: its own byte streams (`Tee`, `ReadAhead`: every byte passed on
unchanged, in order) and its own responses (`synthetic_error`: a JSON-RPC error that ends one call,
never the session). It knows no request, no attempt and no call.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Protocol

fast_json: Callable[..., Any] | None
try:  # the Rust JSON parser pydantic (so the mcp SDK) parses every message with: wherever mcp is
    from pydantic_core import from_json as fast_json
except ImportError:  # pragma: no cover - mcp requires pydantic; the stdlib reads the same JSON
    fast_json = None


_BOM = b"\xef\xbb\xbf"  # json.loads skips a UTF-8 byte-order mark: so does this
_JSON_SPACE = " \t\n\r"  # JSON's whitespace (RFC 8259), all of it: str.strip() would take more
_DECODER = json.JSONDecoder()  # what json.loads uses when given no options, without its checks of type


class StreamWatch(Protocol):
    """What reads a response's events as the SDK's reader yields them (wire.EventWatch)."""

    def read(self, events: AsyncIterator[Any]) -> AsyncIterator[Any]: ...


@dataclass(frozen=True)
class HttpLibrary:
    """The names this seam uses of one HTTP client library (httpx2 and httpx share its API)."""

    module: ModuleType
    read_ahead: type[ReadAhead]  # ReadAhead as that library's own async byte stream
    tee: type[Tee]  # Tee, the same
    # Never sent: the connection was not made, so the server cannot have run anything.
    not_sent: tuple[type[BaseException], ...]

    synthetic_status: int = 599  # the status of a synthetic JSON-RPC error answer (lines.Line)
    resolves_lost_answers: bool = True  # lines.Line: else a streamable session's calls keep their scope
    # The responses whose event streams are watched, each read by its watch as the SDK's reader
    # yields its events (wire.events_read); a response is let go once its reader begins.
    watched: weakref.WeakKeyDictionary[Any, StreamWatch] = field(default_factory=weakref.WeakKeyDictionary)

    @classmethod
    def of(
        cls, module: ModuleType, synthetic_status: int = 599, resolves_lost_answers: bool = True
    ) -> HttpLibrary:
        read_ahead = type("ReadAhead", (ReadAhead, module.AsyncByteStream), {})
        tee = type("Tee", (Tee, module.AsyncByteStream), {})
        not_sent = (
            module.ConnectError,
            module.ConnectTimeout,
            module.PoolTimeout,
            module.UnsupportedProtocol,
        )
        return cls(module, read_ahead, tee, not_sent, synthetic_status, resolves_lost_answers)

    def watch(self, response: Any, watch: StreamWatch) -> None:
        """Read `response`'s events, as the SDK's reader yields them, into `watch`."""
        self.watched[response] = watch


def synthetic_error(http: HttpLibrary, request: Any, request_id: object, why: str) -> Any:
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


def json_message(payload: bytes | bytearray | str) -> object:
    """One JSON-RPC message's bytes parsed, or None, whatever it is given. UTF-8 only (JSON over
    HTTP is UTF-8, and the mcp SDK reads nothing else). pydantic's parser reads it first (a tenth of
    the stdlib's time on a large message); what it refuses (a lone surrogate escape, nesting past its
    depth, a BOM) the stdlib's decoder reads as json.loads would, so the answer is json.loads'."""
    if fast_json is not None:
        try:
            return fast_json(payload, cache_strings="keys")
        except (ValueError, TypeError):  # TypeError: not bytes nor str, refused below too
            pass
    return stdlib_message(payload)


def stdlib_message(payload: bytes | bytearray | str) -> object:
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
