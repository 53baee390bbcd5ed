"""The replay law: docs/contract.md's table, row by row, and as a property against an independent oracle."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_mcp_replay import telemetry as t
from otel_mcp_replay.declaration import COMPATIBILITY, Declaration, declaration_of
from otel_mcp_replay.law import PROTOCOL, TASK_POLL, Declined, FailureKind, Permission, Repeat, Target, permit

FAILURES: tuple[FailureKind, ...] = ("throttle", "session-busy", "network", "error")


def declared(policy: str = "compatibility", key: str | None = None, **tools: dict[str, Any]) -> Declaration:
    raw: dict[str, Any] = {"policy": policy, "tools": tools}
    if key is not None:
        raw["deduplicates"] = {"argument": key}
    return declaration_of(raw)


SEARCH = Target(tool="search")
CHARGE = Target(tool="charge")
CHARGE_WITH_KEY = Target(tool="charge", key_carried=True)


# --- the table, one test per cell -------------------------------------------------------------


def test_throttle_under_compatibility_repeats_by_app_when_the_tool_names_throttle() -> None:
    """A 429 on a tool whose entry names `throttle`: the app's permission, no assumption."""
    decision = permit(declared(search={"on": ["throttle"]}), SEARCH, "throttle")
    assert decision == Repeat(Permission(by="app", on="throttle"))


def test_throttle_under_compatibility_repeats_by_compatibility_assuming_refused() -> None:
    """A 429 on any other tool under compatibility: repeated by that policy, on the recorded
    assumption that the server refused it before running it."""
    for declaration in (COMPATIBILITY, declared(search={"on": ["network"]})):
        decision = permit(declaration, SEARCH, "throttle")
        assert decision == Repeat(Permission("compatibility", "throttle", "refused-before-execution"))


def test_throttle_under_compatibility_with_retry_on_throttle_off_is_not_permitted() -> None:
    """`retry_on_throttle=False` turns the compatibility rule off ..."""
    assert permit(COMPATIBILITY, SEARCH, "throttle", retry_on_throttle=False) == Declined("not-permitted")


def test_throttle_under_compatibility_with_retry_on_throttle_off_still_honours_the_app() -> None:
    """... but not the app's own word: a tool that names `throttle` is still repeated by the app."""
    decision = permit(declared(search={"on": ["throttle"]}), SEARCH, "throttle", retry_on_throttle=False)
    assert decision == Repeat(Permission("app", "throttle"))


def test_throttle_under_app_authorized_repeats_by_app_only_when_the_tool_names_throttle() -> None:
    """Under app-authorized a 429 is repeated only on the app's word, never on an assumption."""
    declaration = declared("app-authorized", search={"on": ["throttle"]}, other={"on": ["network"]})
    assert permit(declaration, SEARCH, "throttle") == Repeat(Permission("app", "throttle"))
    assert permit(declaration, Target(tool="other"), "throttle") == Declined("not-permitted")
    assert permit(declaration, Target(tool="unlisted"), "throttle") == Declined("not-permitted")


@pytest.mark.parametrize("policy", t.POLICIES)
def test_network_repeats_by_app_only_when_the_tool_names_network(policy: str) -> None:
    """A request sent without a response (reset, refused, timeout) is repeated only on the app's
    word, under either policy: it may have run."""
    declaration = declared(policy, search={"on": ["network"]}, other={"on": ["throttle"]})
    assert permit(declaration, SEARCH, "network") == Repeat(Permission("app", "network"))
    assert permit(declaration, Target(tool="other"), "network") == Declined("not-permitted")
    assert permit(declaration, Target(tool="unlisted"), "network") == Declined("not-permitted")


@pytest.mark.parametrize("policy", t.POLICIES)
def test_session_busy_repeats_by_adapter_assuming_refused(policy: str) -> None:
    """The adapter's own refusal (AgentCore's retryable conflict) is repeated as the ADAPTER's
    policy, on a recorded assumption, under either policy and whatever the tool names."""
    declaration = declared(policy, adapter_free={"on": []})
    decision = permit(declaration, SEARCH, "session-busy")
    assert decision == Repeat(Permission("adapter", "session-busy", "refused-before-execution"))
    assert permit(declaration, SEARCH, "session-busy", retry_on_throttle=False) == decision


@pytest.mark.parametrize("policy", t.POLICIES)
def test_error_is_not_retryable(policy: str) -> None:
    """5xx, other 4xx and JSON-RPC errors are never repeated, whatever the app declared."""
    declaration = declared(policy, search={"on": ["throttle", "network"]})
    assert permit(declaration, SEARCH, "error") == Declined("not-retryable")


# --- the side-effect guard --------------------------------------------------------------------


@pytest.mark.parametrize("policy", t.POLICIES)
@pytest.mark.parametrize("failure", ["throttle", "network", "session-busy"])
def test_a_tool_that_changes_is_not_repeated_without_a_declared_key(
    policy: str, failure: FailureKind
) -> None:
    """A tool declared `changes: true` is never repeated when the server is not declared to deduplicate,
    even when its entry names the failure, even when the call carries something that looks like a key."""
    declaration = declared(policy, charge={"on": ["throttle", "network"], "changes": True})
    for target in (CHARGE, CHARGE_WITH_KEY):
        assert permit(declaration, target, failure) == Declined("changes-without-key")


@pytest.mark.parametrize("policy", t.POLICIES)
@pytest.mark.parametrize("failure", ["throttle", "network", "session-busy"])
def test_a_tool_that_changes_is_not_repeated_when_the_call_lacks_the_key(
    policy: str, failure: FailureKind
) -> None:
    """The server deduplicates, but this call carries no non-empty key: no repeat."""
    declaration = declared(policy, "idempotency_key", charge={"on": ["throttle", "network"], "changes": True})
    assert permit(declaration, CHARGE, failure) == Declined("changes-without-key")


@pytest.mark.parametrize("policy", t.POLICIES)
def test_a_tool_that_changes_is_repeated_as_the_table_says_when_the_call_carries_the_key(policy: str) -> None:
    """With the key carried, the guard stands aside and the table decides."""
    declaration = declared(policy, "idempotency_key", charge={"on": ["network"], "changes": True})
    assert permit(declaration, CHARGE_WITH_KEY, "network") == Repeat(Permission("app", "network"))
    assert permit(declaration, CHARGE_WITH_KEY, "session-busy") == Repeat(
        Permission("adapter", "session-busy", "refused-before-execution")
    )


def test_the_guard_comes_after_the_table_in_the_order_of_reasons() -> None:
    """A failure the table refuses keeps the table's reason: the guard only stops would-be repeats."""
    declaration = declared("app-authorized", charge={"changes": True})
    assert permit(declaration, CHARGE, "error") == Declined("not-retryable")
    assert permit(declaration, CHARGE, "network") == Declined("not-permitted")
    assert permit(declaration, CHARGE, "throttle") == Declined("not-permitted")
    assert permit(declared(charge={"changes": True}), CHARGE, "throttle") == Declined("changes-without-key")


# --- protocol requests ------------------------------------------------------------------------


@pytest.mark.parametrize("policy", t.POLICIES)
def test_a_protocol_request_is_repeated_on_throttle_with_no_permission_to_record(policy: str) -> None:
    """initialize, tools/list, notifications: the declaration does not govern them; a 429 is asked
    again under both policies, and they file no record (no permission)."""
    assert permit(declared(policy, search={"changes": True}), PROTOCOL, "throttle") == Repeat(None)


@pytest.mark.parametrize("policy", t.POLICIES)
def test_a_protocol_request_is_not_repeated_on_throttle_with_retry_on_throttle_off(policy: str) -> None:
    assert permit(declared(policy), PROTOCOL, "throttle", retry_on_throttle=False) == Declined(
        "not-permitted"
    )


@pytest.mark.parametrize("policy", t.POLICIES)
@pytest.mark.parametrize("failure", ["network", "error"])
def test_a_protocol_request_is_not_retryable_on_anything_but_throttle_and_its_adapters_refusal(
    policy: str, failure: FailureKind
) -> None:
    """Nothing else about the protocol's own requests changes."""
    assert permit(declared(policy), PROTOCOL, failure) == Declined("not-retryable")


@pytest.mark.parametrize("policy", t.POLICIES)
@pytest.mark.parametrize("retry_on_throttle", [True, False])
def test_a_protocol_request_is_repeated_on_its_adapters_refusal(policy: str, retry_on_throttle: bool) -> None:
    """The adapter retries its own refusal under both policies (AgentCore's while a session starts)."""
    decision = permit(declared(policy), PROTOCOL, "session-busy", retry_on_throttle=retry_on_throttle)
    assert isinstance(decision, Repeat) and decision.permission is None


# --- targets that name no declared tool -------------------------------------------------------


def test_a_tools_call_without_a_name_matches_no_entry() -> None:
    """Target(tool="") is a tool call: under app-authorized it is never repeated on the app's word."""
    declaration = declared("app-authorized", search={"on": ["throttle", "network"]})
    assert permit(declaration, Target(tool=""), "throttle") == Declined("not-permitted")
    assert permit(COMPATIBILITY, Target(tool=""), "throttle") == Repeat(
        Permission("compatibility", "throttle", "refused-before-execution")
    )


@pytest.mark.parametrize("failure", FAILURES)
def test_a_batch_carrying_a_tool_call_is_never_repeated(failure: FailureKind) -> None:
    """One permission cannot cover several calls sent in one body."""
    decision = permit(COMPATIBILITY, Target(tool="", batch=True), failure)
    assert isinstance(decision, Declined)


# --- the property: permit agrees with the table, written here as a table ----------------------

RB = "refused-before-execution"


def oracle(
    policy: str,
    entry_on: frozenset[str],
    changes: bool,
    key_declared: bool,
    is_tool: bool,
    key_carried: bool,
    failure: str,
    retry_on_throttle: bool,
) -> tuple[str, ...]:
    """docs/contract.md's law as its table; ("repeat", by, on, assumes) or ("declined", reason)."""
    if not is_tool:
        protocol = {
            ("throttle", True): ("repeat",),
            ("throttle", False): ("declined", "not-permitted"),
            # The adapter's own refusal, whatever retry_on_throttle says: a protocol request runs no tool.
            ("session-busy", True): ("repeat",),
            ("session-busy", False): ("repeat",),
        }
        return protocol.get((failure, retry_on_throttle), ("declined", "not-retryable"))
    names_throttle = "throttle" in entry_on
    names_network = "network" in entry_on
    table = {
        # (failure, policy, names the kind, retry_on_throttle) -> cell
        ("throttle", "compatibility", True, True): ("repeat", "app", "throttle", ""),
        ("throttle", "compatibility", True, False): ("repeat", "app", "throttle", ""),
        ("throttle", "compatibility", False, True): ("repeat", "compatibility", "throttle", RB),
        ("throttle", "compatibility", False, False): ("declined", "not-permitted"),
        ("throttle", "app-authorized", True, True): ("repeat", "app", "throttle", ""),
        ("throttle", "app-authorized", True, False): ("repeat", "app", "throttle", ""),
        ("throttle", "app-authorized", False, True): ("declined", "not-permitted"),
        ("throttle", "app-authorized", False, False): ("declined", "not-permitted"),
    }
    for policy_ in t.POLICIES:
        for rot in (True, False):
            table[("network", policy_, True, rot)] = ("repeat", "app", "network", "")
            table[("network", policy_, False, rot)] = ("declined", "not-permitted")
            for names in (True, False):
                table[("session-busy", policy_, names, rot)] = ("repeat", "adapter", "session-busy", RB)
                table[("error", policy_, names, rot)] = ("declined", "not-retryable")
    names = {"throttle": names_throttle, "network": names_network}.get(failure, False)
    cell = table[(failure, policy, names, retry_on_throttle)]
    if cell[0] == "repeat" and changes and not (key_declared and key_carried):
        return ("declined", "changes-without-key")
    return cell


def as_cell(decision: Repeat | Declined) -> tuple[str, ...]:
    if isinstance(decision, Declined):
        return ("declined", decision.reason)
    if decision.permission is None:
        return ("repeat",)
    p = decision.permission
    return ("repeat", p.by, p.on, p.assumes or "")


TOOL_POOL = ("search", "charge", "fetch.page", "a b")
entries = st.fixed_dictionaries(
    {},
    optional={
        "on": st.lists(st.sampled_from(t.DECLARABLE_KINDS), max_size=3),
        "changes": st.booleans(),
    },
)
raw_declarations = st.fixed_dictionaries(
    {},
    optional={
        "policy": st.sampled_from(t.POLICIES),
        "tools": st.dictionaries(st.sampled_from(TOOL_POOL), entries, max_size=4),
        "deduplicates": st.builds(lambda a: {"argument": a}, st.sampled_from(("key", "idempotency_key"))),
        "adapter": st.sampled_from(t.ADAPTERS),
        "label": st.sampled_from(("billing", "a.b-c")),
    },
)
targets = st.one_of(
    st.just(PROTOCOL),
    # A tool call's target, as the contract table reads it (no batch, no task poll: their own tests).
    st.builds(
        Target,
        tool=st.sampled_from((*TOOL_POOL, "unlisted", "")),
        key_carried=st.booleans(),
        batch=st.just(False),
        request_id=st.none(),
        params=st.none(),
        poll=st.just(False),
    ),
)


@settings(max_examples=500)
@given(raw_declarations, targets, st.sampled_from(FAILURES), st.booleans())
def test_permit_agrees_with_the_contract_table(
    raw: dict[str, Any], target: Target, failure: FailureKind, retry_on_throttle: bool
) -> None:
    declaration = declaration_of(raw)
    raw_entry = raw.get("tools", {}).get(target.tool, {}) if target.tool else {}
    expected = oracle(
        policy=raw.get("policy", "compatibility"),
        entry_on=frozenset(raw_entry.get("on", ())),
        changes=raw_entry.get("changes", False),
        key_declared="deduplicates" in raw,
        is_tool=target.tool is not None,
        key_carried=target.key_carried,
        failure=failure,
        retry_on_throttle=retry_on_throttle,
    )
    assert as_cell(permit(declaration, target, failure, retry_on_throttle=retry_on_throttle)) == expected


@settings(max_examples=300)
@given(raw_declarations, st.sampled_from(TOOL_POOL), st.booleans(), st.sampled_from(FAILURES), st.booleans())
def test_a_changes_tool_without_its_key_is_never_repeated(
    raw: dict[str, Any], tool: str, carried: bool, failure: FailureKind, retry_on_throttle: bool
) -> None:
    raw = {**raw, "tools": {**raw.get("tools", {}), tool: {"on": ["throttle", "network"], "changes": True}}}
    declaration = declaration_of(raw)
    key_present = declaration.key_argument is not None and carried
    decision = permit(
        declaration, Target(tool=tool, key_carried=carried), failure, retry_on_throttle=retry_on_throttle
    )
    if not key_present:
        assert isinstance(decision, Declined)


# --- a task's poll (SEP-2663): a pure, idempotent read -----------------------------------------


@pytest.mark.parametrize("policy", t.POLICIES)
@pytest.mark.parametrize(
    ("failure", "status"), [("network", 0), ("throttle", 429), ("error", 503), ("error", 500)]
)
def test_a_poll_is_repeated_on_what_says_nothing_of_the_read(
    policy: str, failure: FailureKind, status: int
) -> None:
    """No response, a 429, a 5xx: under either policy, whatever the tool's declaration (reading a
    task twice runs nothing), with no permission to record."""
    declaration = declared(policy, "idempotency_key", charge={"changes": True})
    assert permit(declaration, TASK_POLL, failure, status=status) == Repeat(None)


@pytest.mark.parametrize("policy", t.POLICIES)
@pytest.mark.parametrize("status", [200, 400, 404])
def test_a_poll_answered_with_an_error_is_not_repeated(policy: str, status: int) -> None:
    """A JSON-RPC error, a 2xx without the answer, another 4xx: the server's word on the read."""
    assert permit(declared(policy), TASK_POLL, "error", status=status) == Declined("not-retryable")


def test_a_polls_429_is_not_repeated_with_retry_on_throttle_off() -> None:
    """As every protocol request's: the setting that turns repeats of a 429 off turns this one off."""
    decision = permit(COMPATIBILITY, TASK_POLL, "throttle", retry_on_throttle=False, status=429)
    assert decision == Declined("not-permitted")
    assert permit(COMPATIBILITY, TASK_POLL, "network", retry_on_throttle=False) == Repeat(None)
