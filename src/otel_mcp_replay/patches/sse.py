"""The SSE transport's seam: `mcp.client.sse.sse_client` builds its client through a factory the
caller may pass; wrapping that factory marks the client, so its POSTs are known as MCP messages
and its GET stream, where the answers arrive, is watched by the ledger."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import httpx2

from otel_mcp_replay.patches.httpx2_send import SSE_CLIENTS


def sse_client(
    wrapped: Callable[..., Any], instance: object, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    try:
        bound = inspect.signature(wrapped).bind(*args, **kwargs)
    except TypeError:
        return wrapped(*args, **kwargs)  # let the SDK raise its own error for a bad call
    factory = bound.arguments.get("httpx_client_factory")
    if factory is None:
        from mcp.shared._httpx_utils import create_mcp_http_client

        factory = create_mcp_http_client

    def marking_factory(*f_args: Any, **f_kwargs: Any) -> httpx2.AsyncClient:
        client: httpx2.AsyncClient = factory(*f_args, **f_kwargs)
        SSE_CLIENTS.add(client)
        return client

    bound.arguments["httpx_client_factory"] = marking_factory
    return wrapped(*bound.args, **bound.kwargs)
