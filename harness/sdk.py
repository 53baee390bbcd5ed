"""The mcp server names the harness uses, from whichever mcp line is installed.

mcp 2.x serves with `mcp.server.mcpserver.MCPServer`; mcp 1.x (1.24 and later) with
`mcp.server.fastmcp.FastMCP`, the same server under its old name. The line is chosen by what is
importable, once, when the harness is imported. Type checkers see the 2.x names (mypy runs against
2.x); the two lines differ only where `build_streamable_app` and `build_sse_app` say, so the rest of
the harness is written once. See docs/mcp-lines.md for what else differs between the lines.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import ASGIApp

if TYPE_CHECKING:
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp_types import ToolAnnotations

    LINE: Literal[1, 2]
else:
    try:
        from mcp.server.mcpserver import Context, MCPServer
        from mcp.server.mcpserver.exceptions import ToolError
        from mcp_types import ToolAnnotations

        LINE = 2
    except ImportError:  # mcp 1.x: the server was called FastMCP, the types lived in mcp.types
        from mcp.server.fastmcp import Context
        from mcp.server.fastmcp import FastMCP as MCPServer
        from mcp.server.fastmcp.exceptions import ToolError
        from mcp.types import ToolAnnotations

        LINE = 1

__all__ = [
    "LINE",
    "Context",
    "MCPServer",
    "ToolAnnotations",
    "ToolError",
    "build_sse_app",
    "build_streamable_app",
    "tool_annotations",
]


def tool_annotations(**hints: bool) -> ToolAnnotations:
    """`ToolAnnotations` from the wire's camelCase names (`readOnlyHint=True`), which both lines
    accept: 1.x names its fields so, 2.x takes them as aliases of its snake_case fields."""
    return ToolAnnotations.model_validate(hints)


def build_streamable_app(
    server: MCPServer, *, json_response: bool, stateless: bool, security: TransportSecuritySettings
) -> ASGIApp:
    """The streamable-HTTP ASGI app (path `/mcp` on both lines). Call it once per server: both lines
    build the app's session manager on the first call and keep it."""
    if LINE == 2:
        return server.streamable_http_app(
            json_response=json_response, stateless_http=stateless, transport_security=security
        )
    # 1.x takes these as the server's settings, read when the app is built.
    settings: Any = server.settings  # type: ignore[attr-defined]
    settings.json_response = json_response
    settings.stateless_http = stateless
    settings.transport_security = security
    app: ASGIApp = server.streamable_http_app()  # type: ignore[call-arg]
    return app


def build_sse_app(server: MCPServer, *, security: TransportSecuritySettings) -> ASGIApp:
    """The legacy SSE ASGI app: the stream at `/sse`, messages POSTed to `/messages/?session_id=...`."""
    if LINE == 2:
        return server.sse_app(transport_security=security)
    settings: Any = server.settings  # type: ignore[attr-defined]
    settings.transport_security = security
    app: ASGIApp = server.sse_app()  # type: ignore[call-arg]
    return app
