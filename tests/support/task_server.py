"""A real fastmcp server whose tools run as tasks (the MCP tasks extension, SEP-2663), served by the
harness (its fault injector and counters) on 127.0.0.1. Needs fastmcp with fastmcp-tasks (the
.venv-tasks environment, scripts/test-lines); imported only by tests/tasks."""

from __future__ import annotations

import json
import re
from typing import Any

import anyio
from fastmcp import FastMCP
from fastmcp_tasks import TasksExtension
from mcp.shared.exceptions import MCPError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from harness.faults import replayed_request
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


class TaskMisnaming:
    """An ASGI middleware that has the task server misname tasks, as a faulty server may: while
    `polled_as` is set, every `tasks/get` of another task is answered as a poll of that one (its
    request rewritten, `Mcp-Name` too, so the answer names that task, whole); and while `reused` is
    set, every task a `tools/call` creates is answered with that task's id instead of its own."""

    _TASK_ID = re.compile(rb'"taskId"\s*:\s*"([^"]+)"')

    app: ASGIApp  # the task server's, set as it is served (running_task_server)

    def __init__(self) -> None:
        self.polled_as: str | None = None
        self.reused: str | None = None
        self.created: list[str] = []  # the ids the server made, in order (before any rewrite)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        body = b""
        while True:  # bounded by the request: its body ends
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        request = json.loads(body) if body.startswith(b"{") else None
        method = request.get("method") if isinstance(request, dict) else None
        other = self.polled_as
        if method == "tasks/get" and other is not None and request["params"].get("taskId") != other:
            request["params"]["taskId"] = other
            body = json.dumps(request).encode()
            scope = dict(scope, headers=_headers(scope["headers"], body, {b"mcp-name": other.encode()}))
        await self.app(
            scope, replayed_request(body), self._creating(send) if method == "tools/call" else send
        )

    def _creating(self, send: Send) -> Send:
        """`send`, with the answer's task id noted and, while `reused` is set, replaced."""
        start: list[Message] = []
        chunks: list[bytes] = []

        async def rewriting(message: Message) -> None:
            if message["type"] == "http.response.start":
                start.append(message)
                return
            if message["type"] != "http.response.body":
                await send(message)
                return
            chunks.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            body = b"".join(chunks)
            found = self._TASK_ID.search(body)
            if found is not None:
                self.created.append(found.group(1).decode())
                if self.reused is not None:
                    body = body[: found.start(1)] + self.reused.encode() + body[found.end(1) :]
            headers = _headers(start[0]["headers"], body, {})
            await send(dict(start[0], headers=headers))
            await send({"type": "http.response.body", "body": body, "more_body": False})

        return rewriting


def _headers(headers: Any, body: bytes, replaced: dict[bytes, bytes]) -> list[tuple[bytes, bytes]]:
    """`headers` with `replaced` and the length of `body` in place of their own."""
    kept = [(k, v) for k, v in headers if k.lower() not in replaced and k.lower() != b"content-length"]
    return [*kept, *replaced.items(), (b"content-length", str(len(body)).encode())]


def running_task_server(misnaming: TaskMisnaming | None = None) -> ServerHandle:
    """The task server under uvicorn with the harness's fault injector, stopped by `with`; behind
    `misnaming` when given."""
    counters = Counters()
    app: ASGIApp = build_task_server(counters).http_app(path="/mcp")
    if misnaming is not None:
        misnaming.app, app = app, misnaming
    return running_server(counters=counters, asgi=(app, "/mcp"))
