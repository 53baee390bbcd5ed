"""A scripted MCP agent with no tracing code: run it under `opentelemetry-instrument`.

It calls tools on the MCP server at $MCP_DEMO_URL (the "billing" endpoint of replay.toml) and, if
set, $MCP_DEMO_CATALOG_URL (the "catalog" endpoint), and prints what it saw for each call: the
server's answer, or the error's type; never the arguments it sent (the idempotency key, the address).
Whether a failed call is sent again is not decided here: the otel-mcp-replay plugin reads the
app's declaration (OTEL_PYTHON_MCP_REPLAY_CONFIG or _SERVERS) and records every attempt.

    opentelemetry-instrument python examples/agent.py
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from mcp import Client
from mcp.shared.exceptions import MCPError

# (what the step shows, tool, arguments)
BILLING_STEPS: list[tuple[str, str, dict[str, Any]]] = [
    ("read-only: may repeat", "search", {"query": "invoices due in march"}),
    ("changes, carries its key", "charge", {"amount": 42, "idempotency_key": "order-7f3a9c"}),
    ("changes, no key", "send_email", {"to": "ada@example.com", "body": "Your receipt for order 7f3a9c"}),
]
CATALOG_STEPS: list[tuple[str, str, dict[str, Any]]] = [
    ("compatibility policy", "search", {"query": "blue widgets"}),
]


async def run(url: str, steps: list[tuple[str, str, dict[str, Any]]], mode: str) -> None:
    async with Client(url, mode=mode) as client:
        for why, tool, arguments in steps:
            try:
                result = await client.call_tool(tool, arguments)
                text = " ".join(getattr(block, "text", "") for block in result.content)
                seen = f"tool error: {text}" if result.is_error else f"ok: {text}"
            except MCPError as exc:  # UnknownEffectError is an MCPError too
                seen = f"{type(exc).__name__} (code {exc.code})"
            print(f"{tool:<11} {why:<26} -> {seen}", flush=True)


async def main() -> None:
    mode = os.environ.get("MCP_DEMO_MODE", "auto")  # "legacy": the initialize handshake, session ids
    await run(os.environ["MCP_DEMO_URL"], BILLING_STEPS, mode)
    catalog = os.environ.get("MCP_DEMO_CATALOG_URL")
    if catalog:
        await run(catalog, CATALOG_STEPS, mode)


if __name__ == "__main__":
    asyncio.run(main())
