"""A tool-calling client on whichever mcp line is installed: the tests' and the demo's one way in.

On mcp 2.x it is the SDK's own `mcp.Client`, unwrapped, as apps call it. mcp 1.x has no `Client`:
there an app opens `streamable_http_client` (or `stdio_client`) and a `ClientSession` itself, and
`SessionClient` does exactly that, with `Client`'s few methods the suites use. What else the two lines
name differently (the error class, the types module, the HTTP library, the protocol eras a client
can speak) is stated here once, so a suite is written once and runs on both (scripts/test-lines).
"""

from __future__ import annotations

import datetime
import inspect
from contextlib import AsyncExitStack
from types import TracebackType
from typing import Any

import mcp.client.stdio
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from harness.sdk import LINE

_SdkClient: Any = None  # mcp.Client; 1.x has none
if LINE == 2:
    import httpx2 as http
    import mcp_types as types
    from mcp import Client as _SdkClient
    from mcp.shared.exceptions import MCPError as McpError
else:  # mcp 1.x
    import httpx as http  # type: ignore[no-redef]
    import mcp.types as types  # type: ignore[no-redef]
    from mcp.shared.exceptions import McpError  # type: ignore[attr-defined,no-redef]

__all__ = ["ERAS", "Client", "McpError", "SessionClient", "http", "is_error", "types"]

# The protocol eras a client can speak: "legacy" (the initialize handshake, session ids) everywhere;
# the 2026-07-28 era (per-message headers, nothing sent on open) where `mcp.Client` takes a `mode`.
_TAKES_MODE = _SdkClient is not None and "mode" in inspect.signature(_SdkClient).parameters
ERAS: tuple[str, ...] = ("legacy", "2026-07-28") if _TAKES_MODE else ("legacy",)


def is_error(result: Any) -> bool:
    """A `CallToolResult`'s tool error: `is_error` on 2.x, `isError` on 1.x."""
    return bool(getattr(result, "is_error", None) or getattr(result, "isError", False))


def Client(target: str | StdioServerParameters, mode: str | None = None) -> Any:
    """`mcp.Client(target, mode=...)` where it exists, else a `SessionClient`. A `mode` this line
    cannot speak is an error, never quietly another era."""
    if mode is not None and mode not in ERAS:
        raise ValueError(f"mcp line {LINE} speaks the protocol eras {ERAS}, not this mode")
    if _SdkClient is None:
        return SessionClient(target)
    if _TAKES_MODE and mode is not None:
        return _SdkClient(target, mode=mode)
    return _SdkClient(target)


class SessionClient:
    """mcp 1.x: a `ClientSession` over streamable HTTP or stdio, opened and initialized as `Client`
    opens one on 2.x, with the methods of `Client` the suites call."""

    def __init__(self, target: str | StdioServerParameters) -> None:
        self._target = target
        self._stack = AsyncExitStack()
        self.session: ClientSession

    async def __aenter__(self) -> SessionClient:
        async with AsyncExitStack() as stack:
            if isinstance(self._target, StdioServerParameters):
                streams: Any = await stack.enter_async_context(mcp.client.stdio.stdio_client(self._target))
            else:
                streams = await stack.enter_async_context(streamable_http_client(self._target))
            self.session = await stack.enter_async_context(ClientSession(streams[0], streams[1]))
            await self.session.initialize()
            self._stack = stack.pop_all()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        return await self._stack.__aexit__(kind, exc, tb)

    async def call_tool(
        self, name: str, arguments: dict[str, Any] | None = None, read_timeout_seconds: float | None = None
    ) -> Any:
        timeout = None if read_timeout_seconds is None else datetime.timedelta(seconds=read_timeout_seconds)
        return await self.session.call_tool(name, arguments, read_timeout_seconds=timeout)  # type: ignore[arg-type]

    async def list_tools(self) -> Any:
        return await self.session.list_tools()
