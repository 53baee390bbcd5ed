"""A real fastmcp server whose tools run as tasks (the MCP tasks extension, SEP-2663), served by the
harness (its fault injector and counters) on 127.0.0.1. Needs fastmcp with fastmcp-tasks (the
.venv-tasks environment, scripts/test-lines); imported only by tests/tasks."""

from __future__ import annotations

import anyio
from fastmcp import FastMCP
from fastmcp_tasks import TasksExtension
from mcp.shared.exceptions import MCPError

from harness.server import Counters, ServerHandle, running_server

# How long a task's tool works before it ends: long enough that the client polls it at least once.
WORK_S = 0.2
# The slow tool's bound: it is cancelled long before, and a stuck test never waits past this.
SLOW_S = 10.0


def build_task_server(counters: Counters) -> FastMCP:
    """charge (changes), report (declared `on: [network]` by the tests), declined (raises MCPError:
    the task ends FAILED with its code), broken (raises: COMPLETED with isError) and slow (works
    until cancelled): each a task tool, each execution counted."""
    server = FastMCP("otel-mcp-replay-tasks")
    server.add_extension(TasksExtension(url="memory://"))

    @server.tool(task=True)
    async def charge(amount: int) -> str:
        counters.record_execution("charge")
        await anyio.sleep(WORK_S)
        return f"charged {amount}"

    @server.tool(task=True)
    async def report() -> str:
        counters.record_execution("report")
        await anyio.sleep(WORK_S)
        return "report"

    @server.tool(task=True)
    async def declined() -> str:
        counters.record_execution("declined")
        await anyio.sleep(WORK_S)
        raise MCPError(-32042, "declined by the bank")

    @server.tool(task=True)
    async def broken() -> str:
        counters.record_execution("broken")
        await anyio.sleep(WORK_S)
        raise ValueError("the ledger is closed")

    @server.tool(task=True)
    async def slow() -> str:
        counters.record_execution("slow")
        await anyio.sleep(SLOW_S)
        return "slow"

    return server


def running_task_server() -> ServerHandle:
    """The task server under uvicorn with the harness's fault injector, stopped by `with`."""
    counters = Counters()
    app = build_task_server(counters).http_app(path="/mcp")
    return running_server(counters=counters, asgi=(app, "/mcp"))
