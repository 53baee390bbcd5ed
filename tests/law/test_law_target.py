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
    """A key that hashes as the plain key it spells, and raises when compared."""

    def __eq__(self, other: object) -> bool:
        raise AssertionError("a key's __eq__ was called")

    def __hash__(self) -> int:
        return str.__hash__(self)


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


DEEP = declaration_of({"tools": {"charge": {"changes": True}}, "deduplicates": {"argument": "/meta/idem"}})


def test_a_level_below_the_arguments_is_read_as_data_in_a_body_read_as_json() -> None:
    # The HTTP seam checks a built body's request, params and arguments for exact str keys, then reads
    # it as JSON (from_json): a declared key's path deeper than the arguments is read as data all the same.
    planted = call(meta={EvilKey("idem"): "k"})
    assert target_of(planted, DEEP, from_json=True) == Target(tool="charge", request_id=3)
    assert target_of(call(meta={"idem": "k"}), DEEP, from_json=True).key_carried


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


# -- the key at a JSON Pointer (RFC 6901) ----------------------------------------------------------

ACP = declaration_of({"deduplicates": {"argument": "/meta/idempotency_key"}})
UCP = declaration_of({"deduplicates": {"argument": "/meta/idempotency-key"}})


def carried(declaration: Any, **arguments: Any) -> bool:
    body = call(**arguments)
    carried = target_of(body, declaration).key_carried
    # The HTTP seam's read of the same body, as its JSON decoder made it, is the same read.
    assert target_of(json.loads(json.dumps(body)), declaration, from_json=True).key_carried == carried
    return carried


def test_the_commerce_protocols_keys_are_carried_where_they_nest_them() -> None:
    assert carried(ACP, amount=5, meta={"idempotency_key": "k-1"})
    assert carried(UCP, amount=5, meta={"idempotency-key": "k-1"})
    assert not carried(ACP, amount=5, meta={"idempotency-key": "k-1"})  # each layout its own
    assert not carried(UCP, amount=5, meta={"idempotency_key": "k-1"})
    for meta in (None, "k-1", ["k-1"], {}, {"idempotency_key": ""}, {"idempotency_key": 7}):
        assert not carried(ACP, amount=5, meta=meta), meta
        assert not carried(ACP, amount=5, idempotency_key="k-1", other=meta)  # top level is not nested
    assert not carried(ACP, amount=5, meta={"idempotency_key": {"idempotency_key": "k-1"}})


def test_escapes_and_array_indices_are_read_as_rfc_6901_writes_them() -> None:
    escapes = declaration_of({"deduplicates": {"argument": "/a~1b/m~0n"}})
    assert carried(escapes, **{"a/b": {"m~n": "k"}})
    assert not carried(escapes, a={"b": {"m~n": "k"}})
    indexed = declaration_of({"deduplicates": {"argument": "/items/1/key"}})
    assert carried(indexed, items=[{}, {"key": "k"}])
    assert carried(indexed, items={"1": {"key": "k"}})  # an object's member named "1"
    for items in ([{"key": "k"}], [], "xy", None):
        assert not carried(indexed, items=items), items
    for index in ("01", "-", "+1", "1.0", " 1", "\u0661", "9" * 19, "-1"):
        pointer = declaration_of({"deduplicates": {"argument": f"/items/{index}"}})
        assert not carried(pointer, items=["k"] * 12), index
    assert carried(declaration_of({"deduplicates": {"argument": "/items/0"}}), items=["k"])
    assert carried(declaration_of({"deduplicates": {"argument": "/items/10"}}), items=["k"] * 11)
    assert carried(declaration_of({"deduplicates": {"argument": "/"}}), **{"": "k"})


def test_a_nested_key_is_read_as_data_only() -> None:
    body = call(meta=Trap(idempotency_key="k"))
    assert not target_of(body, ACP).key_carried
    assert not target_of(call(meta={"idempotency_key": StrSub("k")}), ACP).key_carried
    assert not target_of(call(meta={EvilKey("idempotency_key"): "k", 3: "x"}), ACP).key_carried
    first = declaration_of({"deduplicates": {"argument": "/meta/0"}})
    assert not target_of(call(meta=("k",)), first).key_carried  # a tuple is no JSON array


@settings(max_examples=300)
@given(json_values, st.lists(st.sampled_from(("meta", "idem", "0", "1", "")), min_size=1, max_size=4))
def test_the_walk_is_the_pointer_s_value_and_never_raises(arguments: Any, tokens: list[str]) -> None:
    """Against a plain reading of RFC 6901 (one step per token): carried exactly when the value at the
    pointer is a non-empty string."""
    declaration = declaration_of({"deduplicates": {"argument": "".join("/" + t for t in tokens)}})
    arguments = json.loads(json.dumps({"meta": arguments}))
    expected: Any = arguments
    for token in tokens:
        if isinstance(expected, dict):
            expected = expected.get(token)
        elif isinstance(expected, list) and token.isdigit() and int(token) < len(expected):
            expected = expected[int(token)]
        else:
            expected = None
    assert carried(declaration, **arguments) == (isinstance(expected, str) and expected != "")
