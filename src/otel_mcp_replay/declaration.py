"""The app's replay declaration and the plugin's settings, read and checked once.

The rule: permission comes only from what the app declared, so a declaration is read completely or
refused. Anything it cannot mean (an unknown field, policy, kind or adapter, a value of the wrong
type) raises TypeError or ValueError naming the field's path and never echoing a value: not in the
message, its args, its repr, nor a chained exception. Servers are named by their ordinal
(`servers[0]`, in the order written), never by URL: an endpoint URL may carry credentials.
Once read, a declaration is immutable.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Final, Literal, NoReturn, TypeGuard
from urllib.parse import urlsplit

from otel_mcp_replay import telemetry as t

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

Policy = Literal["compatibility", "app-authorized"]

LABEL: Final = re.compile(r"[A-Za-z0-9._-]{1,64}", re.ASCII)
_PLAIN_KEY: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}", re.ASCII)
_HOST: Final = re.compile(r"[a-z0-9_.-]{1,253}", re.ASCII)
_IPV6: Final = re.compile(r"[0-9a-f:.]{2,45}", re.ASCII)
# What origin_of writes, and all a record's endpoint may be when it is not a label.
ORIGIN: Final = re.compile(r"https?://(?:[a-z0-9_.-]{1,253}|\[[0-9a-f:.]{2,45}\]):([0-9]{1,5})", re.ASCII)
_DEFAULT_PORTS: Final = MappingProxyType({"http": 80, "https": 443})

_FIELDS: Final = frozenset(("policy", "label", "tools", "deduplicates", "adapter"))
_TOOL_FIELDS: Final = frozenset(("on", "changes"))
_DEDUP_FIELDS: Final = frozenset(("argument",))
_CONFIG_FIELDS: Final = frozenset(("servers",))


class DeclarationTypeError(TypeError):
    """A field of the wrong type, or one nobody declared. `field` is its path; no value is kept."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(f"{field}: {why}")
        self.field = field


class DeclarationValueError(ValueError):
    """A field whose value the rule cannot mean. `field` is its path; no value is kept."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(f"{field}: {why}")
        self.field = field


def _type_error(path: str, why: str) -> NoReturn:
    raise DeclarationTypeError(path, why)


def _value_error(path: str, why: str) -> NoReturn:
    raise DeclarationValueError(path, why)


def _key(key: str) -> str:
    """A key the app wrote, as a path segment: plain names bare, anything else quoted and escaped."""
    key = _plain(key)
    if _PLAIN_KEY.fullmatch(key):
        return key
    # json.dumps escapes control and non-ASCII characters, so a key cannot forge a log line.
    shown = key if len(key) <= 64 else key[:61] + "..."
    return json.dumps(shown)


def _at(where: str, key: str) -> str:
    segment = _key(key)
    if not where:
        return segment
    return f"{where}[{segment}]" if segment.startswith('"') else f"{where}.{segment}"


def _fields_of(raw: object, where: str, known: frozenset[str]) -> Mapping[str, object]:
    """`raw` as a mapping holding only `known` fields, or a refusal naming the first stranger."""
    if not isinstance(raw, Mapping):
        _type_error(where or "declaration", "must be a mapping")
    for key in raw:
        if not isinstance(key, str):
            _type_error(where or "declaration", "has a field name that is not a string")
        if key not in known:
            # A plain name is shown (a misspelt `chnages`); anything else could be a value written
            # where a field belongs (an endpoint URL with its credentials), so it is only counted.
            if _PLAIN_KEY.fullmatch(_plain(key)):
                _type_error(_at(where, key), "unknown field")
            position = list(raw).index(key)
            _type_error(where or "declaration", f"has an unknown field (field {position} of the mapping)")
    return raw


def _plain(value: str) -> str:
    """An exact str of `value`'s characters: a subclass's __str__, __eq__ or __hash__ never reaches
    the declaration, whose names are compared on every request."""
    return str.__str__(value)


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


# --- the declaration ---------------------------------------------------------------------------


def _check_policy(value: object, path: str) -> Policy:
    if not isinstance(value, str):
        _type_error(path, "must be a string")
    value = _plain(value)
    if value == "compatibility":
        return "compatibility"
    if value == "app-authorized":
        return "app-authorized"
    _value_error(path, f"unknown policy (known: {', '.join(t.POLICIES)})")


def _optional_text(value: object, path: str, why: str = "must be a string") -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        _type_error(path, why)
    return _plain(value)


def _check_label(value: object, path: str) -> str | None:
    label = _optional_text(value, path)
    if label is not None and not LABEL.fullmatch(label):
        _value_error(path, "must be 1 to 64 characters of A-Z a-z 0-9 . _ -")
    return label


def _check_adapter(value: object, path: str) -> str | None:
    adapter = _optional_text(value, path)
    if adapter is not None and adapter not in t.ADAPTERS:
        _value_error(path, f"unknown adapter (known: {', '.join(t.ADAPTERS)})")
    return adapter


_NOT_AN_ARGUMENT: Final = "must be a string: the name of the argument that carries the key"


def _check_argument(value: object, path: str) -> str | None:
    argument = _optional_text(value, path, _NOT_AN_ARGUMENT)
    if argument == "":
        _value_error(path, "must not be empty")
    return argument


def _check_on(value: object, path: str) -> frozenset[str]:
    if not isinstance(value, (list, tuple, set, frozenset)):
        _type_error(path, "must be a list of failure kinds")
    for i, kind in enumerate(value):
        where = f"{path}[{i}]" if isinstance(value, (list, tuple)) else path
        if not isinstance(kind, str):
            _type_error(where, "must be a string")
        if _plain(kind) not in _DECLARABLE:
            _value_error(where, f"unknown failure kind (declarable: {', '.join(t.DECLARABLE_KINDS)})")
    return frozenset(_plain(kind) for kind in value)


def _check_changes(value: object, path: str) -> bool:
    if not isinstance(value, bool):
        _type_error(path, "must be true or false")
    return value


_DECLARABLE: Final = frozenset(t.DECLARABLE_KINDS)


@dataclass(frozen=True, slots=True)
class ToolEntry:
    """One tool's entry: the failure kinds it may be sent again on, and whether it makes changes."""

    on: frozenset[str] = frozenset()  # a subset of telemetry.DECLARABLE_KINDS
    changes: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "on", _check_on(self.on, "on"))
        _check_changes(self.changes, "changes")


_NO_TOOLS: Final[Mapping[str, ToolEntry]] = MappingProxyType({})


@dataclass(frozen=True)
class Declaration:
    """The app's declaration for one server endpoint. The default names nothing: compatibility."""

    policy: Policy = "compatibility"
    # Not hashed: a mapping proxy cannot be. Equal declarations still hash equal by the other fields.
    tools: Mapping[str, ToolEntry] = field(default_factory=lambda: _NO_TOOLS, hash=False)
    key_argument: str | None = None  # from {"deduplicates": {"argument": ...}}
    label: str | None = None
    adapter: str | None = None

    def __post_init__(self) -> None:
        # Built directly (not through declaration_of) it is held to the same rule, and frozen.
        _check_policy(self.policy, "policy")
        _check_label(self.label, "label")
        _check_adapter(self.adapter, "adapter")
        _check_argument(self.key_argument, "key_argument")
        if not isinstance(self.tools, Mapping):
            _type_error("tools", "must be a mapping")
        tools: dict[str, ToolEntry] = {}
        for name, entry in self.tools.items():
            if not isinstance(name, str):
                _type_error("tools", "has a tool name that is not a string")
            if not name:
                _value_error("tools", "has an empty tool name")
            if type(entry) is not ToolEntry:
                _type_error(_at("tools", name), "must be a ToolEntry")
            tools[_plain(name)] = entry
        object.__setattr__(self, "tools", MappingProxyType(tools))

    @property
    def named(self) -> bool:
        """Whether anything is declared beyond the default (when not, no request body need be read)."""
        return (
            self.policy != "compatibility"
            or bool(self.tools)
            or self.key_argument is not None
            or self.label is not None
            or self.adapter is not None
        )


COMPATIBILITY: Final = Declaration()


def declaration_of(raw: object, where: str = "") -> Declaration:
    """`raw` (a mapping, from JSON, TOML or keyword arguments) read as a declaration, or refused.

    `where` prefixes every field path in a refusal, e.g. `servers[1].tools.charge.chnages`.
    None is COMPATIBILITY; a Declaration is returned as it is.
    """
    if raw is None:
        return COMPATIBILITY
    if isinstance(raw, Declaration):
        return raw
    given = _fields_of(raw, where, _FIELDS)
    for name in ("policy", "label", "adapter", "tools", "deduplicates"):
        if name in given and given[name] is None:  # a field written holds its type; null means nothing
            _type_error(_at(where, name), "must not be null")
    policy = _check_policy(given.get("policy", "compatibility"), _at(where, "policy"))
    label = _check_label(given.get("label"), _at(where, "label"))
    adapter = _check_adapter(given.get("adapter"), _at(where, "adapter"))
    key_argument = None
    if "deduplicates" in given:
        dedup = _fields_of(given["deduplicates"], _at(where, "deduplicates"), _DEDUP_FIELDS)
        path = _at(_at(where, "deduplicates"), "argument")
        if "argument" not in dedup:
            _type_error(path, "is required")
        if dedup["argument"] is None:
            _type_error(path, _NOT_AN_ARGUMENT)
        key_argument = _check_argument(dedup["argument"], path)
    tools: dict[str, ToolEntry] = {}
    if "tools" in given:
        path = _at(where, "tools")
        raw_tools = given["tools"]
        if not isinstance(raw_tools, Mapping):
            _type_error(path, "must be a mapping of tool name to entry")
        for name, raw_entry in raw_tools.items():
            if not isinstance(name, str):
                _type_error(path, "has a tool name that is not a string")
            if not name:
                _value_error(path, "has an empty tool name")
            tools[_plain(name)] = _tool_entry_of(raw_entry, _at(path, name))
    return Declaration(
        policy=policy,
        tools=MappingProxyType(tools),
        key_argument=key_argument,
        label=label,
        adapter=adapter,
    )


def _tool_entry_of(raw: object, path: str) -> ToolEntry:
    if isinstance(raw, ToolEntry):
        return raw
    given = _fields_of(raw, path, _TOOL_FIELDS)
    on = _check_on(given.get("on", []), _at(path, "on"))
    changes = _check_changes(given.get("changes", False), _at(path, "changes"))
    return ToolEntry(on=on, changes=changes)


# --- endpoints ---------------------------------------------------------------------------------


def _endpoint_of(url: str) -> tuple[str, str] | None:
    """(origin, path) of an http(s) URL, or None. Userinfo, query and fragment are dropped.

    The path loses its trailing slashes: `/mcp/` and `/mcp` are one endpoint (servers redirect one
    to the other), and `/` is the origin itself.
    """
    try:
        parts = urlsplit(url)
        port = parts.port  # raises ValueError for a port that is not a number in range
    except ValueError:
        return None
    scheme = parts.scheme  # urlsplit lower-cases the scheme
    host = parts.hostname  # lower-cased, without brackets or userinfo
    if scheme not in _DEFAULT_PORTS or not host:
        return None
    if port is None:
        port = _DEFAULT_PORTS[scheme]
    if not 1 <= port <= 65535:
        return None
    if ":" in host:
        if not _IPV6.fullmatch(host):
            return None
        host = f"[{host}]"
    else:
        if not host.isascii():
            try:
                host = host.encode("idna").decode("ascii")
            except UnicodeError:
                return None
        if not _HOST.fullmatch(host):
            return None
    return f"{scheme}://{host}:{port}", parts.path.rstrip("/")


def origin_of(url: str) -> str:
    """`scheme://host:port` of an http(s) URL: lower-case host, explicit port, nothing else.

    Raises ValueError (without the URL, which may carry credentials) for anything else.
    """
    endpoint = _endpoint_of(url) if isinstance(url, str) else None
    if endpoint is None:
        raise ValueError("not an http(s) URL with a host and a valid port")
    return endpoint[0]


_RESOLVE_CACHE_SIZE: Final = 1024


@dataclass(frozen=True)
class Servers:
    """The declarations by endpoint. Build with servers_of; `resolve` is called per HTTP request."""

    by_origin: Mapping[str, Declaration] = field(default_factory=dict, repr=False, hash=False)
    by_path: Mapping[tuple[str, str], Declaration] = field(default_factory=dict, repr=False, hash=False)
    # A cache of resolved URL strings: it changes no answer, so it takes no part in equality.
    _resolved: dict[str, Declaration] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_origin", MappingProxyType(dict(self.by_origin)))
        object.__setattr__(self, "by_path", MappingProxyType(dict(self.by_path)))
        object.__setattr__(self, "_resolved", {})

    def __repr__(self) -> str:  # never the URLs: a path or userinfo may carry credentials
        return f"Servers({len(self)} endpoints)"

    def __len__(self) -> int:
        return len(self.by_origin) + len(self.by_path)

    def resolve(self, url: str) -> Declaration:
        """The declaration of `url`'s endpoint: its exact path, else its origin, else COMPATIBILITY."""
        if not isinstance(url, str):
            raise TypeError("Servers.resolve needs the URL as a str")
        if not self.by_origin and not self.by_path:
            return COMPATIBILITY
        found = self._resolved.get(url)
        if found is None:
            found = self._lookup(url)
            if len(self._resolved) >= _RESOLVE_CACHE_SIZE:
                self._resolved.clear()  # endpoints are few; a flood of distinct URLs only costs parsing
            self._resolved[url] = found
        return found

    def _lookup(self, url: str) -> Declaration:
        endpoint = _endpoint_of(url)
        if endpoint is None:
            return COMPATIBILITY
        origin, path = endpoint
        if path:
            exact = self.by_path.get(endpoint)
            if exact is not None:
                return exact
        return self.by_origin.get(origin, COMPATIBILITY)


NO_SERVERS: Final = Servers()


def servers_of(raw: object, where: str = "servers") -> Servers:
    """A mapping of endpoint URL to declaration (a mapping, or a Declaration already built).

    None is no servers; a Servers is returned as it is. Each endpoint is named in a refusal by its
    ordinal from 0, `servers[1]`, never by its URL.
    """
    if raw is None:
        return NO_SERVERS
    if isinstance(raw, Servers):
        return raw
    if not isinstance(raw, Mapping):
        _type_error(where, "must be a mapping of endpoint URL to declaration")
    by_origin: dict[str, Declaration] = {}
    by_path: dict[tuple[str, str], Declaration] = {}
    ordinal_of: dict[tuple[str, str], int] = {}
    for i, (url, raw_declaration) in enumerate(raw.items()):
        path = f"{where}[{i}]"
        if not isinstance(url, str):
            _type_error(path, "the endpoint URL must be a string")
        endpoint = _endpoint_of(url)
        if endpoint is None:
            _value_error(path, "the endpoint is not an http(s) URL with a host and a valid port")
        if endpoint in ordinal_of:
            _value_error(path, f"names the same endpoint as {where}[{ordinal_of[endpoint]}]")
        ordinal_of[endpoint] = i
        if isinstance(raw_declaration, Declaration):
            declaration = raw_declaration
        else:
            declaration = declaration_of(raw_declaration, path)
        if endpoint[1]:
            by_path[endpoint] = declaration
        else:
            by_origin[endpoint[0]] = declaration
    return Servers(by_origin=by_origin, by_path=by_path)


class _DuplicateKey(Exception):
    pass


def _unique_pairs(pairs: list[tuple[str, object]]) -> dict[str, object]:
    # A key written twice would let the later one silently undo the earlier (`"changes": true`).
    out: dict[str, object] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey
        out[key] = value
    return out


def _json_of(text: object, where: str) -> object:
    if not isinstance(text, str):
        _type_error(where, "must be a string")
    problem: str | None = None
    try:
        data: object = json.loads(text, object_pairs_hook=_unique_pairs)
    except _DuplicateKey:
        problem = "names a key twice in one object"
    except json.JSONDecodeError as error:
        problem = f"is not valid JSON (line {error.lineno}, column {error.colno})"
    except (ValueError, RecursionError):
        problem = "is not valid JSON"
    # Raised here, outside the handler, so no parser error (which may quote the text) is chained.
    if problem is not None:
        _value_error(where, problem)
    return data


def _toml_of(text: object, where: str) -> object:
    if not isinstance(text, str):
        _type_error(where, "must be a string")
    failed = False
    try:
        data: object = tomllib.loads(text)
    except (ValueError, RecursionError):  # TOMLDecodeError is a ValueError
        failed = True
    if failed:
        _value_error(where, "is not valid TOML")
    return data


def servers_from_json(text: str, where: str) -> Servers:
    """Inline JSON holding the servers mapping itself (OTEL_PYTHON_MCP_REPLAY_SERVERS)."""
    return servers_of(_json_of(text, where), where)


def servers_from_config_file(text: str, suffix: str, where: str) -> Servers:
    """A config file's content, `{"servers": {...}}`, as TOML (`.toml`) or JSON (`.json`).

    No `servers` field declares none; any other field is refused.
    """
    kind = suffix.lower() if isinstance(suffix, str) else ""
    if kind == ".toml":
        data = _toml_of(text, where)
    elif kind == ".json":
        data = _json_of(text, where)
    else:
        _value_error(where, "must be a .toml or .json file")
    given = _fields_of(data, where, _CONFIG_FIELDS)
    if "servers" not in given:
        return NO_SERVERS
    return servers_of(given["servers"], _at(where, "servers"))


# --- settings ----------------------------------------------------------------------------------


def _check_int(value: object, path: str, minimum: int) -> int:
    if not _is_int(value):
        _type_error(path, "must be an integer")
    number = int(value)
    if number < minimum:
        _value_error(path, f"must be at least {minimum}")
    return number


def _check_bool(value: object, path: str) -> bool:
    if not isinstance(value, bool):
        _type_error(path, "must be True or False")
    return value


# The retry budget counts in thousandths of a token (as gRPC's retryThrottling): a smaller ratio
# would return nothing.
MIN_RATIO: Final = 0.001


def _check_retry_budget(value: object, path: str) -> tuple[int, float] | None:
    if value is None:
        return None
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        _type_error(path, "must be (tokens, ratio) or None")
    tokens, ratio = value
    count = _check_int(tokens, f"{path}[0]", 1)
    if not (_is_int(ratio) or isinstance(ratio, float)):
        _type_error(f"{path}[1]", "must be a number")
    share = float(ratio)
    if not (math.isfinite(share) and MIN_RATIO <= share <= count):
        _value_error(f"{path}[1]", "must be at least 0.001 and at most the tokens")
    return count, share


@dataclass(frozen=True)
class Settings:
    """The plugin's settings, each checked when built."""

    max_attempts: int = 3  # attempts including the first
    max_wait_ms: int = 10000  # cap on total waiting in one call
    retry_on_throttle: bool = True  # False turns off the compatibility rule for 429
    retry_budget: tuple[int, float] | None = (100, 0.1)  # (tokens, ratio) per endpoint, or None: off

    def __post_init__(self) -> None:
        object.__setattr__(self, "max_attempts", _check_int(self.max_attempts, "max_attempts", 1))
        object.__setattr__(self, "max_wait_ms", _check_int(self.max_wait_ms, "max_wait_ms", 0))
        _check_bool(self.retry_on_throttle, "retry_on_throttle")
        object.__setattr__(self, "retry_budget", _check_retry_budget(self.retry_budget, "retry_budget"))


_SETTING_NAMES: Final = frozenset(f.name for f in fields(Settings))


def settings_of(**kw: object) -> Settings:
    """Settings from keyword arguments, each checked; an unknown one is a TypeError naming it."""
    for name in kw:
        if name not in _SETTING_NAMES:
            _type_error(name, "unknown setting")
    return Settings(**kw)  # type: ignore[arg-type]  # each value is checked in __post_init__


_DIGITS: Final = re.compile(r"[0-9]{1,18}", re.ASCII)
_DECIMAL: Final = re.compile(r"[0-9]{1,18}(?:\.[0-9]{1,18})?|\.[0-9]{1,18}", re.ASCII)


def retry_budget_of(text: str, where: str) -> tuple[int, float] | None:
    """The environment's form of `retry_budget`: `TOKENS,RATIO` (e.g. `100,0.1`) or `off`."""
    if not isinstance(text, str):
        _type_error(where, "must be a string")
    spoken = text.strip()
    if spoken.lower() == "off":
        return None
    tokens, comma, ratio = spoken.partition(",")
    tokens, ratio = tokens.strip(), ratio.strip()
    if not comma or not _DIGITS.fullmatch(tokens) or not _DECIMAL.fullmatch(ratio):
        _value_error(where, "must be TOKENS,RATIO (e.g. 100,0.1) or off")
    count, share = int(tokens), float(ratio)
    if count < 1 or not (math.isfinite(share) and MIN_RATIO <= share <= count):
        _value_error(where, "needs TOKENS at least 1 and RATIO from 0.001 to TOKENS")
    return count, share


def int_setting_of(text: str, where: str, minimum: int) -> int:
    """An integer setting from the environment (decimal digits), at least `minimum`."""
    if not isinstance(text, str):
        _type_error(where, "must be a string")
    if not _DIGITS.fullmatch(text.strip()):
        _value_error(where, "must be a whole number")
    return _check_int(int(text.strip()), where, minimum)


def bool_setting_of(text: str, where: str) -> bool:
    """A boolean setting from the environment: `true` or `false`, any case; anything else is refused."""
    if not isinstance(text, str):
        _type_error(where, "must be a string")
    spoken = text.strip().lower()
    if spoken not in ("true", "false"):
        _value_error(where, "must be true or false")
    return spoken == "true"
