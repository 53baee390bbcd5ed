"""An event stream's bytes as a response of the installed line's HTTP client, and what the plugin's
watch reads of it through the SDK's own reader (lines.Line.events): the way every event stream the
plugin reads is read, here without a server."""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

from harness.client import http
from otel_mcp_replay.lines import LINE
from otel_mcp_replay.patches.wire import EventWatch

# zlib's window bits per content coding (RFC 9110 `deflate` is the zlib format).
WBITS = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


class Chunks(http.AsyncByteStream):  # type: ignore[misc,name-defined]
    """A body that arrives in these chunks, in order."""

    def __init__(self, chunks: Sequence[bytes]) -> None:
        self._chunks = list(chunks)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk


def encoded(chunks: Sequence[bytes], encoding: str | None) -> list[bytes]:
    """`chunks` as a proxy that compresses each as it comes sends them (None: as they are)."""
    if encoding is None:
        return list(chunks)
    compressor = zlib.compressobj(wbits=WBITS[encoding])
    out = [compressor.compress(chunk) + compressor.flush(zlib.Z_SYNC_FLUSH) for chunk in chunks]
    return [*out, compressor.flush(zlib.Z_FINISH)]


def event_stream(chunks: Sequence[bytes], encoding: str | None = None) -> Any:
    """A 200 `text/event-stream` response of the line's HTTP client whose body is `chunks`, sent
    with `Content-Encoding: encoding` when one is given (the chunks are then encoded here)."""
    headers = {"content-type": "text/event-stream"}
    if encoding is not None:
        headers["content-encoding"] = encoding
    request = http.Request("POST", "http://127.0.0.1:9/mcp")
    return http.Response(200, headers=headers, stream=Chunks(encoded(chunks, encoding)), request=request)


async def answers_watched(response: Any) -> list[tuple[object, str]]:
    """The answers the plugin's watch reads off `response`'s events, as the SDK's reader yields them."""
    seen: list[tuple[object, str]] = []
    watch = EventWatch(lambda request_id, kind: seen.append((request_id, kind)))
    async for _ in watch.read(LINE.events(response)):
        pass
    return seen
