"""No size lifts the law (issue 34): a tools/call of any size is governed, and an answer of any
size the SDK accepts is seen. Against the SDK's own server on loopback, faults injected at the ASGI
level, executions counted on the server; both mcp lines (scripts/test-lines runs this file on 1.30),
both protocol eras where the line has them.
"""

from __future__ import annotations

import json
from contextlib import AsyncExitStack
from typing import Any

import anyio
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from tests.support.calls import declared
from tests.support.telemetry import Telemetry, attempt_spans, records, the_record

from harness.client import Client, SessionClient, http
from harness.faults import DropBeforeExecution
from harness.sdk import LINE
from harness.server import ServerHandle
from otel_mcp_replay import RepeatRefusedError, ReplayUnavailableError, UnknownEffectError
from otel_mcp_replay import telemetry as t

pytestmark = pytest.mark.anyio

LARGE = 9 * 1024 * 1024  # past the 8 MiB the plugin once let through ungoverned
LARGE_ANSWER = 5 * 1024 * 1024  # past the 4 MiB event the answer watch once stopped reading


async def test_a_tools_call_of_any_size_is_governed(
    server: ServerHandle, telemetry: Telemetry, instrument: Any, mode: str
) -> None:
    """A cut 9 MiB call of a changing tool: its attempt is drawn and recorded, it fails that call
    alone with UnknownEffectError, and the guard refuses the same call on a new client."""
    instrument(servers=declared(server, {"send_email": {"changes": True, "on": ["network"]}}))
    email = {"to": "ada@example.com", "body": "y" * LARGE}
    server.faults.add("send_email", DropBeforeExecution())
    async with Client(server.url, mode=mode) as client:
        with anyio.fail_after(30), pytest.raises(UnknownEffectError):
            await client.call_tool("send_email", email)
    async with Client(server.url, mode=mode) as client:
        with anyio.fail_after(30), pytest.raises(RepeatRefusedError):
            await client.call_tool("send_email", dict(email))
    assert server.counters.tool_posts("send_email") == 1  # the blind repeat never left
    assert server.counters.executions("send_email") == 0
    first, second = records(telemetry)
    assert (first[t.SENT], first[t.EFFECT], first[t.VERDICT], first[t.MAY_HAVE_RUN]) == (
        1,
        "unknown",
        "failed",
        True,
    )
    assert first[t.ATTEMPTS_FAILURE] == ("network",)
    assert (second[t.SENT], second[t.EFFECT]) == (0, "none")
    (attempt,) = attempt_spans(telemetry)
    assert (attempt.attributes or {})[t.EFFECT] == "unknown"


def _uncapped(url: str, mode: str) -> Any:
    """A client whose SDK accepts SSE events of any size (2.x caps them at 1 MiB unless told None;
    1.x has no cap)."""
    if LINE == 1:
        return SessionClient(url)
    return Client(streamable_http_client(url, max_sse_event_size=None), mode=mode)  # type: ignore[arg-type,call-arg]


async def test_an_answer_of_any_size_the_sdk_accepts_is_seen(
    server: ServerHandle, telemetry: Telemetry, instrument: Any, mode: str
) -> None:
    instrument(servers=declared(server, {"bulk": {"on": ["network"]}}))
    async with _uncapped(server.url, mode) as client:
        with anyio.fail_after(30):
            result = await client.call_tool("bulk", {"size": LARGE_ANSWER})
    assert len(result.content[0].text) == LARGE_ANSWER  # the SDK accepted it: the call completed
    assert server.counters.executions("bulk") == 1
    record = the_record(telemetry)
    assert (record[t.SENT], record[t.EFFECT], record[t.VERDICT], record[t.MAY_HAVE_RUN]) == (
        1,
        "applied",
        "completed",
        False,
    )
    assert record[t.ATTEMPTS_FAILURE] == ("",)


class _DeepBodies(http.AsyncClient):  # type: ignore[misc,name-defined]
    """An HTTP client that sends each tools/call as bytes of its own making, its arguments nested
    deeper than any JSON parser in the process reads: a request the plugin cannot read."""

    def build_request(self, method: str, url: Any, **kwargs: Any) -> Any:
        message = kwargs.get("json")
        if isinstance(message, dict) and message.get("method") == "tools/call":
            kwargs.pop("json")
            text = json.dumps(message, separators=(",", ":")).encode()
            deep = b'"deep":' + b"[" * 100_000 + b"]" * 100_000 + b","
            kwargs["content"] = text.replace(b'"arguments":{', b'"arguments":{' + deep, 1)
            kwargs.setdefault("headers", {})["content-type"] = "application/json"
        return super().build_request(method, url, **kwargs)


async def test_a_call_whose_request_cannot_be_read_fails_closed_before_sending(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    instrument(servers=declared(server, {"search": {"on": ["network"]}}, policy="compatibility"))
    async with AsyncExitStack() as stack:
        transport = streamable_http_client(server.url, http_client=_DeepBodies())
        if LINE == 2:
            client: Any = await stack.enter_async_context(Client(transport))  # type: ignore[arg-type]
        else:  # 1.x: the session opened as an app opens one (harness.client.SessionClient)
            streams = await stack.enter_async_context(transport)
            client = await stack.enter_async_context(ClientSession(streams[0], streams[1]))
            await client.initialize()
        with anyio.fail_after(20), pytest.raises(ReplayUnavailableError, match="could not be read"):
            await client.call_tool("search", {"query": "q"})
    assert server.counters.tool_posts("search") == 0  # never sent
    record = the_record(telemetry)
    assert (record[t.SENT], record[t.EFFECT], record[t.VERDICT]) == (0, "none", "failed")
