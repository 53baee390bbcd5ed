"""Task ids in captured request headers never reach the collector (SEP-2663: over HTTP `tasks/*`
carry `Mcp-Name` = the task id; fastmcp-tasks sends it from 4.1.8 on every `tasks/get`,
`tasks/update` and `tasks/cancel`, and a server may use task ids as bearer tokens).

An app under `opentelemetry-instrument`, the httpx2 instrumentor capturing request headers (`.*`,
or `mcp-name` alone, where no captured `Mcp-Method` says the request is a task's), calls `charge` as
a task twice (fastmcp's `Client.call_tool`, whose tasks client polls it to the end, and a
`call_tool_task` handle), then polls two tasks itself, outside any call: its handle's, and one
another process created (this test's), which the plugin never saw. Checked in the OTLP bytes the
receiver gets: no task id the server was polled for; the app's own polls drawn by the HTTP
instrumentation with their `Mcp-Name` captured, and masked. Without the plugin (the control) the ids
do leak. Runs in the tasks environment (scripts/test-lines).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import anyio
import fastmcp
import pytest
from fastmcp_tasks import call_tool_task
from tests.support.autoinstrument import app_env, under_instrument
from tests.support.task_server import running_task_server

from harness.receiver import OtlpReceiver
from harness.server import ServerHandle
from otel_mcp_replay.redaction import MASK

APP = textwrap.dedent(
    """
    import asyncio
    import sys

    import fastmcp
    from fastmcp_tasks import call_tool_task
    from fastmcp_tasks.client_models import ClientGetTaskResult, GetTaskRequest, GetTaskRequestParams

    url, foreign = sys.argv[1:3]


    async def main() -> None:
        async with fastmcp.Client(url) as client:
            await client.call_tool("charge", {"amount": 7})
            task = await call_tool_task(client, "charge", {"amount": 8})
            await task.result()
            for task_id in (task.task_id, foreign):  # the app's own polls, outside any call
                poll = GetTaskRequest(params=GetTaskRequestParams(task_id=task_id))
                await client.session.send_request(poll, ClientGetTaskResult)

    asyncio.run(main())
    print("app-done")
    """
)


@pytest.fixture
def server() -> Any:
    with running_task_server(None) as handle:
        yield handle


def foreign_task(server: ServerHandle) -> str:
    """A task another process created and saw to its end: this test's, with no plugin."""

    async def create() -> str:
        async with fastmcp.Client(server.url) as client:
            task = await call_tool_task(client, "charge", {"amount": 9})
            await task.result()
            return str(task.task_id)

    return anyio.run(create)


def run_app(
    tmp_path: Path, server: ServerHandle, receiver: OtlpReceiver, configurator: str, **extra: str
) -> None:
    script = tmp_path / "app.py"
    script.write_text(APP)
    declared = {server.url: {"policy": "app-authorized", "tools": {"charge": {"changes": True}}}}
    env = app_env(
        receiver,
        "task-ids-captured",
        configurator,
        OTEL_PYTHON_MCP_REPLAY_SERVERS=json.dumps(declared),
        **extra,
    )
    done = under_instrument(tmp_path, env, script, server.url, foreign_task(server))
    assert done.returncode == 0 and "app-done" in done.stdout, done.stderr[-3000:]


def polled(server: ServerHandle) -> set[str]:
    """The task ids the server was polled for, each poll's `Mcp-Name` its task id (fastmcp-tasks
    >= 4.1.8 sends it: the premise of this file)."""
    ids = set()
    for post in server.counters.post_log():
        if post.method == "tasks/get":
            task_id = json.loads(post.body)["params"]["taskId"]
            assert [value for name, value in post.headers if name.lower() == "mcp-name"] == [task_id]
            ids.add(task_id)
    return ids


def captured_names(receiver: OtlpReceiver) -> list[Any]:
    """The `Mcp-Name` header values the HTTP instrumentation captured, one per span that holds it."""
    return [
        span["attributes"]["http.request.header.mcp_name"]
        for span in receiver.spans()
        if "httpx" in span["scope"] and "http.request.header.mcp_name" in span["attributes"]
    ]


@pytest.mark.parametrize(
    ("configurator", "capture"),
    # The plugin's configurator, and opentelemetry-distro's (whose exporter the plugin puts behind redaction).
    [("mcp_replay", ".*"), ("mcp_replay", "mcp-name"), ("configurator", "mcp-name")],
)
def test_task_ids_in_captured_headers_never_reach_the_collector(
    tmp_path: Path, server: ServerHandle, configurator: str, capture: str
) -> None:
    with OtlpReceiver() as receiver:
        capturing = {"OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_CLIENT_REQUEST": capture}
        run_app(tmp_path, server, receiver, configurator, **capturing)
        # The app's two polls of its own, drawn by the HTTP instrumentation (a call's polls are the
        # plugin's attempt spans, which capture no header).
        assert receiver.wait_for(lambda _: len(captured_names(receiver)) >= 2, 20)
        raw = receiver.raw_bytes()
        names = captured_names(receiver)
    ids = polled(server)
    assert len(ids) == 3  # the call's, the handle's, the other process's
    assert not [task_id for task_id in ids if task_id.encode() in raw]
    assert names and all(value == [MASK] for value in names)
    assert server.counters.executions("charge") == 3


def test_control_without_the_plugin_the_task_ids_do_leak(tmp_path: Path, server: ServerHandle) -> None:
    with OtlpReceiver() as receiver:
        run_app(
            tmp_path,
            server,
            receiver,
            "configurator",
            OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_CLIENT_REQUEST="mcp-name",
            OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="mcp_replay",
        )
        assert receiver.wait_for(lambda _: len(captured_names(receiver)) >= 2, 20)
        raw = receiver.raw_bytes()
    ids = polled(server)
    assert len(ids) == 3 and all(task_id.encode() in raw for task_id in ids)
