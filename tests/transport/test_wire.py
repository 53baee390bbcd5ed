"""What the plugin reads off the wire: request headers, JSON-RPC bodies, answers in event streams.

Read as the mcp SDK reads them (UTF-8 JSON; server-sent events as the SDK's own reader yields them,
over the body as the client decoded it), never raising on odd bytes: what cannot be read is "no
answer seen", which the law treats as unknown.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx2
import pytest
from tests.support.streams import answers_watched, event_stream

from harness.client import types
from harness.sdk import LINE as SDK_LINE
from otel_mcp_replay.lines import LINE
from otel_mcp_replay.patches.http_send import _accept_and_content_type
from otel_mcp_replay.patches.libraries import json_message
from otel_mcp_replay.patches.wire import EventWatch, answer_of

RESULT = {"jsonrpc": "2.0", "id": 7, "result": {"content": [], "isError": False}}


# -- request headers --


def test_accept_and_content_type_are_read_whatever_the_case_of_their_names() -> None:
    headers = httpx2.Headers(
        [("Accept", "application/json, text/event-stream"), ("CONTENT-TYPE", "application/json"), ("x", "y")]
    )
    assert _accept_and_content_type(headers) == (b"application/json, text/event-stream", b"application/json")


def test_repeated_headers_are_joined_as_headers_get_joins_them() -> None:
    headers = httpx2.Headers(
        [
            ("accept", "application/json"),
            ("Accept", "text/event-stream"),
            ("content-type", "application/json"),
        ]
    )
    accept, content_type = _accept_and_content_type(headers)
    assert accept.decode() == headers.get("accept")
    assert content_type.decode() == headers.get("content-type")


def test_missing_headers_read_as_empty() -> None:
    assert _accept_and_content_type(httpx2.Headers({"x": "y"})) == (b"", b"")


# -- JSON-RPC bodies --


def test_a_body_is_parsed_from_utf8_bytes_with_or_without_a_byte_order_mark() -> None:
    raw = json.dumps({"method": "tools/call", "params": {"name": "héllo"}}, ensure_ascii=False).encode()
    assert json_message(raw) == json.loads(raw)
    assert json_message(b"\xef\xbb\xbf" + raw) == json.loads(raw)
    assert json_message(raw.decode()) == json.loads(raw)
    assert json_message(bytearray(raw)) == json.loads(raw)


@pytest.mark.parametrize(
    "raw",
    [
        b"\xff\xfe{}",  # not UTF-8
        "{}".encode("utf-16"),  # JSON over HTTP is UTF-8; the mcp SDK reads nothing else
        b'{"a": ',  # cut
        b"[" * 100_000,  # nested past the parser's recursion limit
        b"",
    ],
)
def test_what_is_not_utf8_json_reads_as_none(raw: bytes) -> None:
    assert json_message(raw) is None


@pytest.mark.parametrize(
    "raw", [' {"a": 1}', '{"a": 1} \r\n', '\t\n {"a": [1, " "]}\n\t ', "7", ' "x" ', "[]", "\n[] "]
)
def test_json_whitespace_around_the_value_reads_as_json_loads_reads_it(raw: str) -> None:
    assert json_message(raw) == json.loads(raw)
    assert json_message(raw.encode()) == json.loads(raw)


@pytest.mark.parametrize("raw", ["\u00a0{}", "{}\u00a0", "\u2028{}", "{}\x0b", " ", "\n", '{"a": 1} \n x'])
def test_what_is_not_json_whitespace_around_the_value_reads_as_none(raw: str) -> None:
    with pytest.raises(ValueError):
        json.loads(raw)  # what json.loads refuses
    assert json_message(raw) is None


@pytest.mark.parametrize("raw", ["\ufeff{}", '{"a": 1} x', b'{"a": 1} {}', memoryview(b"{}"), 7, None])
def test_what_json_loads_refuses_and_what_is_not_a_body_read_as_none(raw: Any) -> None:
    assert json_message(raw) is None  # a BOM left in text, data after the value, not bytes or str


def test_answers_are_told_by_id_and_kind() -> None:
    assert answer_of(json.dumps(RESULT).encode()) == (7, "result")
    assert answer_of(b'{"jsonrpc": "2.0", "id": "a", "error": {"code": -1, "message": "x"}}') == (
        "a",
        "error",
    )
    assert answer_of(b'{"jsonrpc": "2.0", "method": "notifications/progress"}') is None
    assert answer_of(b'{"jsonrpc": "2.0", "id": 7}') is None
    assert answer_of(b"[1, 2]") is None


# -- event streams: read by the SDK's own reader, each event told to the watch --


def read(*chunks: bytes, encoding: str | None = None) -> list[tuple[object, str]]:
    return anyio.run(answers_watched, event_stream(chunks, encoding))


@pytest.mark.parametrize("encoding", [None, "gzip", "deflate"])
@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"])
def test_an_answer_is_seen_in_an_event_stream_split_anywhere(newline: bytes, encoding: str | None) -> None:
    data = json.dumps(RESULT).encode()
    stream = newline.join([b"event: message", b"data: " + data, b"", b""])
    for cut in range(1, len(stream), 7 if encoding else 1):
        assert read(stream[:cut], stream[cut:], encoding=encoding) == [(7, "result")], cut


def test_an_event_whose_data_spans_lines_is_joined_before_it_is_read() -> None:
    assert read(b'data: {"jsonrpc": "2.0",\ndata: "id": 3, "result": {}}\n\n') == [(3, "result")]


def test_a_priming_event_and_other_events_say_nothing_and_only_endpoint_announces() -> None:
    """SEP-1699's priming event (an id, a retry, an empty `data:`), a keep-alive, an event of
    another name: none is an answer or an endpoint. Only `event: endpoint` announces one."""
    stream = b"id: 0\nretry: 3000\ndata:\n\n: ping\n\nevent: other\ndata: /x\n\n"
    stream += b"event: endpoint\ndata: /m?s=1\n\n"
    endpoints: list[str] = []
    watch = EventWatch(lambda request_id, kind: endpoints.append("answer"), on_endpoint=endpoints.append)

    async def run() -> None:
        async for _ in watch.read(LINE.events(event_stream([stream]))):
            pass

    anyio.run(run)
    assert endpoints == ["/m?s=1"]


def test_an_answer_of_any_size_is_read_and_the_next_one_too() -> None:
    """No size turns the reading off where the SDK's reader has no cap (the contract: an answer of
    any size the SDK accepts is seen), compact as the servers write it or spaced."""
    for spaced in (True, False):
        sep = b" " if spaced else b""
        big = b'data: {"jsonrpc":%s"2.0","id":%s1,"result":%s{"t":%s"' % (sep, sep, sep, sep)
        big += b"x" * (5 * 1024 * 1024) + b'"}}\n\n'
        small = b'data: {"jsonrpc": "2.0", "id": 2, "error": {"code": -1, "message": "x"}}\n\n'
        stream = big + small
        for size in (len(stream), 64 * 1024):
            chunks = [stream[i : i + size] for i in range(0, len(stream), size)]
            assert read(*chunks) == [(1, "result"), (2, "error")], size


@pytest.mark.parametrize(
    ("raw", "read"),
    [
        ('{"jsonrpc":"2.0","id":7,"result":{"content":[]}}', (7, "result")),
        ('{"jsonrpc":"2.0","id":"a\u00e9","error":{"code":-1,"message":"x"}}', ("a\u00e9", "error")),
        ('{"jsonrpc":"2.0","id":null,"error":{"code":-1,"message":"x"}}', (None, "error")),
        ('{"jsonrpc":"2.0","id":7,"result":{"content":[}', None),  # begun, then garbled
        ('{"jsonrpc":"2.0","id":7,"result":{}}\n{"jsonrpc":"2.0","method":"x"}', None),  # two in one
        ('{"jsonrpc":"2.0","id":7,"result":5}', None),  # a result that is no object
        ('{"id":7,"result":{}}', None),  # no envelope
        ('{"jsonrpc":"2.0","id":7.0,"result":{}}', None),  # an id that is neither integer nor string
        ('{"jsonrpc":"2.0","id":true,"result":{}}', None),
        ('{"jsonrpc":"2.0","id":null,"result":{}}', None),
        ('{"jsonrpc":"2.0","id":7,"error":{"code":"x","message":"x"}}', None),
    ],
)
def test_an_answer_is_what_the_sdk_s_models_read_as_one(raw: str, read: object) -> None:
    """The whole message is read, as the SDK's models read it: a response begun and garbled, or
    two messages joined, is no answer to the SDK, so none here (its caller gets the SDK's parse
    error, and the record says the answer never came)."""
    assert answer_of(raw) == read
    assert answer_of(raw.encode()) == read
    if read is not None:  # what the SDK's own models make of it
        parsed = types.jsonrpc_message_adapter.validate_json(raw) if SDK_LINE == 2 else None
        assert parsed is None or parsed.id == read[0]


def test_the_watch_notes_an_answer_that_ends_the_stream_on_cr_before_it_reports_the_end() -> None:
    """A server that ends its lines with CR alone: the last blank line is known only at the end."""
    heard: list[object] = []
    data = json.dumps(RESULT).encode()
    watch = EventWatch(
        lambda request_id, kind: heard.append((request_id, kind)), lambda error: heard.append(("end", error))
    )

    async def run() -> None:
        chunks = [b"event: message\r", b"data: " + data + b"\r\r"]
        async for _ in watch.read(LINE.events(event_stream(chunks))):
            pass

    anyio.run(run)
    assert heard == [(7, "result"), ("end", None)]
