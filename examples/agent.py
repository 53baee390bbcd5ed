"""A scripted MCP agent with no tracing code: run it under `opentelemetry-instrument`.

It calls tools on the MCP server at $MCP_DEMO_URL (the "billing" endpoint of replay.toml) and, if
set, $MCP_DEMO_CATALOG_URL (the "catalog" endpoint), and prints what it saw for each call: the
server's answer, or the error's type; never the arguments it sent (the idempotency key, the address).
Whether a failed call is sent again is not decided here: the otel-mcp-replay plugin reads the
app's declaration (OTEL_PYTHON_MCP_REPLAY_CONFIG or _SERVERS) and records every attempt.

    opentelemetry-instrument python examples/agent.py

It runs on either mcp line: 2.x's `Client`, or on 1.x (which has none) a `ClientSession` over
streamable HTTP, opened by `connect`; the rest is the same on both.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

try:  # mcp 2.x
    from mcp import Client
    from mcp.shared.exceptions import MCPError as McpError
except ImportError:  # mcp 1.x
    from mcp import ClientSession, McpError
    from mcp.client.streamable_http import streamable_http_client

    Client = None

# (what the step shows, tool, arguments)
BILLING_STEPS: list[tuple[str, str, dict[str, Any]]] = [
    ("read-only: may repeat", "search", {"query": "invoices due in march"}),
    ("changes, carries its key", "charge", {"amount": 42, "idempotency_key": "order-7f3a9c"}),
    ("changes, no key", "send_email", {"to": "ada@example.com", "body": "Your receipt for order 7f3a9c"}),
]
CATALOG_STEPS: list[tuple[str, str, dict[str, Any]]] = [
    ("compatibility policy", "search", {"query": "blue widgets"}),
]


@asynccontextmanager
async def connect(url: str, mode: str) -> AsyncIterator[Any]:
    """A client of the MCP server at `url`: mcp 2.x's `Client` in protocol `mode`; on mcp 1.x, which
    speaks the "legacy" era only, an initialized `ClientSession` over streamable HTTP."""
    if Client is not None:
        async with Client(url, mode=mode) as client:
            yield client
        return
    async with streamable_http_client(url) as (read, write, _), ClientSession(read, write) as session:
        await session.initialize()
        yield session


async def run(url: str, steps: list[tuple[str, str, dict[str, Any]]], mode: str) -> None:
    async with connect(url, mode) as client:
        for why, tool, arguments in steps:
            try:
                result = await client.call_tool(tool, arguments)
                text = " ".join(getattr(block, "text", "") for block in result.content)
                failed = getattr(result, "is_error", None) or getattr(result, "isError", False)  # 2.x, 1.x
                seen = f"tool error: {text}" if failed else f"ok: {text}"
            except McpError as exc:  # UnknownEffectError is the line's McpError too
                seen = f"{type(exc).__name__} (code {exc.error.code})"
            print(f"{tool:<11} {why:<26} -> {seen}", flush=True)


async def main() -> None:
    # mcp 2.x: "legacy" (the initialize handshake, session ids), "2026-07-28" or "auto"; 1.x: legacy.
    mode = os.environ.get("MCP_DEMO_MODE", "auto")
    await run(os.environ["MCP_DEMO_URL"], BILLING_STEPS, mode)
    catalog = os.environ.get("MCP_DEMO_CATALOG_URL")
    if catalog:
        await run(catalog, CATALOG_STEPS, mode)


if __name__ == "__main__":
    asyncio.run(main())
