"""The mcp line installed, and the few things the plugin's seams do differently on each.

The rule: what differs between mcp 1.x (HTTP through `httpx`) and 2.x (through `httpx2`) is said
here and nowhere else (docs/mcp-lines.md has the facts, read from each line's sources). The line is
told by the installed mcp's version, never by which HTTP library imports: the 1.x environment of
langchain-mcp-adapters has httpx2 installed too.
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from importlib.metadata import version
from typing import Any


@dataclass(frozen=True)
class Line:
    major: int  # 1 or 2
    http: str  # the HTTP client library's module
    # 1.x runs each POST in a task its transport started: the call rides there by a carrier.
    carries_context: bool
    # A synthetic JSON-RPC error answer's HTTP status: 1.x tears the session down on any non-2xx
    # (then the error body is read as the request's answer only with a 200); 2.x reads the body of
    # an error status as its answer.
    synthetic_status: int
    # A 2xx whose JSON-RPC answer never comes (a body cut, an event stream ending without it, a 202):
    # 2.x's streamable-HTTP client fails that request itself; 1.x's leaves the call waiting (for its
    # read timeout, else for ever), so there the plugin ends such a call (patches/carrier.py).
    resolves_lost_answers: bool
    # The code of the error the SDK raises when its caller's read timeout (`read_timeout_seconds`)
    # passes: mcp_types.REQUEST_TIMEOUT on 2.x, httpx.codes.REQUEST_TIMEOUT on 1.x.
    request_timeout: int
    # The contrib instrumentor of that HTTP client (opentelemetry-instrumentation-httpx): the one
    # whose span an attempt's span stands in for.
    http_instrumentor: str = "HTTPX2ClientInstrumentor"
    # The SDK's reader of an event stream, whose iteration yields each event as the SDK reads it
    # (the body as the client decoded it, parsed): httpx2's `EventSource` on 2.x, httpx-sse's on
    # 1.x; (module, the method the plugin's seam wraps).
    event_reader: tuple[str, str] = ("httpx2", "EventSource.__aiter__")
    # 2.x takes the first JSON-RPC response on a request's own stream for that request's answer,
    # whatever id it carries (its transport writes the request's id into it); 1.x routes it by its id.
    stream_answers_its_request: bool = True

    def events(self, response: Any) -> AsyncGenerator[Any, None]:
        """The events of `response`'s stream as the SDK's reader parses them (its own class, over
        the body as the client decodes it), with no size cap: a reading ahead of the SDK's."""
        module = importlib.import_module(self.event_reader[0])
        if self.major < 2:
            events: AsyncGenerator[Any, None] = module.EventSource(response).aiter_sse()
            return events
        try:
            source = module.EventSource(response, max_event_size=None)
        except TypeError:  # an httpx2 before its reader had a cap
            source = module.EventSource(response)
        return source.__aiter__()  # type: ignore[no-any-return]

    def event_refused(self) -> type[Exception]:
        """The error the SDK's reader raises for a stream it will not read (not an event stream, an
        event over its cap): a TransportError subclass, but no cut."""
        found: type[Exception] = importlib.import_module(self.event_reader[0]).SSEError
        return found

    def error_base(self) -> type[Exception]:
        """The installed line's own error class: the plugin's errors subclass it."""
        exceptions = importlib.import_module("mcp.shared.exceptions")
        found: type[Exception] = exceptions.MCPError if self.major >= 2 else exceptions.McpError
        return found

    def is_callers_timeout(self, exc: BaseException) -> bool:
        """`exc` is the SDK's own error for its caller's read timeout: its class and code, raised
        while the SDK handled the TimeoutError of its wait (both lines raise it there). A server's
        JSON-RPC error with the same code is raised from its answer, never there."""
        error = getattr(exc, "error", None)
        return (
            type(exc) is self.error_base()
            and getattr(error, "code", None) == self.request_timeout
            and isinstance(exc.__context__, TimeoutError)
        )

    def error_args(self, code: int, message: str, data: Any = None) -> tuple[Any, ...]:
        """The arguments its error class takes for (code, message, data)."""
        if self.major >= 2:
            return (code, message, data)
        error_data = importlib.import_module("mcp.types").ErrorData
        return (error_data(code=code, message=message, data=data),)

    def jsonrpc_request(self) -> type:
        """The class of an outgoing JSON-RPC request on the session's write stream."""
        found: type = importlib.import_module("mcp_types" if self.major >= 2 else "mcp.types").JSONRPCRequest
        return found


def installed() -> Line:
    major = int(version("mcp").split(".", 1)[0])
    if major >= 2:
        return Line(
            major,
            "httpx2",
            carries_context=True,
            synthetic_status=599,
            resolves_lost_answers=True,
            request_timeout=-32001,
        )
    return Line(
        major,
        "httpx",
        carries_context=False,
        synthetic_status=200,
        resolves_lost_answers=False,
        request_timeout=408,
        http_instrumentor="HTTPXClientInstrumentor",
        event_reader=("httpx_sse", "EventSource.aiter_sse"),
        stream_answers_its_request=False,
    )


LINE = installed()
