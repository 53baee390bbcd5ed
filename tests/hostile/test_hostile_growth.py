"""What a server or the environment sends costs work linear in its size.

Each case's work is counted (tests/growth.py: lines run and calls made, never a clock) at a size
and at twice that size: twice the input may cost at most LINEAR_RATIO times the work. Counts are
exact on any machine under any load, so the sizes are small; the timed figures, on inputs many
times larger, are the benchmark's (benchmarks/hostile.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable

import anyio
import pytest
from tests.support.growth import assert_linear
from tests.support.streams import answers_watched, event_stream

from otel_mcp_replay import environment_variables as ev
from otel_mcp_replay.config import configuration_of
from otel_mcp_replay.endpoints import NO_SERVERS, origin_of, servers_of

KIB = 1024
STREAM = 128 * KIB  # an event stream's size (and twice it)
TEXT = 64 * KIB  # an environment value's or a URL's
ANSWER = b"event: message\ndata: " + json.dumps({"jsonrpc": "2.0", "id": 7, "result": {}}).encode() + b"\n\n"


# --- event streams (F4) --------------------------------------------------------------------------


def sse_case(stream_of: Callable[[int], bytes], chunk: int | None) -> Callable[[int], Callable[[], object]]:
    """`stream_of(n)` in chunks of `chunk` bytes (None: all at once), read as the plugin reads every
    event stream (the SDK's own reader, each event told to its watch); the answer it ends with
    (id 7) must be seen, once."""

    def case(n: int) -> Callable[[], object]:
        stream = stream_of(n)
        size = chunk or len(stream)
        chunks = [stream[i : i + size] for i in range(0, len(stream), size)]

        def run() -> None:
            assert anyio.run(answers_watched, event_stream(chunks)) == [(7, "result")]

        return run

    return case


PADDINGS = {
    "blank lines": b"\n",
    "blank lines, CRLF": b"\r\n",
    "blank lines, CR": b"\r",
    "comments": b": x\n",
    "other fields": b"id: 1\nevent: ping\n",
}


@pytest.mark.parametrize("chunk", [1024, 64 * 1024, None], ids=["1KiB", "64KiB", "whole"])
@pytest.mark.parametrize("padding", list(PADDINGS), ids=list(PADDINGS))
def test_an_event_stream_s_padding_costs_linear_time(padding: str, chunk: int | None) -> None:
    unit = PADDINGS[padding]
    assert_linear(sse_case(lambda n: unit * (n // len(unit)) + ANSWER, chunk), STREAM)


def comments_inside_an_event(n: int) -> bytes:
    # An event whose data began, then a flood of comments before the blank line: the data line of
    # the answer comes later in the same event and is joined to the first.
    return b'data: {"jsonrpc": "2.0",\n' + b": x\n" * (n // 4) + b'data: "id": 7, "result": {}}\n\n'


@pytest.mark.parametrize("chunk", [1024, None], ids=["1KiB", "whole"])
def test_comments_inside_an_event_cost_linear_time(chunk: int | None) -> None:
    assert_linear(sse_case(comments_inside_an_event, chunk), STREAM)


def a_large_answer(n: int) -> bytes:
    result = {"jsonrpc": "2.0", "id": 7, "result": {"content": [{"type": "text", "text": "x" * n}]}}
    return b"event: message\r\ndata: " + json.dumps(result).encode() + b"\r\n\r\n"


@pytest.mark.parametrize("chunk", [1024, 64 * 1024], ids=["1KiB", "64KiB"])
def test_a_large_answer_in_small_chunks_costs_linear_time(chunk: int) -> None:
    assert_linear(sse_case(a_large_answer, chunk), STREAM)


# --- the environment ------------------------------------------------------------------------------


def environment(variable: str, make: Callable[[int], str]) -> Callable[[int], Callable[[], object]]:
    def case(n: int) -> Callable[[], object]:
        environ = {variable: make(n)}
        return lambda: configuration_of({}, environ)

    return case


def many_tools(n: int) -> str:
    tools = {f"tool_{i}": {"on": ["throttle"]} for i in range(n // 40)}
    return json.dumps({"http://127.0.0.1:9/mcp": {"policy": "app-authorized", "tools": tools}})


def many_servers(n: int) -> str:
    return json.dumps({f"http://h{i}.example:{1 + i % 60000}/mcp/{i}": {} for i in range(n // 40)})


def unknown_field_last(n: int) -> str:
    # A refusal counts the stranger's position: never by searching the mapping again per field.
    tools = {f"tool_{i}": {} for i in range(n // 20)}
    return json.dumps({"http://127.0.0.1:9/mcp": {"tools": tools, "https://u:p@x/": 1}})


ENVIRONMENTS = {
    "servers: many tools": (ev.OTEL_PYTHON_MCP_REPLAY_SERVERS, many_tools),
    "servers: many endpoints": (ev.OTEL_PYTHON_MCP_REPLAY_SERVERS, many_servers),
    "servers: unknown field last": (ev.OTEL_PYTHON_MCP_REPLAY_SERVERS, unknown_field_last),
    "servers: deep nesting": (ev.OTEL_PYTHON_MCP_REPLAY_SERVERS, lambda n: "[" * n),
    "servers: a long key": (ev.OTEL_PYTHON_MCP_REPLAY_SERVERS, lambda n: json.dumps({"h" * n: {}})),
    "servers: a long tool name": (
        ev.OTEL_PYTHON_MCP_REPLAY_SERVERS,
        lambda n: json.dumps({"http://h/mcp": {"tools": {"t" * n: {"on": 1}}}}),
    ),
    "max attempts: digits": (ev.OTEL_PYTHON_MCP_REPLAY_MAX_ATTEMPTS, lambda n: "9" * n),
    "retry budget: digits": (ev.OTEL_PYTHON_MCP_REPLAY_RETRY_BUDGET, lambda n: "1," + "0" * n + "1"),
    "retry budget: commas": (ev.OTEL_PYTHON_MCP_REPLAY_RETRY_BUDGET, lambda n: "," * n),
    "retry on throttle": (ev.OTEL_PYTHON_MCP_REPLAY_RETRY_ON_THROTTLE, lambda n: "t" * n),
}


@pytest.mark.parametrize("name", list(ENVIRONMENTS))
def test_an_environment_value_costs_linear_time(name: str) -> None:
    variable, make = ENVIRONMENTS[name]
    assert_linear(environment(variable, make), TEXT)


# --- URLs -----------------------------------------------------------------------------------------

DECLARED = servers_of({"http://h.example/mcp": {"label": "a"}, "https://h.example": {"label": "b"}})
LONG_URLS = {
    "a long path": lambda n: "http://h.example/" + "p/" * (n // 2),
    "a long host": lambda n: "http://" + "a." * (n // 2) + "example/mcp",
    "a long port": lambda n: "http://h.example:" + "1" * n + "/mcp",
    "a long query": lambda n: "http://h.example/mcp?" + "k=v&" * (n // 4),
    "long userinfo": lambda n: "http://" + "u:" * (n // 2) + "@h.example/mcp",
    "brackets": lambda n: "http://[" + "::" * (n // 2) + "]/mcp",
    "percent signs": lambda n: "http://h.example/" + "%" * n,
}


@pytest.mark.parametrize("name", list(LONG_URLS))
def test_reading_a_url_costs_linear_time(name: str) -> None:
    def case(n: int) -> Callable[[], object]:
        url = LONG_URLS[name](n)

        def run() -> None:
            origin_of(url)
            NO_SERVERS.declaration_for(url)
            DECLARED._lookup(url)  # past the cache, which would answer a repeat at once

        return run

    assert_linear(case, TEXT)
