"""The legacy SSE transport, known where it is used: by its GET event stream, not by the function
that opened it (which an app or a framework may have imported before instrument()).

The rule: a GET event stream whose `endpoint` event announces a message endpoint is an SSE
connection (its events read as the SDK's reader yields them, so a priming event, an empty `data:`
with an id, announces nothing); a GET of the streamable-HTTP transport, which carries its session
id, is never one. The POSTs to that endpoint are its calls, governed by the declaration of the URL
the app connected to, and their answers are read off that stream. A stream a tool call opens (streamable HTTP
resuming the call's stream) may carry that call's answer. What this seam remembers is its own:
`SseConnections`, made by `instrument()` and bound into the HTTP seam, and each connection's
`SseStream`; a process that opens none costs the streamable-HTTP path one empty-dict check.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin

from otel_mcp_replay.call import ToolCall
from otel_mcp_replay.declaration import Declaration
from otel_mcp_replay.evidence import Answer
from otel_mcp_replay.patches.libraries import HttpLibrary
from otel_mcp_replay.patches.wire import EventWatch
from otel_mcp_replay.runtime import Runtime


@dataclass(eq=False)
class SseStream:
    """One legacy-SSE connection: its GET stream carries the answers to the calls POSTed to the
    message endpoint it announced, and the declaration of its URL governs them."""

    declaration: Declaration
    endpoint: str  # the declared label, else the origin of the URL the app connected to
    # Tool calls POSTed on it awaiting their answer on the stream, by JSON-RPC id.
    waiting: dict[object, ToolCall] = field(default_factory=dict)


class SseConnections:
    """The legacy-SSE connections being watched: by HTTP client (its id, while it lives; a client
    without a live connection is not kept), the connection of each message endpoint announced: the
    HTTP seam looks a POST's up in `by_client` itself, as it reads the request."""

    __slots__ = ("by_client",)

    def __init__(self) -> None:
        self.by_client: dict[int, dict[str, SseStream]] = {}

    def announced(self, client: object, post_url: str, stream: SseStream) -> None:
        key, by_client = id(client), self.by_client
        posts = by_client.get(key)
        if posts is None:
            posts = by_client[key] = {}
            weakref.finalize(client, by_client.pop, key, None)  # before its id can name another
        posts[post_url] = stream

    def ended(self, client: object, stream: SseStream) -> None:
        key = id(client)
        posts = self.by_client.get(key)
        if posts is None:
            return
        for post_url in [u for u, s in posts.items() if s is stream]:
            del posts[post_url]
        if not posts:
            del self.by_client[key]


def watch_event_stream(
    runtime: Runtime,
    http: HttpLibrary,
    connections: SseConnections,
    client: Any,
    request: Any,
    response: Any,
    call: ToolCall | None,
) -> Any:
    """`response`, a GET's, with its event stream watched (see the module's rule)."""
    if not response.headers.get("content-type", "").lower().startswith("text/event-stream"):
        return response
    get_url = str(request.url)
    declaration = runtime.servers.declaration_for(get_url)
    stream = SseStream(declaration, declaration.label or runtime.origin(get_url))
    waiting = stream.waiting

    def on_endpoint(path: str) -> None:
        try:
            post_url = str(http.module.URL(urljoin(get_url, path)))
        except Exception:  # not a URL: nothing will be POSTed there that we could know
            return
        connections.announced(client, post_url, stream)

    def on_answer(request_id: object, kind: Answer) -> None:
        waiter = waiting.pop(request_id, None)
        if waiter is not None:
            waiter.answered(kind)
        elif call is not None and call.declaration is not None:
            # A stream the client resumed for this call: both lines take its first answer for the
            # call's, whatever its id (their transports write the call's id into it).
            call.answered(kind)

    def on_end(error: BaseException | None) -> None:
        for request_id in list(waiting):
            waiter = waiting.pop(request_id, None)
            if waiter is not None:
                waiter.connection_ended(error is not None)
        connections.ended(client, stream)

    # The streamable-HTTP transport's GETs carry its session id: no endpoint is announced on them.
    legacy = "mcp-session-id" not in request.headers
    http.watch(response, EventWatch(on_answer, on_end, on_endpoint if legacy else None))
    return response
