"""The conformance matrix's server on fastmcp (its own HTTP app around mcp's server): the same five
tools as every server of the matrix, each execution counted, the counts read at GET /count.

    python server.py MODE    MODE: sse (fastmcp's default: session ids, SSE answers) | stateless |
                             json (stateless, JSON answers)

It listens on 127.0.0.1 (a free port) and prints "READY <port>" once it accepts connections. It runs in
an environment of its own (fastmcp's newest line, not the test environment's).
"""

from __future__ import annotations

import socket
import sys
from collections import Counter
from typing import Any

import uvicorn
from fastmcp import FastMCP
from fastmcp.server.middleware import Middleware, MiddlewareContext
from fastmcp.tools.base import ToolResult
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, TextContent
from starlette.requests import Request
from starlette.responses import JSONResponse

counts: Counter[str] = Counter()
server = FastMCP("conformance-fastmcp")


@server.tool
def search(query: str) -> str:
    """read-only search"""
    counts["search"] += 1
    return f"found {query}"


@server.tool
def charge(amount: int) -> str:
    """charges once per call"""
    counts["charge"] += 1
    return f"charged {amount}"


@server.tool
def fail() -> CallToolResult:
    """a tool error (isError)"""
    counts["fail"] += 1
    return CallToolResult(content=[TextContent(type="text", text="the tool failed")], is_error=True)


@server.tool
def reject() -> str:
    """a JSON-RPC error (answered by the middleware below)"""
    return "unreachable"


@server.tool
def bulk(size: int) -> str:
    """an answer of the given size"""
    counts["bulk"] += 1
    return "x" * size


class Reject(Middleware):
    """fastmcp masks what a tool raises into an isError result; a middleware's MCPError goes out as
    the JSON-RPC error it is."""

    async def on_call_tool(self, context: MiddlewareContext[Any], call_next: Any) -> ToolResult:
        if context.message.name == "reject":
            counts["reject"] += 1
            raise MCPError(-32602, "rejected by the server")
        return await call_next(context)


server.add_middleware(Reject())


@server.custom_route("/count", methods=["GET"])
async def count(_: Request) -> JSONResponse:
    return JSONResponse(dict(counts))


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else "sse"
    if mode not in ("sse", "stateless", "json"):
        sys.exit(f"unknown mode {mode}")
    app = server.http_app(path="/mcp", stateless_http=mode != "sse", json_response=mode == "json")
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # connections queue from now on, before uvicorn serves them
    print(f"READY {sock.getsockname()[1]}", flush=True)
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])


if __name__ == "__main__":
    main()
