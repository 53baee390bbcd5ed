"""The configuration of one `instrument()`: keywords first, then the environment (or, under
`OTEL_CONFIG_FILE`, the file's `mcp_replay` section), each read once.

The rule: the environment never stops the app. A keyword the app passed that is invalid raises
`TypeError`/`ValueError` naming the field. A value found in the environment or the configuration
file that is invalid never raises: it is logged at ERROR naming the variable or the file's field
(never the value), and the plugin runs fail-closed: nothing repeats. Under a configuration file the
`OTEL_PYTHON_MCP_REPLAY_*` variables are not read (one WARNING names those set), as the SDK reads no
`OTEL_*` variable there. Reading the environment never blocks and never reads without bound: a
config file is read only when it is a regular file of at most MAX_CONFIG_BYTES.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final, cast

from otel_mcp_replay import config_file
from otel_mcp_replay import environment_variables as ev
from otel_mcp_replay.endpoints import NO_SERVERS, Servers, servers_of
from otel_mcp_replay.fields import (
    DeclarationTypeError,
    DeclarationValueError,
    field_path,
    fields_of,
    type_error,
    value_error,
)
from otel_mcp_replay.redaction.user_rules import RuleError, UserRules, compile_entries
from otel_mcp_replay.settings import (
    SETTING_NAMES,
    Settings,
    setting_from_text,
    setting_of,
    settings_from_checked,
)

_logger = logging.getLogger(__name__)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

MAX_CONFIG_BYTES: Final = 1024 * 1024
_REDACTION_NAMES: Final = ("redact_keys", "redact_values", "redact_content")
_KEYWORDS: Final = frozenset(
    (*SETTING_NAMES, *_REDACTION_NAMES, "servers", "tracer_provider", "meter_provider", "skip_dep_check")
)
_ENV_PREFIX: Final = "OTEL_PYTHON_MCP_REPLAY_"
_ENV_SETTINGS: Final = {
    "max_attempts": ev.OTEL_PYTHON_MCP_REPLAY_MAX_ATTEMPTS,
    "max_wait_ms": ev.OTEL_PYTHON_MCP_REPLAY_MAX_WAIT_MS,
    "retry_on_throttle": ev.OTEL_PYTHON_MCP_REPLAY_RETRY_ON_THROTTLE,
    "retry_budget": ev.OTEL_PYTHON_MCP_REPLAY_RETRY_BUDGET,
    "repeat_guard_s": ev.OTEL_PYTHON_MCP_REPLAY_REPEAT_GUARD_S,
    "repeat_guard_store": ev.OTEL_PYTHON_MCP_REPLAY_REPEAT_GUARD_STORE,
    "repeat_guard_secret": ev.OTEL_PYTHON_MCP_REPLAY_REPEAT_GUARD_SECRET,
    "repeat_guard_store_timeout_ms": ev.OTEL_PYTHON_MCP_REPLAY_REPEAT_GUARD_STORE_TIMEOUT_MS,
    "record": ev.OTEL_PYTHON_MCP_REPLAY_RECORD,
}
_CONFIG_FIELDS: Final = frozenset(("servers",))
_BOM: Final = "\ufeff"
_SECRET_MISSING: Final = (
    f"is required with {ev.OTEL_PYTHON_MCP_REPLAY_REPEAT_GUARD_STORE}: the repeat guard stays in-process"
)


@dataclass(frozen=True)
class Configuration:
    """What one `instrument()` runs under: the declarations, the settings, and whether an error
    found in the environment makes it fail closed."""

    servers: Servers
    settings: Settings
    fail_closed: bool
    # The user's redaction rules this instrument() sets (None: none given, the wrappers keep theirs).
    redaction: UserRules | None = None
    # False: the file's `enabled: false`, mcp left untouched.
    enabled: bool = True


def configuration_of(kwargs: Mapping[str, Any], environ: Mapping[str, str]) -> Configuration:
    from_file = config_file.options_given(kwargs)
    kwargs = {name: value for name, value in kwargs.items() if not isinstance(value, config_file.FileValue)}
    unknown = sorted(set(kwargs) - _KEYWORDS)
    if unknown:
        raise TypeError(f"instrument() got unknown setting(s): {', '.join(unknown)}")
    # The keywords: the app's own code, so an error in them is raised to it.
    checked = {name: setting_of(name, kwargs[name], name) for name in SETTING_NAMES if name in kwargs}
    servers = servers_of(kwargs["servers"], "servers") if "servers" in kwargs else None
    redaction = _redaction_of(kwargs) if any(name in kwargs for name in _REDACTION_NAMES) else None
    path = environ.get(config_file.OTEL_CONFIG_FILE, "").strip()
    if path:
        return _under_file(path, from_file, checked, servers, redaction, environ)

    fail_closed = False
    for name, variable in _ENV_SETTINGS.items():
        text = environ.get(variable, "")
        if name in checked or not text.strip():
            continue
        try:
            checked[name] = setting_from_text(name, text, variable)
        except Exception as exc:  # the environment must never stop the app or the loader
            fail_closed = True
            _log(variable, exc)
    if checked.get("repeat_guard_store") is not None and checked.get("repeat_guard_secret") is None:
        # A store without the secret every process shares: the guard stays in-process.
        if "repeat_guard_store" in kwargs:
            value_error("repeat_guard_secret", "is required with repeat_guard_store")
        del checked["repeat_guard_store"]
        fail_closed = True
        secret = ev.OTEL_PYTHON_MCP_REPLAY_REPEAT_GUARD_SECRET
        _log(secret, DeclarationValueError(secret, _SECRET_MISSING))
    if servers is None:
        try:
            servers = _servers_from_env(environ)
        except Exception as exc:  # the environment must never stop the app or the loader
            fail_closed = True
            _log("", exc)
            servers = NO_SERVERS
    return Configuration(servers, settings_from_checked(checked), fail_closed, redaction)


def _redaction_of(kwargs: Mapping[str, Any]) -> UserRules:
    """The redaction keywords over the environment's rules; a bad one raises (the app wrote it)."""
    given = UserRules.given(
        kwargs.get("redact_keys", ()),
        kwargs.get("redact_values", ()),
        None,
        kwargs.get("redact_content", True),
    )
    return replace(
        UserRules.read(os.environ)[0],
        **{
            field: getattr(given, field)
            for field, name in (
                ("key_patterns", "redact_keys"),
                ("value_patterns", "redact_values"),
                ("mask_content", "redact_content"),
            )
            if name in kwargs
        },
    )


# --- under a configuration file ------------------------------------------------------------------


def _under_file(
    path: str,
    from_file: Mapping[str, object] | None,
    checked: dict[str, object],
    servers: Servers | None,
    redaction: UserRules | None,
    environ: Mapping[str, str],
) -> Configuration:
    """The file's options for what no keyword set, each checked as an environment value is."""
    ignored = sorted(name for name in environ if name.startswith(_ENV_PREFIX))
    if ignored:
        _logger.warning(
            "otel-mcp-replay: %s is set, so %s %s ignored: the file's %s section configures the plugin",
            config_file.OTEL_CONFIG_FILE,
            ", ".join(ignored),
            "is" if len(ignored) == 1 else "are",
            config_file.SECTION,
        )
    given = from_file
    fail_closed = False
    if given is None:  # not coerced by the configuration package: read from the file itself
        given, unread = config_file.section_of(path)
        if unread is not None:
            fail_closed = True
            _logger.log(
                unread.level, "otel-mcp-replay: %s; nothing will be repeated (fail-closed)", unread.why
            )
    # YAML 1.1's bare `on`/`off` keys, at any depth (a tool's `on:` list), named as the user wrote them.
    options: dict[object, object] = dict(cast(Mapping[object, object], config_file.yaml_meant(given or {})))
    enabled = options.pop("enabled", True) is not False
    problems: list[BaseException] = []
    for name in sorted(set(options) - set(config_file.OPTION_NAMES), key=str):
        shown = name if isinstance(name, str) and name.isidentifier() else "(a key that is no name)"
        problems.append(DeclarationTypeError(_in_file(shown), "unknown option"))
    for name in SETTING_NAMES:
        if name in options and name not in checked:
            try:
                checked[name] = _file_setting(name, options[name])
            except Exception as exc:  # the file must never stop the app or the loader
                problems.append(exc)
    if servers is None and "servers" in options:
        try:
            servers = servers_of(options["servers"], _in_file("servers"))
        except Exception as exc:  # the file must never stop the app or the loader
            problems.append(exc)
    if redaction is None:
        redaction = _file_redaction(options, problems)
    checked = _guard_secret_or_none(checked, problems)
    for problem in problems:
        _log("", problem)
    return Configuration(
        NO_SERVERS if servers is None else servers,
        settings_from_checked(checked),
        fail_closed or bool(problems),
        redaction,
        enabled,
    )


def _in_file(name: str) -> str:
    return f"{config_file.SECTION}.{name}"


def _file_setting(name: str, value: object) -> object:
    if name == "retry_budget" and (value is False or value == "off"):
        return None  # YAML 1.1 reads a bare `off` as false: the budget is off, as the user wrote
    return setting_of(name, value, _in_file(name))


def _guard_secret_or_none(checked: dict[str, object], problems: list[BaseException]) -> dict[str, object]:
    if checked.get("repeat_guard_store") is not None and checked.get("repeat_guard_secret") is None:
        del checked["repeat_guard_store"]  # the guard stays in-process
        problems.append(
            DeclarationValueError(_in_file("repeat_guard_secret"), "is required with repeat_guard_store")
        )
    return checked


def _file_redaction(options: Mapping[object, object], problems: list[BaseException]) -> UserRules:
    """The file's redaction options: built-in rules plus these; a bad entry is dropped and named."""
    lists = {}
    for name, ignore_case in (("redact_keys", True), ("redact_values", False)):
        entries = options.get(name)
        if entries is None:
            entries = []
        elif not isinstance(entries, list):
            problems.append(DeclarationTypeError(_in_file(name), "must be a list of patterns"))
            entries = []
        lists[name], bad = compile_entries(_in_file(name), entries, ignore_case=ignore_case)
        problems.extend(bad)
    mask_content = options.get("redact_content", True)
    if not isinstance(mask_content, bool):
        problems.append(
            RuleError(_in_file("redact_content"), "must be true or false; the content stays masked")
        )
        mask_content = True
    return UserRules(lists["redact_keys"], lists["redact_values"], mask_content=mask_content)


def _log(variable: str, exc: BaseException) -> None:
    # The declaration's errors name fields and never carry values; any other error's text might,
    # so only its type is told.
    named = isinstance(exc, DeclarationTypeError | DeclarationValueError | RuleError)
    message = str(exc) if named else f"unreadable ({type(exc).__name__})"
    if variable and variable not in message:
        message = f"{variable}: {message}"
    _logger.error("otel-mcp-replay: %s; nothing will be repeated (fail-closed)", message)


def _servers_from_env(environ: Mapping[str, str]) -> Servers:
    inline = environ.get(ev.OTEL_PYTHON_MCP_REPLAY_SERVERS, "").strip()
    path = environ.get(ev.OTEL_PYTHON_MCP_REPLAY_CONFIG, "").strip()
    if inline and path:
        both = f"{ev.OTEL_PYTHON_MCP_REPLAY_SERVERS}, {ev.OTEL_PYTHON_MCP_REPLAY_CONFIG}"
        value_error(both, "both are set: use one")
    if inline:
        return servers_from_json(inline, ev.OTEL_PYTHON_MCP_REPLAY_SERVERS)
    if path:
        text = read_config_file(path, ev.OTEL_PYTHON_MCP_REPLAY_CONFIG)
        return servers_from_config_file(text, Path(path).suffix, ev.OTEL_PYTHON_MCP_REPLAY_CONFIG)
    return NO_SERVERS


# --- the text forms of servers ------------------------------------------------------------------


class _DuplicateKey(Exception):
    pass


def _unique_pairs(pairs: list[tuple[str, object]]) -> dict[str, object]:
    # A key written twice would let the later one silently undo the earlier (`"changes": true`).
    out = dict(pairs)
    if len(out) != len(pairs):
        raise _DuplicateKey
    return out


def _json_of(text: object, where: str) -> object:
    if not isinstance(text, str):
        type_error(where, "must be a string")
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
        value_error(where, problem)
    return data


# The TOML parsers' work on one dotted key grows with the square of its parts (a 200 kB key of
# 100,000 parts exhausts memory): a line is read only when it holds at most this many dots, which
# no declaration comes near (`[servers."https://billing.example.com/mcp".tools.search]` holds 6).
MAX_TOML_LINE_DOTS: Final = 32


def _toml_of(text: object, where: str) -> object:
    if not isinstance(text, str):
        type_error(where, "must be a string")
    if any(line.count(".") > MAX_TOML_LINE_DOTS for line in text.splitlines()):
        value_error(where, f"has a line of more than {MAX_TOML_LINE_DOTS} dots (a key of that many parts)")
    failed = False
    try:
        data: object = tomllib.loads(text)
    except (ValueError, RecursionError):  # TOMLDecodeError is a ValueError
        failed = True
    if failed:
        value_error(where, "is not valid TOML")
    return data


def servers_from_json(text: str, where: str) -> Servers:
    """Inline JSON holding the servers mapping itself (OTEL_PYTHON_MCP_REPLAY_SERVERS).

    `null` is refused: a variable set to declare nothing is a mistake worth an ERROR (unset it).
    """
    data = _json_of(text, where)
    if data is None:
        type_error(where, "must be a JSON object of endpoint URL to declaration, not null")
    return servers_of(data, where)


def servers_from_config_file(text: str, suffix: str, where: str) -> Servers:
    """A config file's content, `{"servers": {...}}`, as TOML (`.toml`) or JSON (`.json`), either
    opening with a UTF-8 byte-order mark or not.

    No `servers` field declares none; `servers` null, or any other field, is refused.
    """
    kind = suffix.lower() if isinstance(suffix, str) else ""
    if isinstance(text, str):
        text = text.removeprefix(_BOM)
    if kind == ".toml":
        data = _toml_of(text, where)
    elif kind == ".json":
        data = _json_of(text, where)
    else:
        value_error(where, "must be a .toml or .json file")
    given = fields_of(data, where, _CONFIG_FIELDS)
    if "servers" not in given:
        return NO_SERVERS
    if given["servers"] is None:
        type_error(field_path(where, "servers"), "must not be null")
    return servers_of(given["servers"], field_path(where, "servers"))


# --- a config file -------------------------------------------------------------------------------

_TOO_LARGE: Final = f"the file is larger than {MAX_CONFIG_BYTES} bytes (1 MiB)"


def read_config_file(path: str, where: str) -> str:
    """The text of the config file at `path`, read only if it is a regular file of at most
    MAX_CONFIG_BYTES (1 MiB) of UTF-8; never blocks.

    Opened without blocking (a FIFO with no writer would hold the open forever) and then checked on
    the open descriptor, so nothing can swap the file between the check and the read. A refusal
    names `where` (the variable), never the path nor anything read.
    """
    content, problem = _regular_file_bytes(path)
    if problem is None:
        try:
            return content.decode("utf-8")
        except UnicodeDecodeError:
            problem = "the file is not UTF-8 text"
    # Raised here, outside any handler, so no OSError (which quotes the path) is chained.
    value_error(where, problem)


def _regular_file_bytes(path: str) -> tuple[bytes, str | None]:
    """The bytes of the regular file at `path` (at most MAX_CONFIG_BYTES), or what is wrong."""
    flags = (
        os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    )
    try:
        descriptor = os.open(path, flags)
    except (OSError, ValueError):  # ValueError: a NUL in the path
        return b"", "the file cannot be opened"
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            return b"", "must name a regular file (not a FIFO, device, socket or directory)"
        if info.st_size > MAX_CONFIG_BYTES:
            return b"", _TOO_LARGE
        chunks: list[bytes] = []
        size = 0
        while size <= MAX_CONFIG_BYTES:  # a file that grows past its st_size is read one byte past the cap
            chunk = os.read(descriptor, MAX_CONFIG_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError:
        return b"", "the file cannot be read"
    finally:
        os.close(descriptor)
    if size > MAX_CONFIG_BYTES:
        return b"", _TOO_LARGE
    return b"".join(chunks), None
