"""The app's replay declaration for one endpoint: read completely or refused, then immutable.

The rule: permission comes only from what the app declared, so a declaration is read completely or
refused. Anything it cannot mean (an unknown field, policy, kind or adapter, a value of the wrong
type, a malformed JSON Pointer to the key) raises TypeError or ValueError naming the field's path
and never echoing a value: not in the message, its args, its repr, nor a chained exception. A name
the app wrote is shown in a path only when it is a plain name (a misspelt `chnages`, a tool `search`
or `web.fetch`); anything else, which could be a value written where a name belongs (a URL with its
credentials, `password=...`), is counted: `tools[3]`.
Each value is checked once: by declaration_of for what the app wrote, by the constructors for a
Declaration or ToolEntry built directly.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from otel_mcp_replay import telemetry as t
from otel_mcp_replay.fields import (
    checked_builder,
    field_path,
    fields_of,
    name_path,
    plain,
    type_error,
    value_error,
)
from otel_mcp_replay.telemetry import Policy

LABEL: Final = re.compile(r"[A-Za-z0-9._-]{1,64}", re.ASCII)

_FIELDS: Final = frozenset(("policy", "label", "tools", "deduplicates", "adapter"))
_TOOL_FIELDS: Final = frozenset(("on", "changes"))
_DEDUP_FIELDS: Final = frozenset(("argument",))
_DECLARABLE: Final = frozenset(t.DECLARABLE_KINDS)


# --- the checks, one per field -----------------------------------------------------------------


def _check_policy(value: object, path: str) -> Policy:
    if not isinstance(value, str):
        type_error(path, "must be a string")
    value = plain(value)
    if value == "compatibility":
        return "compatibility"
    if value == "app-authorized":
        return "app-authorized"
    value_error(path, f"unknown policy (known: {', '.join(t.POLICIES)})")


def _optional_text(value: object, path: str, why: str = "must be a string") -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        type_error(path, why)
    return plain(value)


def _check_label(value: object, path: str) -> str | None:
    label = _optional_text(value, path)
    if label is not None and not LABEL.fullmatch(label):
        value_error(path, "must be 1 to 64 characters of A-Z a-z 0-9 . _ -")
    return label


def _check_adapter(value: object, path: str) -> str | None:
    adapter = _optional_text(value, path)
    if adapter is not None and adapter not in t.ADAPTERS:
        value_error(path, f"unknown adapter (known: {', '.join(t.ADAPTERS)})")
    return adapter


_NOT_AN_ARGUMENT: Final = (
    "must be a string: the name of the argument that carries the key, or a JSON Pointer to it"
)
# RFC 6901: in a reference token, "~" is only ever the start of "~0" ("~") or "~1" ("/").
_BAD_ESCAPE: Final = re.compile(r"~(?![01])")


def _check_argument(value: object, path: str) -> str | None:
    argument = _optional_text(value, path, _NOT_AN_ARGUMENT)
    if argument == "":
        value_error(path, "must not be empty")
    return argument


def _key_path(argument: str | None, path: str) -> tuple[str, ...] | None:
    """Where the key is read, as reference tokens, read once: a plain name is the top-level
    argument's, one token; one that starts with "/" is a JSON Pointer (RFC 6901), unescaped token by
    token ("~1" is "/", then "~0" is "~"), or refused. Linear in its length."""
    if argument is None:
        return None
    if not argument.startswith("/"):
        return (argument,)
    if _BAD_ESCAPE.search(argument):
        value_error(path, "is a JSON Pointer with a '~' not followed by 0 or 1 (RFC 6901)")
    return tuple(token.replace("~1", "/").replace("~0", "~") for token in argument[1:].split("/"))


def _check_on(value: object, path: str) -> frozenset[str]:
    if not isinstance(value, (list, tuple, set, frozenset)):
        type_error(path, "must be a list of failure kinds")
    for i, kind in enumerate(value):
        where = f"{path}[{i}]" if isinstance(value, (list, tuple)) else path
        if not isinstance(kind, str):
            type_error(where, "must be a string")
        if plain(kind) not in _DECLARABLE:
            value_error(where, f"unknown failure kind (declarable: {', '.join(t.DECLARABLE_KINDS)})")
    return frozenset(plain(kind) for kind in value)


def _check_changes(value: object, path: str) -> bool:
    if not isinstance(value, bool):
        type_error(path, "must be true or false")
    return value


def _tool_name(name: object, path: str) -> str:
    if not isinstance(name, str):
        type_error(path, "has a tool name that is not a string")
    if not name:
        value_error(path, "has an empty tool name")
    return plain(name)


# --- the declaration ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ToolEntry:
    """One tool's entry: the failure kinds it may be sent again on, and whether it makes changes."""

    on: frozenset[str] = frozenset()  # a subset of telemetry.DECLARABLE_KINDS
    changes: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "on", _check_on(self.on, "on"))
        _check_changes(self.changes, "changes")


_NO_TOOLS: Final[Mapping[str, ToolEntry]] = MappingProxyType({})
_entry_of_checked: Final = checked_builder(ToolEntry)


@dataclass(frozen=True)
class Declaration:
    """The app's declaration for one server endpoint. The default names nothing: compatibility."""

    policy: Policy = "compatibility"
    # Not hashed: a mapping proxy cannot be. Equal declarations still hash equal by the other fields.
    tools: Mapping[str, ToolEntry] = field(default_factory=lambda: _NO_TOOLS, hash=False)
    key_argument: str | None = None  # from {"deduplicates": {"argument": ...}}, as written
    label: str | None = None
    adapter: str | None = None
    # The key argument's reference tokens (a name: one), read once from it; never compared.
    key_path: tuple[str, ...] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Built directly (not through declaration_of) it is held to the same rule, and frozen.
        _check_policy(self.policy, "policy")
        _check_label(self.label, "label")
        _check_adapter(self.adapter, "adapter")
        key_argument = _check_argument(self.key_argument, "key_argument")
        object.__setattr__(self, "key_path", _key_path(key_argument, "key_argument"))
        if not isinstance(self.tools, Mapping):
            type_error("tools", "must be a mapping")
        tools: dict[str, ToolEntry] = {}
        for i, (name, entry) in enumerate(self.tools.items()):
            tool = _tool_name(name, "tools")
            if type(entry) is not ToolEntry:
                type_error(name_path("tools", tool, i), "must be a ToolEntry")
            tools[tool] = entry
        object.__setattr__(self, "tools", MappingProxyType(tools))


COMPATIBILITY: Final = Declaration()
_declaration_of_checked: Final = checked_builder(Declaration)


def declaration_of(raw: object, where: str = "") -> Declaration:
    """`raw` (a mapping, from JSON, TOML or keyword arguments) read as a declaration, or refused.

    `where` prefixes every field path in a refusal, e.g. `servers[1].tools.charge.chnages`.
    None is COMPATIBILITY; a Declaration is returned as it is.
    """
    if raw is None:
        return COMPATIBILITY
    if isinstance(raw, Declaration):
        return raw
    given = fields_of(raw, where, _FIELDS)
    for name in ("policy", "label", "adapter", "tools", "deduplicates"):
        if name in given and given[name] is None:  # a field written holds its type; null means nothing
            type_error(field_path(where, name), "must not be null")
    policy = _check_policy(given.get("policy", "compatibility"), field_path(where, "policy"))
    label = _check_label(given.get("label"), field_path(where, "label"))
    adapter = _check_adapter(given.get("adapter"), field_path(where, "adapter"))
    key_argument = key_path = None
    if "deduplicates" in given:
        dedup = fields_of(given["deduplicates"], field_path(where, "deduplicates"), _DEDUP_FIELDS)
        path = field_path(where, "deduplicates.argument")
        if "argument" not in dedup:
            type_error(path, "is required")
        if dedup["argument"] is None:
            type_error(path, _NOT_AN_ARGUMENT)
        key_argument = _check_argument(dedup["argument"], path)
        key_path = _key_path(key_argument, path)
    tools: dict[str, ToolEntry] = {}
    if "tools" in given:
        path = field_path(where, "tools")
        raw_tools = given["tools"]
        if not isinstance(raw_tools, Mapping):
            type_error(path, "must be a mapping of tool name to entry")
        for i, (name, raw_entry) in enumerate(raw_tools.items()):
            tool = _tool_name(name, path)
            tools[tool] = _tool_entry_of(raw_entry, name_path(path, tool, i))
    return _declaration_of_checked(
        policy=policy,
        tools=MappingProxyType(tools),
        key_argument=key_argument,
        label=label,
        adapter=adapter,
        key_path=key_path,
    )


def _tool_entry_of(raw: object, path: str) -> ToolEntry:
    if isinstance(raw, ToolEntry):
        return raw
    given = fields_of(raw, path, _TOOL_FIELDS)
    on = _check_on(given.get("on", []), field_path(path, "on"))
    changes = _check_changes(given.get("changes", False), field_path(path, "changes"))
    return _ENTRIES[on, changes]


# Equal entries are one object (they are immutable): a declaration of many tools holds a few
# entries, not one per tool. All of them, made once: 2 ** len(DECLARABLE_KINDS) * 2.
_ENTRIES: Final[Mapping[tuple[frozenset[str], bool], ToolEntry]] = MappingProxyType(
    {
        (frozenset(kinds), changes): _entry_of_checked(on=frozenset(kinds), changes=changes)
        for size in range(len(t.DECLARABLE_KINDS) + 1)
        for kinds in itertools.combinations(t.DECLARABLE_KINDS, size)
        for changes in (False, True)
    }
)
