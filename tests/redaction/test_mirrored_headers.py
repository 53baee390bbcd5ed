"""Tool arguments the SDK mirrors into `Mcp-Param-*` request headers (2026-07-28, `x-mcp-header`).

Two things hold, against the real server (harness/server.py: `lookup` and `transfer` mirror
`account`, `transfer` its `idempotency_key` too):
- the values of captured `Mcp-Param-*` headers never leave the process: masked on every exported
  span whatever instrumentation captured them and however it spells the key, checked in the OTLP
  bytes an app under `opentelemetry-instrument` (header capture `.*`, the httpx2 instrumentor) sends
  to harness/receiver.py, under the plugin's configurator and under opentelemetry-distro's (whose
  exporter the plugin puts behind redaction when instrumented), with a control run showing the
  canaries do leak without the plugin;
- the SDK's own recovery from HEADER_MISMATCH (a client that has not listed the tool: re-list, resend
  once) completes for a read tool as with the plain SDK, counted on the server; for a `changes` tool
  the repeat guard refuses the resend, and its error says that the SDK resent, and what to do.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from tests.support.autoinstrument import app_env, under_instrument
from tests.support.telemetry import Telemetry, records

from harness.client import ERAS, Client, McpError
from harness.receiver import OtlpReceiver
from harness.server import Counters, ServerHandle, build_server, running_server
from otel_mcp_replay import RedactingSpanProcessor, RepeatRefusedError, repeat_confirmed
from otel_mcp_replay import telemetry as t
from otel_mcp_replay.redaction import MASK

MODERN = "2026-07-28"
pytestmark = pytest.mark.anyio

ACCOUNT = "ACCT-Canary4471"  # a tool argument the SDK mirrors into Mcp-Param-Account
KEY = "idem-Canary4472"  # the idempotency key's value, mirrored into Mcp-Param-Key

needs_modern = pytest.mark.skipif(MODERN not in ERAS, reason="the installed mcp line has no 2026-07-28 era")


@pytest.fixture
def server() -> Iterator[ServerHandle]:
    counters = Counters()
    with running_server(counters=counters, server=build_server(counters, era_tools=True)) as handle:
        yield handle


def declared(server: ServerHandle) -> dict[str, Any]:
    return {
        server.url: {
            "policy": "app-authorized",
            "tools": {"lookup": {"on": ["network"]}, "transfer": {"changes": True}},
            "deduplicates": {"argument": "idempotency_key"},
        }
    }


def mirrored(server: ServerHandle, tool: str) -> list[str]:
    """The Mcp-Param-* header values of `tool`'s POSTs, as the server received them."""
    return [
        value
        for post in server.counters.post_log()
        if post.tool == tool
        for name, value in post.headers
        if name.lower().startswith("mcp-param-")
    ]


# -- the spellings: every exported span, whatever captured the header ---------------------------


@pytest.mark.parametrize(
    "key",
    [
        "http.request.header.mcp_param_account",  # the httpx/httpx2 instrumentors' spelling
        "http.request.header.mcp-param-account",
        "HTTP.REQUEST.HEADER.MCP-PARAM-ACCOUNT",
        "http.request.header.Mcp-Param-Account",
        "http.request.header.McpParamAccount",
        "http.request.header.mcpparamaccount",
        "app.captured.mcp_param_key",
    ],
)
def test_a_captured_mcp_param_header_is_masked_however_its_key_is_spelled(key: str) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(RedactingSpanProcessor(SimpleSpanProcessor(exporter)))
    with provider.get_tracer("other-instrumentation").start_as_current_span("POST") as span:
        span.set_attribute(key, (ACCOUNT,))
        span.set_attribute(key + "_as_text", ACCOUNT)
        span.add_event("captured", {key: ACCOUNT})
    provider.shutdown()
    (exported,) = exporter.get_finished_spans()
    attributes = dict(exported.attributes or {})
    assert attributes[key] == (MASK,)
    assert attributes[key + "_as_text"] == MASK
    assert dict(exported.events[0].attributes or {})[key] == MASK
    assert ACCOUNT not in repr(attributes) + repr(dict(exported.events[0].attributes or {}))


def test_other_mcp_headers_and_names_are_left_alone() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(RedactingSpanProcessor(SimpleSpanProcessor(exporter)))
    kept = {
        "http.request.header.mcp_protocol_version": ("2026-07-28",),
        "http.request.header.mcp_method": ("tools/call",),
        "mcp.method.name": "tools/call",
        "gen_ai.tool.name": "lookup",
    }
    with provider.get_tracer("other").start_as_current_span("POST") as span:
        span.set_attributes(kept)
    provider.shutdown()
    (exported,) = exporter.get_finished_spans()
    assert dict(exported.attributes or {}) == kept


# -- the same under opentelemetry-instrument, in the OTLP bytes -------------------------------

APP = textwrap.dedent(
    """
    import asyncio
    import sys

    from harness.client import Client, is_error  # mcp.Client, or on mcp 1.x a ClientSession

    url, mode, account, key = sys.argv[1:5]


    async def main() -> None:
        async with Client(url, mode=mode) as client:
            await client.list_tools()  # the SDK mirrors only what a listing declared
            looked = await client.call_tool("lookup", {"account": account})
            keyed = {"account": account, "amount": 3, "idempotency_key": key}
            moved = await client.call_tool("transfer", keyed)
            assert not is_error(looked) and not is_error(moved), (looked, moved)
        # The same mirrored headers on a POST no tool call of the plugin's carries (another
        # client's): the HTTP client instrumentation draws and captures this one itself.
        from harness.client import http

        async with http.AsyncClient() as other:
            headers = {"Mcp-Param-Account": account, "Mcp-Param-Key": key}
            await other.post(url, headers=headers, json={"jsonrpc": "2.0", "method": "ping"})

    asyncio.run(main())
    print("app-done")
    """
)


def run_app(
    tmp_path: Path,
    server: ServerHandle,
    receiver: OtlpReceiver,
    mode: str,
    configurator: str,
    **extra_env: str,
) -> None:
    script = tmp_path / "app.py"
    script.write_text(APP)
    env = app_env(
        receiver,
        "mirrored-headers",
        configurator,
        # A standard setting: capture every request header the client sends.
        OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_CLIENT_REQUEST=".*",
        OTEL_PYTHON_MCP_REPLAY_SERVERS=json.dumps(declared(server)),
        **extra_env,
    )
    done = under_instrument(tmp_path, env, script, server.url, mode, ACCOUNT, KEY)
    assert done.returncode == 0 and "app-done" in done.stdout, done.stderr[-3000:]
    assert "Failed to auto initialize" not in done.stderr


def posts_of_the_httpx2_instrumentor(receiver: OtlpReceiver) -> list[dict[str, Any]]:
    return [
        span["attributes"]
        for span in receiver.spans()
        if "httpx" in span["scope"]
        and span["kind"] == "CLIENT"
        and "POST" in (span["attributes"].get("http.request.method"), span["attributes"].get("http.method"))
    ]


@pytest.mark.parametrize(
    "configurator", ["mcp_replay", "configurator"]
)  # the plugin's, opentelemetry-distro's
@pytest.mark.parametrize("mode", ERAS)
def test_mirrored_arguments_never_reach_the_collector_under_opentelemetry_instrument(
    tmp_path: Path, server: ServerHandle, mode: str, configurator: str
) -> None:
    with OtlpReceiver() as receiver:
        run_app(tmp_path, server, receiver, mode, configurator)
        assert receiver.wait_for(
            lambda spans: any(s["name"].startswith(t.CALL_SPAN_PREFIX) for s in spans), 20
        )
        assert receiver.wait_for(lambda _: len(posts_of_the_httpx2_instrumentor(receiver)) >= 2, 20)
        raw = receiver.raw_bytes()
        posts = posts_of_the_httpx2_instrumentor(receiver)
        spans = receiver.spans()
    assert server.counters.executions("lookup") == 1 and server.counters.executions("transfer") == 1
    assert ACCOUNT.encode() not in raw and KEY.encode() not in raw
    # The tool calls' POSTs are the plugin's attempt spans, which capture no header: the
    # instrumentation drew none of them (what it drew is the listing's, the session's and the other client's).
    attempts = [s for s in spans if t.ATTEMPT in s["attributes"]]
    assert len(attempts) == 2 and not [k for a in attempts for k in a["attributes"] if "header" in k]
    assert all(a.get("http.request.header.mcp_method", ("",))[0] != "tools/call" for a in posts)
    captured = [
        (key, value) for attributes in posts for key, value in attributes.items() if "mcp_param" in key
    ]
    # The other client's POST: its mirrored headers captured, and masked.
    assert {key for key, _ in captured} >= {
        "http.request.header.mcp_param_account",
        "http.request.header.mcp_param_key",
    }
    assert all(value == [MASK] for _, value in captured)
    if mode == MODERN:  # the era mirrors them: the SDK sent them with the tool call
        assert sorted(mirrored(server, "transfer")) == sorted([ACCOUNT, KEY])
    else:  # the legacy era mirrors nothing
        assert mirrored(server, "transfer") == []


@needs_modern
def test_control_without_the_plugin_the_mirrored_arguments_do_leak(
    tmp_path: Path, server: ServerHandle
) -> None:
    with OtlpReceiver() as receiver:
        # opentelemetry-distro's own configurator, and the plugin not instrumented: nothing redacts.
        run_app(
            tmp_path,
            server,
            receiver,
            MODERN,
            "configurator",
            OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="mcp_replay",
        )
        # The other client's POST, the only one of the mirrored headers the instrumentation draws.
        assert receiver.wait_for(lambda _: len(posts_of_the_httpx2_instrumentor(receiver)) >= 2, 20)
        raw = receiver.raw_bytes()
    assert ACCOUNT.encode() in raw and KEY.encode() in raw


# -- the SDK's HEADER_MISMATCH recovery -----------------------------------------------------


async def lookup_once(server: ServerHandle) -> str:
    async with Client(server.url, mode=MODERN) as client:  # never listed: the first send is rejected
        result = await client.call_tool("lookup", {"account": "ACC-1"})
    return str(result.content[0].text)


@needs_modern
async def test_the_header_mismatch_recovery_of_a_read_tool_completes_as_with_the_plain_sdk(
    server: ServerHandle, instrument: Any, telemetry: Telemetry
) -> None:
    plain = await lookup_once(server)
    plain_runs, plain_posts = server.counters.executions("lookup"), server.counters.tool_posts("lookup")
    assert (plain_runs, plain_posts) == (1, 2)  # rejected once, resent after the re-list: ran once
    server.reset()

    instrument(servers=declared(server))
    assert await lookup_once(server) == plain
    assert (server.counters.executions("lookup"), server.counters.tool_posts("lookup")) == (
        plain_runs,
        plain_posts,
    )
    assert mirrored(server, "lookup") == ["ACC-1"]  # the resend carried the header the listing declared
    found = records(telemetry)
    assert [(r[t.ROUND], r[t.VERDICT], list(r[t.ATTEMPTS_STATUS])) for r in found] == [
        (1, "failed", [400]),
        (2, "completed", [200]),
    ]
    calls = [s for s in telemetry.spans() if s.name == f"{t.CALL_SPAN_PREFIX} lookup" and s.events]
    assert len(calls) == 1  # one call of the app's, one span


@needs_modern
async def test_a_refused_resend_of_a_changing_tool_says_the_sdk_resent_and_what_to_do(
    server: ServerHandle, instrument: Any, telemetry: Telemetry
) -> None:
    instrument(servers=declared(server))
    arguments = {"account": "ACC-2", "amount": 3}
    async with Client(server.url, mode=MODERN) as client:
        with pytest.raises(RepeatRefusedError) as refused:
            await client.call_tool("transfer", arguments)
        message = str(refused.value)
        assert refused.value.sdk_resend is True and refused.value.__cause__ is None
        assert "HEADER_MISMATCH" in message and "the SDK's own resend" in message
        assert "failed moments ago" not in message  # the app called once
        for advice in ("list the tools before calling", "idempotency key", "repeat_confirmed()"):
            assert advice in message
        assert "ACC-2" not in message  # never an argument
        assert (server.counters.executions("transfer"), server.counters.tool_posts("transfer")) == (0, 1)

        # What the message says works: the app checked (it did not run), lists, and repeats on purpose.
        await client.list_tools()
        with repeat_confirmed():
            result = await client.call_tool("transfer", arguments)
    assert not result.is_error
    assert (server.counters.executions("transfer"), server.counters.tool_posts("transfer")) == (1, 2)


@needs_modern
async def test_a_changing_tool_listed_first_is_never_rejected_nor_refused(
    server: ServerHandle, instrument: Any, telemetry: Telemetry
) -> None:
    instrument(servers=declared(server))
    async with Client(server.url, mode=MODERN) as client:
        await client.list_tools()
        result = await client.call_tool("transfer", {"account": "ACC-3", "amount": 3})
    assert not result.is_error
    assert (server.counters.executions("transfer"), server.counters.tool_posts("transfer")) == (1, 1)
    assert [r[t.VERDICT] for r in records(telemetry)] == ["completed"]


@needs_modern
async def test_the_plain_sdk_runs_the_changing_tool_once_after_the_mismatch(server: ServerHandle) -> None:
    """The control for the refusal above: without the plugin the SDK's resend goes through (the
    rejected first send never ran), which the plugin cannot know, so it asks the app."""
    async with Client(server.url, mode=MODERN) as client:
        result = await client.call_tool("transfer", {"account": "ACC-4", "amount": 3})
    assert not result.is_error
    assert (server.counters.executions("transfer"), server.counters.tool_posts("transfer")) == (1, 2)


def test_mcp_error_is_the_base_of_the_refusal() -> None:
    assert issubclass(RepeatRefusedError, McpError)
