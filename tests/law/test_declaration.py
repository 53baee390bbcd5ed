"""The declaration: read completely or refused, naming the field and never echoing a value."""

from __future__ import annotations

from collections.abc import Callable
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_mcp_replay.config import servers_from_config_file, servers_from_json
from otel_mcp_replay.declaration import COMPATIBILITY, Declaration, ToolEntry, declaration_of
from otel_mcp_replay.endpoints import NO_SERVERS, origin_of, servers_of
from otel_mcp_replay.record import is_endpoint
from otel_mcp_replay.settings import Settings, retry_budget_of, setting_from_text, settings_of

CANARY = "CANARY-7f3a"

FULL = {
    "policy": "app-authorized",
    "label": "billing",
    "tools": {"search": {"on": ["throttle", "network"]}, "charge": {"changes": True}},
    "deduplicates": {"argument": "idempotency_key"},
    "adapter": "agentcore-runtime",
}


def test_the_contract_s_example_is_read() -> None:
    declaration = declaration_of(FULL)
    assert declaration == Declaration(
        policy="app-authorized",
        tools={"search": ToolEntry(on=frozenset({"throttle", "network"})), "charge": ToolEntry(changes=True)},
        key_argument="idempotency_key",
        label="billing",
        adapter="agentcore-runtime",
    )
    assert declaration != COMPATIBILITY
    assert hash(declaration) == hash(declaration_of(FULL))


def test_nothing_declared_is_compatibility_naming_nothing() -> None:
    assert declaration_of({}) == COMPATIBILITY
    assert declaration_of(None) is COMPATIBILITY
    assert COMPATIBILITY.policy == "compatibility" and not COMPATIBILITY.tools
    assert Declaration() == COMPATIBILITY
    assert declaration_of({"policy": "compatibility", "tools": {}}) == COMPATIBILITY
    for field, value in (
        ("policy", "app-authorized"),
        ("tools", {"x": {}}),
        ("label", "b"),
        ("adapter", "agentcore-runtime"),
        ("deduplicates", {"argument": "k"}),
    ):
        assert declaration_of({field: value}) != COMPATIBILITY, field


def test_a_declaration_is_immutable() -> None:
    raw_tools: dict[str, Any] = {"charge": {"changes": True, "on": ["network"]}}
    declaration = declaration_of({"tools": raw_tools})
    raw_tools["charge"]["changes"] = False  # the app's mapping is not the declaration
    raw_tools["other"] = {}
    assert declaration.tools["charge"].changes and "other" not in declaration.tools
    assert isinstance(declaration.tools, MappingProxyType)
    assert isinstance(declaration.tools["charge"].on, frozenset)
    with pytest.raises(TypeError):
        declaration.tools["x"] = ToolEntry()  # type: ignore[index]
    with pytest.raises(AttributeError):
        declaration.policy = "app-authorized"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        declaration.tools["charge"].changes = False  # type: ignore[misc]


def test_a_declaration_built_directly_is_held_to_the_same_rule_and_frozen() -> None:
    tools = {"search": ToolEntry(on=frozenset({"throttle"}))}
    declaration = Declaration(tools=tools)
    tools.clear()
    assert "search" in declaration.tools
    assert ToolEntry(on=["network"]).on == frozenset({"network"})  # type: ignore[arg-type]
    for build in (
        lambda: Declaration(policy="strict"),  # type: ignore[arg-type]
        lambda: Declaration(label="no spaces"),
        lambda: Declaration(adapter="other"),
        lambda: Declaration(key_argument=""),
        lambda: Declaration(tools={"x": {"on": []}}),  # type: ignore[dict-item]
        lambda: Declaration(tools={"": ToolEntry()}),
        lambda: ToolEntry(on=frozenset({"error"})),
        lambda: ToolEntry(changes=1),  # type: ignore[arg-type]
    ):
        with pytest.raises((TypeError, ValueError)):
            build()


def test_an_on_list_may_be_any_plain_collection_and_repeat_itself() -> None:
    for on in (["throttle", "throttle"], ("network",), {"throttle"}, frozenset({"network"}), []):
        entry = declaration_of({"tools": {"t": {"on": on}}}).tools["t"]
        assert entry.on == frozenset(on)


class Sly(str):
    def __str__(self) -> str:
        return "app-authorized"

    def __eq__(self, other: object) -> bool:
        return True

    def __hash__(self) -> int:
        return 0


def test_names_are_kept_as_plain_strings() -> None:
    declaration = declaration_of(
        {
            "label": Sly("billing"),
            "tools": {Sly("charge"): {"on": [Sly("network")]}},
            "deduplicates": {"argument": Sly("k")},
        }
    )
    assert type(declaration.label) is str and declaration.label == "billing"
    assert type(declaration.key_argument) is str
    assert [type(name) for name in declaration.tools] == [str]
    assert "search" not in declaration.tools
    assert [type(kind) for kind in declaration.tools["charge"].on] == [str]
    for raw in ({"adapter": Sly("other")}, {"policy": Sly("strict")}, {"tools": {"t": {"on": [Sly("x")]}}}):
        with pytest.raises(ValueError):
            declaration_of(raw)
    with pytest.raises(ValueError):
        ToolEntry(on=frozenset({Sly("error")}))


# --- the key's path: a top-level name, or a JSON Pointer (RFC 6901) -----------------------------


def key_path_of(argument: str) -> tuple[str, ...] | None:
    return declaration_of({"deduplicates": {"argument": argument}}).key_path


def test_a_plain_name_is_the_top_level_argument() -> None:
    assert key_path_of("idempotency_key") == ("idempotency_key",)
    assert key_path_of("meta/idempotency_key") == ("meta/idempotency_key",)  # no leading "/": a name
    assert key_path_of("~") == ("~",)
    assert COMPATIBILITY.key_path is None


def test_a_pointer_is_read_into_its_reference_tokens() -> None:
    assert key_path_of("/meta/idempotency_key") == ("meta", "idempotency_key")  # Agentic Commerce
    assert key_path_of("/meta/idempotency-key") == ("meta", "idempotency-key")  # Universal Commerce
    assert key_path_of("/a~1b/m~0n") == ("a/b", "m~n")
    assert key_path_of("/~01") == ("~1",)  # "~0" then "1": not "/"
    assert key_path_of("/items/0/key") == ("items", "0", "key")
    assert key_path_of("/") == ("",)
    assert key_path_of("/a//b/") == ("a", "", "b", "")
    # Built directly, the same read; the path is no part of what the declaration is.
    direct = Declaration(key_argument="/meta/idempotency_key")
    assert direct.key_path == ("meta", "idempotency_key")
    assert direct == declaration_of({"deduplicates": {"argument": "/meta/idempotency_key"}})
    assert "key_path" not in repr(direct)


def escaped(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


@settings(max_examples=300)
@given(st.lists(st.text(alphabet=st.sampled_from("ab~/01-_ é"), max_size=6), min_size=1, max_size=5))
def test_a_pointer_round_trips_its_tokens(tokens: list[str]) -> None:
    """Any tokens, escaped and joined as RFC 6901 writes them, read back as themselves."""
    assert key_path_of("".join("/" + escaped(token) for token in tokens)) == tuple(tokens)


@settings(max_examples=300)
@given(st.text(alphabet=st.sampled_from("ab~/01"), max_size=12))
def test_a_pointer_is_read_or_refused_naming_the_field_never_the_value(tail: str) -> None:
    """A pointer whose every '~' starts '~0' or '~1' is read; any other is refused, naming the field."""
    pointer = f"/{CANARY}/{tail}"
    if all(tail[i + 1 : i + 2] in ("0", "1") for i, c in enumerate(tail) if c == "~"):
        assert "/".join(map(escaped, key_path_of(pointer) or ())) == f"{CANARY}/{tail}"
        return
    with pytest.raises(ValueError) as caught:
        key_path_of(pointer)
    assert caught.value.field == "deduplicates.argument"  # type: ignore[attr-defined]
    assert CANARY not in every_text_of(caught.value)
    assert caught.value.__cause__ is None and caught.value.__context__ is None


def test_tool_names_are_the_server_s_own_spelling() -> None:
    declaration = declaration_of({"tools": {"Fetch.Page v2": {"on": ["network"]}}})
    assert set(declaration.tools) == {"Fetch.Page v2"}


# --- every refusal names its field and echoes no value ----------------------------------------


def url(path: str = "") -> str:
    return f"https://user:{CANARY}@{CANARY.lower()}.example/{CANARY}{path}?key={CANARY}#{CANARY}"


REFUSALS: list[tuple[str, Callable[[], object], type[Exception], str]] = [
    ("not a mapping", lambda: declaration_of(CANARY), TypeError, "declaration"),
    ("unknown field", lambda: declaration_of({"polcy": CANARY}), TypeError, "polcy"),
    ("unknown policy", lambda: declaration_of({"policy": CANARY}), ValueError, "policy"),
    ("policy of another type", lambda: declaration_of({"policy": [CANARY]}), TypeError, "policy"),
    ("bad label", lambda: declaration_of({"label": f"{CANARY} x"}), ValueError, "label"),
    ("long label", lambda: declaration_of({"label": CANARY * 7}), ValueError, "label"),
    ("label of another type", lambda: declaration_of({"label": 3}), TypeError, "label"),
    ("null label", lambda: declaration_of({"label": None}), TypeError, "label"),
    ("null adapter", lambda: servers_of({url(): {"adapter": None}}), TypeError, "servers[0].adapter"),
    ("null tools", lambda: declaration_of({"tools": None}), TypeError, "tools"),
    ("unknown adapter", lambda: declaration_of({"adapter": CANARY}), ValueError, "adapter"),
    ("adapter of another type", lambda: declaration_of({"adapter": {CANARY: 1}}), TypeError, "adapter"),
    ("tools not a mapping", lambda: declaration_of({"tools": [CANARY]}), TypeError, "tools"),
    ("tool name not a string", lambda: declaration_of({"tools": {3: {}}}), TypeError, "tools"),
    ("empty tool name", lambda: declaration_of({"tools": {"": {}}}), ValueError, "tools"),
    ("entry not a mapping", lambda: declaration_of({"tools": {"charge": CANARY}}), TypeError, "tools.charge"),
    (
        "misspelled changes",
        lambda: declaration_of({"tools": {"charge": {"chnages": CANARY}}}),
        TypeError,
        "tools.charge.chnages",
    ),
    (
        "changes not a bool",
        lambda: declaration_of({"tools": {"charge": {"changes": CANARY}}}),
        TypeError,
        "tools.charge.changes",
    ),
    (
        "changes as 1",
        lambda: declaration_of({"tools": {"charge": {"changes": 1}}}),
        TypeError,
        "tools.charge.changes",
    ),
    ("on not a list", lambda: declaration_of({"tools": {"s": {"on": CANARY}}}), TypeError, "tools.s.on"),
    (
        "unknown kind",
        lambda: declaration_of({"tools": {"s": {"on": ["throttle", CANARY]}}}),
        ValueError,
        "tools.s.on[1]",
    ),
    (
        "session-busy is the adapter's, not declarable",
        lambda: declaration_of({"tools": {"s": {"on": ["session-busy"]}}}),
        ValueError,
        "tools.s.on[0]",
    ),
    (
        "kind not a string",
        lambda: declaration_of({"tools": {"s": {"on": [CANARY.encode()]}}}),
        TypeError,
        "tools.s.on[0]",
    ),
    (
        "a tool name that is no plain name",
        lambda: declaration_of({"tools": {"a b\n": {"on": CANARY}}}),
        TypeError,
        "tools[0].on",  # counted, not shown: it is no plain name
    ),
    (
        "deduplicates not a mapping",
        lambda: declaration_of({"deduplicates": CANARY}),
        TypeError,
        "deduplicates",
    ),
    (
        "argument missing",
        lambda: declaration_of({"deduplicates": {}}),
        TypeError,
        "deduplicates.argument",
    ),
    (
        "argument empty",
        lambda: declaration_of({"deduplicates": {"argument": ""}}),
        ValueError,
        "deduplicates.argument",
    ),
    (
        "argument not a string",
        lambda: declaration_of({"deduplicates": {"argument": [CANARY]}}),
        TypeError,
        "deduplicates.argument",
    ),
    (
        "argument None",
        lambda: declaration_of({"deduplicates": {"argument": None}}),
        TypeError,
        "deduplicates.argument",
    ),
    (
        "a pointer with a bare '~'",
        lambda: declaration_of({"deduplicates": {"argument": f"/meta/{CANARY}~"}}),
        ValueError,
        "deduplicates.argument",
    ),
    (
        "a pointer with '~2'",
        lambda: declaration_of({"deduplicates": {"argument": f"/{CANARY}~2/key"}}),
        ValueError,
        "deduplicates.argument",
    ),
    (
        "a pointer in a server's declaration",
        lambda: servers_of({url(): {"deduplicates": {"argument": f"/~{CANARY}"}}}),
        ValueError,
        "servers[0].deduplicates.argument",
    ),
    (
        "a pointer in inline JSON",
        lambda: servers_from_json(f'{{"{url()}": {{"deduplicates": {{"argument": "/~x{CANARY}"}}}}}}', "ENV"),
        ValueError,
        "ENV[0].deduplicates.argument",
    ),
    (
        "a pointer in TOML",
        lambda: servers_from_config_file(
            f'[servers."{url()}".deduplicates]\nargument = "/meta/{CANARY}~"\n', ".toml", "cfg"
        ),
        ValueError,
        "cfg.servers[0].deduplicates.argument",
    ),
    (
        "a pointer built directly",
        lambda: Declaration(key_argument=f"/{CANARY}/~"),
        ValueError,
        "key_argument",
    ),
    (
        "unknown dedup field",
        lambda: declaration_of({"deduplicates": {"argument": "k", "header": CANARY}}),
        TypeError,
        "deduplicates.header",
    ),
    (
        "where prefixes the path",
        lambda: declaration_of({"tools": {"charge": {"chnages": True}}}, "servers[1]"),
        TypeError,
        "servers[1].tools.charge.chnages",
    ),
    # servers: named by ordinal, never by URL
    ("servers not a mapping", lambda: servers_of([url()]), TypeError, "servers"),
    (
        "a server's declaration",
        lambda: servers_of({url(): {"policy": CANARY}}),
        ValueError,
        "servers[0].policy",
    ),
    (
        "the second server",
        lambda: servers_of({"http://ok": {}, url(): {"tools": {"t": {"on": [CANARY]}}}}),
        ValueError,
        "servers[1].tools.t.on[0]",
    ),
    ("declaration not a mapping", lambda: servers_of({url(): CANARY}), TypeError, "servers[0]"),
    ("URL not a string", lambda: servers_of({url().encode(): {}}), TypeError, "servers[0]"),
    ("not http(s)", lambda: servers_of({f"ftp://{CANARY}/x": {}}), ValueError, "servers[0]"),
    ("no host", lambda: servers_of({f"http:///{CANARY}": {}}), ValueError, "servers[0]"),
    ("bad port", lambda: servers_of({f"http://h:{CANARY}/": {}}), ValueError, "servers[0]"),
    ("port out of range", lambda: servers_of({f"http://h:99999/{CANARY}": {}}), ValueError, "servers[0]"),
    ("bad IPv6", lambda: servers_of({f"http://[{CANARY}/": {}}), ValueError, "servers[0]"),
    (
        "the same endpoint twice",
        lambda: servers_of({f"http://h/{CANARY}": {}, f"HTTP://u:p@H:80/{CANARY}/?x={CANARY}": {}}),
        ValueError,
        "servers[1]",
    ),
    (
        "the same origin twice",
        lambda: servers_of({f"https://{CANARY}.example": {}, f"https://{CANARY}.example:443/": {}}),
        ValueError,
        "servers[1]",
    ),
    # text forms
    (
        "inline JSON",
        lambda: servers_from_json(f'{{"{url()}": {{"policy": "{CANARY}"}}}}', "ENV"),
        ValueError,
        "ENV[0].policy",
    ),
    ("invalid JSON", lambda: servers_from_json(f'{{"{CANARY}": ', "ENV"), ValueError, "ENV"),
    (
        "a key twice in JSON",
        lambda: servers_from_json(
            f'{{"http://h": {{"policy": "compatibility", "policy": "{CANARY}"}}}}', "ENV"
        ),
        ValueError,
        "ENV",
    ),
    ("JSON not a mapping", lambda: servers_from_json(f'["{CANARY}"]', "ENV"), TypeError, "ENV"),
    ("deep JSON", lambda: servers_from_json("[" * 100_000 + f'"{CANARY}"', "ENV"), ValueError, "ENV"),
    ("huge JSON number", lambda: servers_from_json("1" * 5000, "ENV"), ValueError, "ENV"),
    ("JSON not text", lambda: servers_from_json(CANARY.encode(), "ENV"), TypeError, "ENV"),  # type: ignore[arg-type]
    (
        "TOML servers not a table",
        lambda: servers_from_config_file(f'servers = "{CANARY}"', ".toml", "cfg"),
        TypeError,
        "cfg.servers",
    ),
    (
        "invalid TOML",
        lambda: servers_from_config_file(f'servers = {{ "{CANARY}" = ', ".toml", "cfg"),
        ValueError,
        "cfg",
    ),
    (
        "TOML declaration",
        lambda: servers_from_config_file(f'[servers."{url()}"]\npolicy = "{CANARY}"\n', ".toml", "cfg"),
        ValueError,
        "cfg.servers[0].policy",
    ),
    (
        "config unknown field",
        lambda: servers_from_config_file(f'{{"server": "{CANARY}"}}', ".json", "cfg"),
        TypeError,
        "cfg.server",
    ),
    (
        "config suffix",
        lambda: servers_from_config_file(f"servers: {CANARY}", ".yaml", "cfg"),
        ValueError,
        "cfg",
    ),
    # settings
    ("unknown setting", lambda: settings_of(max_atempts=CANARY), TypeError, "max_atempts"),
    ("max_attempts zero", lambda: settings_of(max_attempts=0), ValueError, "max_attempts"),
    ("max_attempts text", lambda: settings_of(max_attempts=CANARY), TypeError, "max_attempts"),
    ("max_attempts bool", lambda: settings_of(max_attempts=True), TypeError, "max_attempts"),
    ("max_attempts float", lambda: settings_of(max_attempts=3.0), TypeError, "max_attempts"),
    ("max_wait_ms negative", lambda: settings_of(max_wait_ms=-1), ValueError, "max_wait_ms"),
    ("max_wait_ms bool", lambda: settings_of(max_wait_ms=False), TypeError, "max_wait_ms"),
    ("retry_on_throttle text", lambda: settings_of(retry_on_throttle=CANARY), TypeError, "retry_on_throttle"),
    ("retry_on_throttle int", lambda: settings_of(retry_on_throttle=1), TypeError, "retry_on_throttle"),
    ("retry_budget text", lambda: settings_of(retry_budget=CANARY), TypeError, "retry_budget"),
    ("retry_budget short", lambda: settings_of(retry_budget=(10,)), TypeError, "retry_budget"),
    ("retry_budget tokens", lambda: settings_of(retry_budget=(CANARY, 0.1)), TypeError, "retry_budget[0]"),
    ("retry_budget zero tokens", lambda: settings_of(retry_budget=(0, 0.1)), ValueError, "retry_budget[0]"),
    ("retry_budget bool tokens", lambda: settings_of(retry_budget=(True, 0.1)), TypeError, "retry_budget[0]"),
    ("retry_budget ratio", lambda: settings_of(retry_budget=(10, CANARY)), TypeError, "retry_budget[1]"),
    ("retry_budget ratio zero", lambda: settings_of(retry_budget=(10, 0.0)), ValueError, "retry_budget[1]"),
    ("retry_budget ratio big", lambda: settings_of(retry_budget=(10, 10.5)), ValueError, "retry_budget[1]"),
    ("retry_budget ratio tiny", lambda: settings_of(retry_budget=(10, 1e-4)), ValueError, "retry_budget[1]"),
    ("env retry budget tiny", lambda: retry_budget_of("10,0.0001", "ENV_B"), ValueError, "ENV_B"),
    (
        "retry_budget ratio nan",
        lambda: settings_of(retry_budget=(10, float("nan"))),
        ValueError,
        "retry_budget[1]",
    ),
    ("env retry budget", lambda: retry_budget_of(CANARY, "ENV_B"), ValueError, "ENV_B"),
    ("env retry budget form", lambda: retry_budget_of(f"10,{CANARY}", "ENV_B"), ValueError, "ENV_B"),
    ("env retry budget inf", lambda: retry_budget_of("10,inf", "ENV_B"), ValueError, "ENV_B"),
    ("env retry budget zero", lambda: retry_budget_of("0,0.1", "ENV_B"), ValueError, "ENV_B"),
    ("env retry budget sign", lambda: retry_budget_of("-1,0.1", "ENV_B"), ValueError, "ENV_B"),
    ("env int", lambda: setting_from_text("max_attempts", CANARY, "ENV_I"), ValueError, "ENV_I"),
    ("env int digits", lambda: setting_from_text("max_attempts", "9" * 5000, "ENV_I"), ValueError, "ENV_I"),
    ("env int minimum", lambda: setting_from_text("max_attempts", "0", "ENV_I"), ValueError, "ENV_I"),
    ("env bool", lambda: setting_from_text("retry_on_throttle", CANARY, "ENV_T"), ValueError, "ENV_T"),
    ("record text", lambda: settings_of(record=CANARY), ValueError, "record"),
    ("record type", lambda: settings_of(record=1), TypeError, "record"),
    ("env record", lambda: setting_from_text("record", CANARY, "ENV_R"), ValueError, "ENV_R"),
]


def every_text_of(error: BaseException) -> str:
    """The message, args and repr of `error` and of every exception chained to it."""
    texts: list[str] = []
    seen: set[int] = set()
    pending: list[BaseException | None] = [error]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        texts += [
            str(current),
            repr(current),
            repr(current.args),
            repr(vars(current) if hasattr(current, "__dict__") else ""),
        ]
        pending += [current.__cause__, current.__context__]
    return "\n".join(texts)


@pytest.mark.parametrize(("case", "make", "kind", "path"), REFUSALS, ids=[r[0] for r in REFUSALS])
def test_a_refusal_names_the_field_path_and_echoes_no_value(
    case: str, make: Callable[[], object], kind: type[Exception], path: str
) -> None:
    with pytest.raises(kind) as caught:
        make()
    error = caught.value
    assert type(error).__name__.startswith("Declaration"), case
    assert error.field == path  # type: ignore[attr-defined]
    assert str(error).startswith(f"{path}: ")
    everything = every_text_of(error)
    assert CANARY not in everything and CANARY.lower() not in everything
    assert error.__cause__ is None and error.__context__ is None


def test_a_refusal_does_not_name_the_endpoint() -> None:
    with pytest.raises(ValueError) as caught:
        servers_of({"https://api.example.com/mcp": {"policy": "strict"}})
    assert "example" not in every_text_of(caught.value)


# --- endpoints ----------------------------------------------------------------------------------

ORIGIN_KEY = declaration_of({"label": "origin"})
PATH_KEY = declaration_of({"label": "path"})
SECURE = declaration_of({"label": "secure"})


def servers() -> Any:
    return servers_of(
        {
            "http://API.Example.com:8000": ORIGIN_KEY,
            "http://api.example.com:8000/mcp": PATH_KEY,
            "https://user:secret@Secure.Example.com/mcp/?token=1#x": SECURE,
        }
    )


@pytest.mark.parametrize(
    ("request_url", "label"),
    [
        ("http://api.example.com:8000/mcp", "path"),
        ("HTTP://API.EXAMPLE.COM:8000/mcp", "path"),  # scheme and host are case-insensitive
        ("http://api.example.com:8000/mcp?session=1#frag", "path"),  # query and fragment ignored
        ("http://api.example.com:8000/mcp/", "path"),  # a trailing slash is the same path
        ("http://someone:pw@api.example.com:8000/mcp", "path"),  # userinfo ignored
        ("http://api.example.com:8000/MCP", "origin"),  # the path is case-sensitive: the origin key
        ("http://api.example.com:8000/mcp/extra", "origin"),  # no prefix match: the origin key
        ("http://api.example.com:8000/", "origin"),
        ("http://api.example.com:8000", "origin"),
        ("https://secure.example.com/mcp", "secure"),  # default port 443 filled in
        ("https://secure.example.com:443/mcp?token=2", "secure"),
        ("https://secure.example.com:443/mcp/", "secure"),
        ("https://secure.example.com/other", None),  # a path key covers only its path
        ("http://secure.example.com/mcp", None),  # the scheme counts
        ("https://secure.example.com:8443/mcp", None),  # the port counts
        ("http://api.example.com/mcp", None),  # default 80 is not 8000
        ("http://other.example.com:8000/mcp", None),
        ("not a url", None),
        ("http://api.example.com:99999/mcp", None),
        ("http://[::1/mcp", None),
        ("", None),
    ],
)
def test_endpoint_matching(request_url: str, label: str | None) -> None:
    found = servers().declaration_for(request_url)
    assert found.label == label
    if label is None:
        assert found is COMPATIBILITY
    assert servers().declaration_for(request_url) == found  # and again, from the cache


def test_default_ports_match_both_ways() -> None:
    declared = servers_of({"http://h:80/mcp": PATH_KEY, "https://h:443": SECURE})
    assert declared.declaration_for("http://h/mcp") is PATH_KEY
    assert declared.declaration_for("https://h/anything") is SECURE
    assert declared.declaration_for("http://h:443/mcp") is COMPATIBILITY


def test_ipv6_and_international_hosts() -> None:
    declared = servers_of({"http://[::1]:8000/mcp": PATH_KEY, "https://Bücher.example/mcp": SECURE})
    assert declared.declaration_for("http://[0:0::1]:8000/mcp") is COMPATIBILITY  # no address normalisation
    assert declared.declaration_for("http://[::1]:8000/mcp") is PATH_KEY
    assert declared.declaration_for("https://xn--bcher-kva.example/mcp") is SECURE
    assert declared.declaration_for("https://bücher.example/mcp") is SECURE


def test_no_servers_resolves_everything_to_compatibility() -> None:
    assert NO_SERVERS.declaration_for("http://anything/mcp") is COMPATIBILITY
    assert len(NO_SERVERS) == 0
    assert servers_of(None) is NO_SERVERS
    assert servers_of({}) == NO_SERVERS


def test_servers_count_and_never_show_their_urls() -> None:
    declared = servers()
    assert len(declared) == 3
    assert "secret" not in repr(declared) and "example" not in repr(declared)
    assert servers_of(declared) is declared


def test_resolve_needs_a_string() -> None:
    with pytest.raises(TypeError):
        servers().declaration_for(b"http://api.example.com:8000/mcp")  # type: ignore[arg-type]


def test_the_resolve_cache_is_bounded() -> None:
    declared = servers()
    for i in range(3000):
        assert declared.declaration_for(f"http://api.example.com:8000/mcp?i={i}") is PATH_KEY
    assert declared.declaration_for.cache_info().currsize <= 1024  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("given", "origin"),
    [
        ("http://Example.COM/mcp?x=1#y", "http://example.com:80"),
        ("https://u:p@example.com/mcp", "https://example.com:443"),
        ("HTTPS://example.com:8443", "https://example.com:8443"),
        ("http://[::1]:3000/x", "http://[::1]:3000"),
        ("http://127.0.0.1:8000/mcp", "http://127.0.0.1:8000"),
    ],
)
def test_origin_of(given: str, origin: str) -> None:
    assert origin_of(given) == origin


@pytest.mark.parametrize("given", ["", "example.com/mcp", "ftp://h/x", "http://h:0/", f"http://h:{CANARY}/"])
def test_origin_of_names_what_is_not_an_http_url_unknown_without_echoing_it(given: str) -> None:
    # Never raised: a request to a URL the plugin cannot parse is still sent.
    assert origin_of(given) == "unknown"


url_parts = st.tuples(
    st.sampled_from(("http", "https", "HTTP", "ftp", "")),
    st.sampled_from(("", "user@", "u:p@")),
    st.one_of(st.text(max_size=12), st.sampled_from(("Example.COM", "[::1]", "bücher.de", "a_b.c"))),
    st.sampled_from(("", ":", ":80", ":443", ":65536", ":x", ":8080")),
    st.text(max_size=8),
)


@settings(max_examples=300)
@given(url_parts)
def test_an_origin_is_always_a_record_endpoint(parts: tuple[str, str, str, str, str]) -> None:
    scheme, userinfo, host, port, rest = parts
    text = f"{scheme}://{userinfo}{host}{port}/{rest}"
    origin = origin_of(text)
    assert is_endpoint(origin)
    assert "@" not in origin and "?" not in origin and "#" not in origin
    if origin == "unknown":  # what cannot be parsed cannot be declared either
        with pytest.raises(ValueError):
            servers_of({text: PATH_KEY})
        return
    assert servers_of({text: PATH_KEY}).declaration_for(text) is PATH_KEY


# --- text forms ---------------------------------------------------------------------------------

TOML = """
[servers."http://127.0.0.1:8000/mcp"]
policy = "app-authorized"
label = "billing"
adapter = "agentcore-runtime"
deduplicates = { argument = "idempotency_key" }

[servers."http://127.0.0.1:8000/mcp".tools.search]
on = ["throttle", "network"]

[servers."http://127.0.0.1:8000/mcp".tools.charge]
changes = true
"""


def test_a_toml_config_file() -> None:
    declared = servers_from_config_file(TOML, ".TOML", "cfg")
    assert declared.declaration_for("http://127.0.0.1:8000/mcp") == declaration_of(FULL)


def test_a_json_config_file_and_inline_json() -> None:
    import json

    text = json.dumps({"servers": {"http://127.0.0.1:8000/mcp": FULL}})
    assert servers_from_config_file(text, ".json", "cfg").declaration_for(
        "http://127.0.0.1:8000/mcp"
    ) == declaration_of(FULL)
    inline = json.dumps({"http://127.0.0.1:8000/mcp": FULL})
    from_json = servers_from_json(inline, "ENV")
    assert from_json.declaration_for("http://127.0.0.1:8000/mcp/") == declaration_of(FULL)


def test_a_config_file_without_servers_declares_none() -> None:
    assert servers_from_config_file("", ".toml", "cfg") is NO_SERVERS
    assert servers_from_config_file("{}", ".json", "cfg") is NO_SERVERS


def test_servers_may_hold_declarations_already_built() -> None:
    built = declaration_of(FULL)
    assert servers_of({"http://h/mcp": built}).declaration_for("http://h:80/mcp") is built


# --- settings -----------------------------------------------------------------------------------


def test_settings_defaults_are_the_contract_s() -> None:
    assert settings_of() == Settings() == Settings(3, 10000, True, (100, 0.1))


def test_settings_are_read_and_normalised() -> None:
    read = settings_of(max_attempts=5, max_wait_ms=0, retry_on_throttle=False, retry_budget=[10, 1])
    assert read == Settings(5, 0, False, (10, 1.0))
    assert type(read.retry_budget) is tuple and type(read.retry_budget[1]) is float
    assert settings_of(retry_budget=None).retry_budget is None


@pytest.mark.parametrize(
    ("text", "budget"),
    [("100,0.1", (100, 0.1)), (" 10 , 1 ", (10, 1.0)), ("off", None), ("OFF", None), ("5,.5", (5, 0.5))],
)
def test_the_environment_s_retry_budget(text: str, budget: tuple[int, float] | None) -> None:
    assert retry_budget_of(text, "ENV") == budget


def test_where_the_record_goes() -> None:
    assert Settings().record == "span_event"
    assert [settings_of(record=place).record for place in ("span_event", "log", "both")] == [
        "span_event",
        "log",
        "both",
    ]
    assert setting_from_text("record", " LOG ", "E") == "log"
    assert setting_from_text("record", "Both", "E") == "both"


def test_the_environment_s_ints_and_bools() -> None:
    assert setting_from_text("max_attempts", " 7 ", "E") == 7
    assert setting_from_text("max_wait_ms", "0", "E") == 0
    assert setting_from_text("retry_on_throttle", "False", "E") is False
    assert setting_from_text("retry_on_throttle", " TRUE ", "E") is True
