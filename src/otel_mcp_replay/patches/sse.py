"""The SSE transport's seam: `mcp.client.sse.sse_client` builds its client through a factory the
caller may pass; wrapping that factory marks the client, so its POSTs are known as MCP messages
and its GET stream, where the answers arrive, is watched."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from otel_mcp_replay.runtime import Runtime


def sse_client(
    rt: Runtime, wrapped: Callable[..., Any], instance: object, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    try:
        bound = inspect.signature(wrapped).bind(*args, **kwargs)
    except TypeError:
        return wrapped(*args, **kwargs)  # let the SDK raise its own error for a bad call
    factory = bound.arguments.get("httpx_client_factory")
    if factory is None:
        from mcp.shared._httpx_utils import create_mcp_http_client

        factory = create_mcp_http_client

    def marking_factory(*f_args: Any, **f_kwargs: Any) -> Any:
        client = factory(*f_args, **f_kwargs)
        rt.sse_clients.add(client)
        return client

    bound.arguments["httpx_client_factory"] = marking_factory
    return wrapped(*bound.args, **bound.kwargs)
