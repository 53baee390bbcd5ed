"""The configuration of one `instrument()`: keywords first, then the environment, checked once.

A keyword the app passed that is invalid raises `TypeError`/`ValueError` naming the field. A value
found in the environment that is invalid never raises: it is logged at ERROR naming the variable
and the field (never the value), and the plugin runs fail-closed: nothing repeats.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from otel_mcp_replay import environment_variables as ev
from otel_mcp_replay.declaration import (
    NO_SERVERS,
    DeclarationTypeError,
    DeclarationValueError,
    Servers,
    Settings,
    retry_budget_of,
    servers_from_config_file,
    servers_from_json,
    servers_of,
    settings_of,
)
from otel_mcp_replay.runtime import logger

_SETTINGS = ("max_attempts", "max_wait_ms", "retry_on_throttle", "retry_budget")
_KEYWORDS = frozenset((*_SETTINGS, "servers", "tracer_provider", "meter_provider", "skip_dep_check"))


@dataclass(frozen=True)
class Resolved:
    servers: Servers
    settings: Settings
    fail_closed: bool


class _EnvError(Exception):
    """An environment value that cannot be used; its message names the variable and field only."""


def resolve(kwargs: Mapping[str, Any], environ: Mapping[str, str]) -> Resolved:
    unknown = sorted(set(kwargs) - _KEYWORDS)
    if unknown:
        raise TypeError(f"instrument() got unknown setting(s): {', '.join(unknown)}")
    # The keywords: the app's own code, so an error in them is raised to it.
    given = {name: kwargs[name] for name in _SETTINGS if name in kwargs}
    settings_of(**given)
    servers = servers_of(kwargs["servers"], "servers") if "servers" in kwargs else None

    fail_closed = False
    from_env: dict[str, object] = {}
    for name, (variable, reader) in _ENV_SETTINGS.items():
        if name in given:
            continue
        try:
            value = reader(environ)
            if value is not _ABSENT:
                settings_of(**{name: value})  # checked alone, so the error names its variable
                from_env[name] = value
        except Exception as exc:  # the environment must never stop the app or the loader
            fail_closed = True
            _log(variable, exc)
    settings = settings_of(**{**from_env, **given})
    if servers is None:
        try:
            servers = _servers_from_env(environ)
        except Exception as exc:  # the environment must never stop the app or the loader
            fail_closed = True
            _log("", exc)
            servers = NO_SERVERS
    return Resolved(servers, settings, fail_closed)


def _log(variable: str, exc: BaseException) -> None:
    # The law's errors and ours name fields and never carry values; any other error's text might,
    # so only its type is told.
    named = isinstance(exc, _EnvError | DeclarationTypeError | DeclarationValueError)
    message = str(exc) if named else f"unreadable ({type(exc).__name__})"
    if variable and variable not in message:
        message = f"{variable}: {message}"
    logger.error("otel-mcp-replay: %s; nothing will be repeated (fail-closed)", message)


_ABSENT = object()


def _int(variable: str) -> Any:
    def read(environ: Mapping[str, str]) -> object:
        text = environ.get(variable, "").strip()
        if not text:
            return _ABSENT
        if not text.lstrip("-").isdigit():
            raise _EnvError(f"{variable} must be a whole number")
        return int(text)

    return read


def _bool(variable: str) -> Any:
    def read(environ: Mapping[str, str]) -> object:
        text = environ.get(variable, "").strip().lower()
        if not text:
            return _ABSENT
        if text in ("true", "1", "yes", "on"):
            return True
        if text in ("false", "0", "no", "off"):
            return False
        raise _EnvError(f"{variable} must be true or false")

    return read


def _budget(environ: Mapping[str, str]) -> object:
    text = environ.get(ev.OTEL_PYTHON_MCP_REPLAY_RETRY_BUDGET, "").strip()
    if not text:
        return _ABSENT
    return retry_budget_of(text, ev.OTEL_PYTHON_MCP_REPLAY_RETRY_BUDGET)


_ENV_SETTINGS = {
    "max_attempts": (ev.OTEL_PYTHON_MCP_REPLAY_MAX_ATTEMPTS, _int(ev.OTEL_PYTHON_MCP_REPLAY_MAX_ATTEMPTS)),
    "max_wait_ms": (ev.OTEL_PYTHON_MCP_REPLAY_MAX_WAIT_MS, _int(ev.OTEL_PYTHON_MCP_REPLAY_MAX_WAIT_MS)),
    "retry_on_throttle": (
        ev.OTEL_PYTHON_MCP_REPLAY_RETRY_ON_THROTTLE,
        _bool(ev.OTEL_PYTHON_MCP_REPLAY_RETRY_ON_THROTTLE),
    ),
    "retry_budget": (ev.OTEL_PYTHON_MCP_REPLAY_RETRY_BUDGET, _budget),
}


def _servers_from_env(environ: Mapping[str, str]) -> Servers:
    inline = environ.get(ev.OTEL_PYTHON_MCP_REPLAY_SERVERS, "").strip()
    path = environ.get(ev.OTEL_PYTHON_MCP_REPLAY_CONFIG, "").strip()
    if inline and path:
        raise _EnvError(
            f"{ev.OTEL_PYTHON_MCP_REPLAY_SERVERS} and {ev.OTEL_PYTHON_MCP_REPLAY_CONFIG}"
            " are both set: use one"
        )
    if inline:
        return servers_from_json(inline, ev.OTEL_PYTHON_MCP_REPLAY_SERVERS)
    if path:
        file = Path(path)
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeError):
            raise _EnvError(f"{ev.OTEL_PYTHON_MCP_REPLAY_CONFIG}: the file cannot be read") from None
        return servers_from_config_file(text, file.suffix.lower(), ev.OTEL_PYTHON_MCP_REPLAY_CONFIG)
    return NO_SERVERS
