"""What the plugin reads off the wire: request headers, JSON-RPC bodies, answers in event streams.

Read as the mcp SDK reads them (UTF-8 JSON, server-sent events with any line ending), never
raising on odd bytes: what cannot be read is "no answer seen", which the law treats as unknown.
"""

from __future__ import annotations

import json
import re
from typing import Any

import httpx2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_mcp_replay.answers import AnswerWatch, SseAnswers, answer_of, json_message
from otel_mcp_replay.patches.http_send import _accept_and_content_type

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


# -- event streams --


@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"])
def test_an_answer_is_seen_in_an_event_stream_split_anywhere(newline: bytes) -> None:
    data = json.dumps(RESULT).encode()
    stream = newline.join([b"event: message", b"data: " + data, b"", b""])
    for cut in range(1, len(stream)):
        seen: list[tuple[object, str]] = []
        reader = SseAnswers(lambda request_id, kind, seen=seen: seen.append((request_id, kind)))
        reader.feed(stream[:cut])
        reader.feed(stream[cut:])
        reader.end()  # a stream that ends on CR: no LF can follow it now
        assert seen == [(7, "result")], cut


def test_an_event_whose_data_spans_lines_is_joined_before_it_is_read() -> None:
    seen: list[tuple[object, str]] = []
    reader = SseAnswers(lambda request_id, kind: seen.append((request_id, kind)))
    reader.feed(b'data: {"jsonrpc": "2.0",\ndata: "id": 3, "result": {}}\n\n')
    assert seen == [(3, "result")]


def answers_by_the_spec(stream: bytes) -> list[tuple[object, str]]:
    """What a reader of the whole stream at once notes: lines end at CRLF, LF or CR; a blank line
    dispatches the event's data lines (one space after `data:` dropped); a last line with no end
    is not a line."""
    lines = re.split(rb"\r\n|\r|\n", stream)[:-1]
    seen: list[tuple[object, str]] = []
    data: list[bytes] = []
    for line in lines:
        if not line:
            found = answer_of(b"\n".join(data)) if data else None
            if found is not None:
                seen.append(found)
            data = []
        elif line.startswith(b"data:"):
            data.append(line[6:] if line[5:6] == b" " else line[5:])
    return seen


PIECES = [
    b"\n",
    b"\r",
    b"\r\n",
    b"data: ",
    b"data:",
    b"da",
    b"ta: ",
    b": comment data: x",
    b"event: message",
    b"id: 9",
    b'{"jsonrpc": "2.0", "id": 1, "result": {}}',
    b'{"jsonrpc": "2.0", ',
    b'"id": "b", "error": {}}',
    b"xdata: ",
]


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.one_of(st.sampled_from(PIECES), st.binary(max_size=4)), max_size=40),
    st.lists(st.integers(0, 400), max_size=8),
)
def test_an_event_stream_cut_anywhere_is_read_as_the_spec_reads_it_whole(
    pieces: list[bytes], cuts: list[int]
) -> None:
    stream = b"".join(pieces)
    seen: list[tuple[object, str]] = []
    reader = SseAnswers(lambda request_id, kind: seen.append((request_id, kind)))
    start = 0
    for cut in sorted(c for c in cuts if c < len(stream)):
        reader.feed(stream[start:cut])
        start = cut
    reader.feed(stream[start:])
    reader.end()
    assert seen == answers_by_the_spec(stream)


def test_an_answer_of_any_size_is_read_and_the_next_one_too() -> None:
    """No size turns the watch off (the contract: an answer of any size the SDK accepts is seen);
    a large event is held once, as the SDK holds it, and let go when it is dispatched."""
    seen: list[object] = []
    reader = SseAnswers(lambda request_id, kind: seen.append((request_id, kind)))
    for spaced in (True, False):  # the stdlib's form, and the servers' own (read from its head)
        sep = b" " if spaced else b""
        big = b'data: {"jsonrpc":%s"2.0","id":%s1,"result":%s"' % (sep, sep, sep)
        big += b"x" * (5 * 1024 * 1024) + b'"}\n\n'
        small = b'data: {"jsonrpc": "2.0", "id": 2, "error": {}}\n\n'
        for size in (len(big) + len(small), 64 * 1024, 1000):
            seen.clear()
            stream = big + small
            for i in range(0, len(stream), size):
                reader.feed(stream[i : i + size])
            assert seen == [(1, "result"), (2, "error")], size
            assert len(reader._partial) == 0


def test_an_answer_read_from_its_head_is_what_the_whole_parse_reads() -> None:
    """The servers' own form is read from its head; any other form is parsed whole. What follows the
    head is the result, which the law never reads: a result the server began and garbled is still
    its answer (the tool ran), so it is read as the head says, where a whole parse would refuse it."""
    cases = [
        b'{"jsonrpc":"2.0","id":7,"result":{"content":[]}}',
        b'{"jsonrpc":"2.0","id":"a\xc3\xa9","error":{"code":-1,"message":"x"}}',
        b'{"jsonrpc":"2.0","id":-0,"result":{}}',
        b'{"jsonrpc":"2.0","id":01,"result":{}}',  # not JSON: None
        b'{"jsonrpc":"2.0","id":"a\\"b","result":{}}',  # an escape: parsed whole
        b'{"jsonrpc":"2.0","id":7.0,"result":{}}',
    ]
    for raw in cases:
        message = json_message(raw)
        whole = None
        if type(message) is dict and "id" in message and ("result" in message or "error" in message):
            whole = (message["id"], "result" if "result" in message else "error")
        assert answer_of(raw) == whole, raw
    assert answer_of(b'{"jsonrpc":"2.0","id":7,"result":{"content":[}') == (7, "result")
    assert answer_of(b'{"jsonrpc":"2.0","id":7,"result":{"content":[]') is None  # no closing brace


class _Chunks(httpx2.AsyncByteStream):
    def __init__(self, *chunks: bytes) -> None:
        self._chunks = chunks

    async def __aiter__(self):  # type: ignore[no-untyped-def]
        for chunk in self._chunks:
            yield chunk


@pytest.mark.anyio
async def test_the_watch_notes_an_answer_that_ends_the_stream_on_cr_before_it_reports_the_end() -> None:
    """A server that ends its lines with CR alone: the last blank line is known only at the end."""
    heard: list[object] = []
    data = json.dumps(RESULT).encode()
    watch = AnswerWatch(
        _Chunks(b"event: message\r", b"data: " + data + b"\r\r"),
        lambda request_id, kind: heard.append((request_id, kind)),
        lambda error: heard.append(("end", error)),
    )
    passed = b"".join([chunk async for chunk in watch])
    assert passed == b"event: message\rdata: " + data + b"\r\r"  # every byte passed on, untouched
    assert heard == [(7, "result"), ("end", None)]
