"""The one builder of a server's declaration, and what the SDK alone raises for a refused call."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import pytest

from harness.client import Client, McpError, http
from harness.sdk import LINE

if sys.version_info < (3, 11):  # pragma: no cover - Python 3.10
    from exceptiongroup import BaseExceptionGroup


def declared(
    server: Any, tools: Mapping[str, Any], policy: str = "app-authorized", **more: Any
) -> dict[str, Any]:
    """The `servers` declaration of one server's URL: its policy, its tools and any other field
    (`deduplicates`, `label`, ...)."""
    return {server.url: {"policy": policy, "tools": dict(tools), **more}}


async def refused_call(
    url: str, tool: str, arguments: dict[str, Any], status: int, mode: str | None = None
) -> BaseException:
    """`refused` for one `call_tool(tool, arguments)`."""
    return await refused(url, status, lambda client: client.call_tool(tool, arguments), mode)


async def refused(
    url: str, status: int, call: Callable[[Any], Awaitable[object]], mode: str | None = None
) -> BaseException:
    """`call(client)` on a new session, refused by the server with HTTP `status` and not repeated:
    the error the SDK alone raises for it. On 2.x the call's own error (the session lives). On 1.x
    the SDK raises for any non-2xx in its transport's task (docs/mcp-lines.md): the session dies, the
    call is cancelled, and the session's `async with` raises `ExceptionGroup(httpx.HTTPStatusError)`,
    which keeps the server's status."""
    if LINE == 2:
        async with Client(url, mode=mode) as client:
            with pytest.raises(McpError) as raised:
                await call(client)
        return raised.value
    with pytest.raises(BaseExceptionGroup) as torn:
        async with Client(url, mode=mode) as client:
            await call(client)
    assert [(type(e), e.response.status_code) for e in leaves(torn.value)] == [(http.HTTPStatusError, status)]
    return torn.value


def leaves(group: BaseExceptionGroup[BaseException]) -> list[Any]:
    out: list[Any] = []
    for exc in group.exceptions:
        out.extend(leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return out
