"""Reading a request body as the law's target: data only, never raising."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_mcp_replay.declaration import COMPATIBILITY, declaration_of
from otel_mcp_replay.law import PROTOCOL, Target, target_of

KEYED = declaration_of({"tools": {"charge": {"changes": True}}, "deduplicates": {"argument": "idem"}})


def call(name: Any = "charge", **arguments: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }


def test_a_tools_call_is_its_tool() -> None:
    assert target_of(call(), COMPATIBILITY) == Target(tool="charge", request_id=3)
    assert target_of(call("search", q="x"), KEYED) == Target(tool="search", request_id=3)


def test_the_key_is_carried_only_as_a_non_empty_string_in_the_declared_argument() -> None:
    assert target_of(call(idem="k-1"), KEYED) == Target(tool="charge", request_id=3, key_carried=True)
    for value in ("", None, 7, ["k"], {"k": 1}, True):
        assert target_of(call(idem=value), KEYED) == Target(tool="charge", request_id=3), value
    assert target_of(call(other="k-1"), KEYED) == Target(tool="charge", request_id=3)


def test_a_key_is_not_carried_when_no_argument_is_declared() -> None:
    assert target_of(call(idem="k-1"), COMPATIBILITY) == Target(
        tool="charge", request_id=3, key_carried=False
    )


@pytest.mark.parametrize(
    "body",
    [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 3}},
        {"jsonrpc": "2.0", "id": 3, "result": {}},
        None,
        "tools/call",
        3,
        [],
        [{"method": "tools/list", "id": 1}],
        {"method": ["tools/call"]},
    ],
)
def test_anything_else_is_a_protocol_request(body: object) -> None:
    assert target_of(body, KEYED) == PROTOCOL
    assert not PROTOCOL.is_tool


@pytest.mark.parametrize(
    "params", [None, [], "charge", {"arguments": {}}, {"name": 3}, {"name": None}, {"name": ["charge"]}]
)
def test_a_tools_call_without_a_string_name_is_a_tool_target_named_empty(params: object) -> None:
    target = target_of({"method": "tools/call", "id": 1, "params": params}, KEYED)
    assert target == Target(tool="", request_id=1)
    assert target.is_tool


def test_the_body_is_read_once_into_one_target_that_carries_its_id_and_arguments() -> None:
    """Every reader (the HTTP seam's match, the mcp 1.x carrier, stdio, the repeat guard) shares this
    one value: the tool, the JSON-RPC id, whether the key is carried, and the arguments, which only
    the guard's fingerprint asks for, and which no repr shows."""
    body = call(idem="k-1", card="4111-CANARY")
    target = target_of(body, KEYED)
    assert (target.tool, target.request_id, target.key_carried, target.batch) == ("charge", 3, True, False)
    assert target.arguments() == {"idem": "k-1", "card": "4111-CANARY"}
    assert "CANARY" not in repr(target) and "k-1" not in repr(target)
    # Compared by what the law reads, never by the arguments.
    assert target == target_of(call(idem="k-2", card="other"), KEYED)
    assert target_of({"method": "tools/call", "id": 9, "params": None}, KEYED).arguments() is None
    assert PROTOCOL.arguments() is None and PROTOCOL.request_id is None


def test_a_batch_carrying_a_tools_call_is_a_batch_target() -> None:
    target = target_of([{"method": "tools/list", "id": 1}, call()], KEYED)
    assert target.is_tool and target.batch


class StrSub(str):
    pass


class Trap(dict):  # type: ignore[type-arg]
    def __getitem__(self, key: Any) -> Any:
        raise AssertionError("a custom mapping was called")

    def get(self, key: Any, default: Any = None) -> Any:
        raise AssertionError("a custom mapping was called")

    def items(self) -> Any:
        raise AssertionError("a custom mapping was called")


class EvilKey(str):
    def __eq__(self, other: object) -> bool:
        raise AssertionError("a key's __eq__ was called")

    def __hash__(self) -> int:
        return hash("method")


def test_values_are_read_as_data_only() -> None:
    assert target_of(Trap(call()), KEYED) == PROTOCOL
    body = call()
    body["params"] = Trap(body["params"])
    assert target_of(body, KEYED) == Target(tool="", request_id=3)
    body = call()
    body["params"]["arguments"] = Trap(idem="k")
    assert target_of(body, KEYED) == Target(tool="charge", request_id=3)
    assert target_of(call(StrSub("charge")), KEYED) == Target(tool="", request_id=3)
    assert target_of(call(idem=StrSub("k")), KEYED) == Target(tool="charge", request_id=3)
    assert target_of({"method": StrSub("tools/call"), "params": {"name": "charge"}}, KEYED) == PROTOCOL
    assert target_of({EvilKey("method"): "tools/call"}, KEYED) == PROTOCOL


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
method_like = st.sampled_from(("tools/call", "tools/list", "initialize", ""))


@settings(max_examples=300)
@given(
    st.one_of(
        json_values,
        st.fixed_dictionaries(
            {"method": method_like},
            optional={
                "params": st.one_of(
                    json_values,
                    st.fixed_dictionaries(
                        {},
                        optional={
                            "name": st.one_of(st.text(max_size=8), json_values),
                            "arguments": st.one_of(
                                json_values, st.dictionaries(st.sampled_from(("idem", "x")), json_values)
                            ),
                        },
                    ),
                )
            },
        ),
    )
)
def test_target_of_never_raises_and_agrees_with_the_json(body: Any) -> None:
    body = json.loads(json.dumps(body))  # as the transport parses it
    target = target_of(body, KEYED)
    # The HTTP seam's read of a body its JSON decoder made (every key exactly str) is the same read.
    assert target_of(body, KEYED, from_json=True) == target
    assert target_of(body, KEYED, from_json=True).arguments() == target.arguments()
    if isinstance(body, list):
        assert (
            target.batch
            == target.is_tool
            == any(isinstance(b, dict) and b.get("method") == "tools/call" for b in body)
        )
        return
    is_call = isinstance(body, dict) and body.get("method") == "tools/call"
    assert target.is_tool == is_call
    if is_call:
        params = body.get("params")
        name = params.get("name") if isinstance(params, dict) else None
        assert target.tool == (name if isinstance(name, str) else "")
        assert target.request_id == body.get("id")
        arguments = params.get("arguments") if isinstance(params, dict) else None
        key = arguments.get("idem") if isinstance(arguments, dict) else None
        assert target.key_carried == (isinstance(key, str) and key != "")
