"""Frame a server's answers as other servers and proxies do, at the ASGI level, in front of the
demo server: what the event-stream rules allow and the SDK reads, which this project's own server
never sends.

`PrimingEvents` opens every event stream with a SEP-1699 priming event (`id: 0`, `retry: 3000`, an
empty `data:`), as Rust's rmcp opens its standalone GET stream: the standalone GET stream, and
(`posts=True`) each POST's answer stream too. `Compressed` is a proxy that compresses what it
forwards whatever the server's `Cache-Control: no-transform` says (nginx with `text/event-stream` in
`gzip_types`): `Content-Encoding: gzip` or `deflate`, each chunk flushed as it comes, so an event
reaches the client when the server sends it. Pass either as `running_server(middleware=...)`.
"""

from __future__ import annotations

import threading
import zlib
from typing import Literal, cast

from starlette.types import ASGIApp, Message, Receive, Scope, Send

# What rmcp sends first on its standalone GET stream (and the 2025-11-25 spec's SHOULD).
PRIMING_EVENT = b"id: 0\nretry: 3000\ndata:\n\n"

Encoding = Literal["gzip", "deflate"]
# zlib's window bits for each content coding: gzip's header and trailer, or zlib's (RFC 1950: what
# HTTP's `deflate` names, and what nginx and Starlette's own middleware send).
_WBITS: dict[Encoding, int] = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


def _header(message: Message, name: bytes) -> bytes | None:
    for key, value in cast(list[tuple[bytes, bytes]], message.get("headers", [])):
        if key.lower() == name:
            return value
    return None


def _event_stream(start: Message) -> bool:
    return (_header(start, b"content-type") or b"").lower().startswith(b"text/event-stream")


class PrimingEvents:
    """ASGI middleware: a priming event opens each event stream of the standalone GET (and, with
    `posts=True`, of each POST), before the server's first byte. It counts the GET streams primed
    (a test waits for the first, `wait_primed_get`: the stream is open and primed)."""

    def __init__(self, app: ASGIApp, *, posts: bool = True) -> None:
        self.app, self.posts = app, posts
        self._lock = threading.Condition()
        self._primed_gets = 0

    def wait_primed_get(self, timeout: float = 10.0) -> bool:
        """Block until a GET stream was primed (bounded: `timeout` guards a hang only)."""
        with self._lock:
            return self._lock.wait_for(lambda: self._primed_gets > 0, timeout)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        method = scope.get("method") if scope["type"] == "http" else None
        if method != "GET" and not (method == "POST" and self.posts):
            await self.app(scope, receive, send)
            return
        primed = False

        async def priming(message: Message) -> None:
            nonlocal primed
            if message["type"] == "http.response.start":
                primed = _event_stream(message)
                await send(message)
                if primed:
                    await send({"type": "http.response.body", "body": PRIMING_EVENT, "more_body": True})
                    if method == "GET":
                        with self._lock:
                            self._primed_gets += 1
                            self._lock.notify_all()
                return
            await send(message)

        await self.app(scope, receive, priming)


class Compressed:
    """ASGI middleware, a compressing proxy: every response to a client that accepts `encoding`
    (the mcp clients' HTTP libraries all send `Accept-Encoding: gzip, deflate`) goes out encoded,
    `no-transform` or not, each body chunk compressed and flushed as it comes (Z_SYNC_FLUSH)."""

    def __init__(self, app: ASGIApp, encoding: Encoding = "gzip") -> None:
        self.app, self.encoding = app, encoding
        self.encoded = 0  # responses sent encoded (the server's thread writes it, a test reads it)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self._accepted(scope):
            await self.app(scope, receive, send)
            return
        compressor = zlib.compressobj(wbits=_WBITS[self.encoding])
        finished = False

        async def compressing(message: Message) -> None:
            nonlocal finished
            if message["type"] == "http.response.start":
                headers = [
                    (key, value)
                    for key, value in cast(list[tuple[bytes, bytes]], message.get("headers", []))
                    if key.lower() not in (b"content-length", b"content-encoding")
                ]
                headers.append((b"content-encoding", self.encoding.encode("ascii")))
                headers.append((b"vary", b"Accept-Encoding"))
                self.encoded += 1
                await send({**message, "headers": headers})
                return
            if message["type"] != "http.response.body" or finished:
                await send(message)
                return
            more = bool(message.get("more_body", False))
            body = compressor.compress(cast(bytes, message.get("body", b"")))
            body += compressor.flush(zlib.Z_SYNC_FLUSH if more else zlib.Z_FINISH)
            finished = not more
            await send({**message, "body": body})

        await self.app(scope, receive, compressing)

    def _accepted(self, scope: Scope) -> bool:
        for key, value in cast(list[tuple[bytes, bytes]], scope.get("headers", [])):
            if key.lower() == b"accept-encoding":
                codings = {part.split(b";")[0].strip().lower() for part in value.split(b",")}
                if self.encoding.encode("ascii") in codings:
                    return True
        return False
