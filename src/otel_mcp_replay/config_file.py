"""The plugin's section of an OpenTelemetry configuration file (`OTEL_CONFIG_FILE`), as the user meant it.

The rule: under a file, the plugin's options are the file's `instrumentation/development: python:
mcp_replay:` section, whoever calls `instrument()`, and nothing in that section can stop the app or
silently drop the law. opentelemetry-configuration coerces the section through `FileOptions` (the
instrumentor's `configuration`), which accepts whatever YAML gives and marks each option as the
file's (`FileValue`): the plugin's own check (config.py) then decides, as for an environment
variable (ERROR naming the field, never the value; fail-closed). When the options arrive without
that mark (the package skipped the instrumentor and opentelemetry-instrument's loop instruments it
with none), the section is read here from the file, with the loader's own `${VAR}` substitution.
YAML 1.1 reads a bare `on` as true and `off` as false, keys included: `yaml_meant` turns them back.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Final

# The SDK's variable naming the file (opentelemetry.sdk.environment_variables, from SDK 1.43 on).
OTEL_CONFIG_FILE: Final = "OTEL_CONFIG_FILE"
SECTION: Final = "mcp_replay"  # the instrumentor's entry-point name: its key under `python:`
# What to install when the SDK cannot read a file: the extra that brings opentelemetry-configuration.
EXTRA: Final = "otel-mcp-replay[config-file]"
# The options `instrument()` takes from a file: every setting, the servers, the redaction's.
OPTION_NAMES: Final = (
    "servers",
    "max_attempts",
    "max_wait_ms",
    "retry_on_throttle",
    "retry_budget",
    "repeat_guard_s",
    "repeat_guard_store",
    "repeat_guard_secret",
    "repeat_guard_store_timeout_ms",
    "redact_keys",
    "redact_values",
    "redact_content",
    "record",
)
# The keyword FileOptions passes the section's names that are no option under (their refusal).
UNRECOGNIZED: Final = "unrecognized"


@dataclass(frozen=True)
class FileValue:
    """A value the configuration file gave (None included: a `${VAR}` of an unset variable)."""

    value: object


@dataclass(init=False)
class FileOptions:
    """The `mcp_replay` section as opentelemetry-configuration coerces it: every option typed to
    accept what YAML gives and handed on marked as the file's; a name that is no option is handed on
    too, to be refused by name. Its construction never fails, so the package never skips the
    instrumentor for it."""

    servers: object = None
    max_attempts: object = None
    max_wait_ms: object = None
    retry_on_throttle: object = None
    retry_budget: object = None
    repeat_guard_s: object = None
    repeat_guard_store: object = None
    repeat_guard_secret: object = None
    repeat_guard_store_timeout_ms: object = None
    redact_keys: object = None
    redact_values: object = None
    redact_content: object = None
    record: object = None
    unrecognized: object = None

    def __init__(self, **given: object) -> None:
        for option in fields(self):
            setattr(self, option.name, None)
        for name, value in given.items():
            if name in OPTION_NAMES:
                setattr(self, name, FileValue(value))
        others = tuple(sorted(name for name in given if name not in OPTION_NAMES))
        if others:
            self.unrecognized = FileValue(others)


def yaml_meant(value: object) -> object:
    """`value` with YAML 1.1's bare `on`/`off` keys (read as True/False) named `on`/`off` again, at
    any depth (a tool's `on:` list); values are left to the checks, which know what each means."""
    if isinstance(value, Mapping):
        return {_key_meant(key): yaml_meant(item) for key, item in value.items()}
    if isinstance(value, list):
        return [yaml_meant(item) for item in value]
    return value


def _key_meant(key: object) -> object:
    if key is True:
        return "on"
    if key is False:
        return "off"
    return key


def options_given(kwargs: Mapping[str, Any]) -> dict[str, object] | None:
    """The file's section as FileOptions handed it on among `kwargs` (its names that are no option
    back as keys, to be refused by name); None: none came."""
    given = {name: value.value for name, value in kwargs.items() if isinstance(value, FileValue)}
    others = given.pop(UNRECOGNIZED, ())
    for name in others if isinstance(others, tuple) else ():
        given[name] = None
    return given or None


@dataclass(frozen=True)
class Unread:
    """Why the section could not be read (a sentence naming no value: the loader's own error may
    quote one), and the level it is told at: the configurator already said a missing package at
    ERROR under `mcp_replay`, so the plugin repeats it at WARNING."""

    why: str
    level: int = logging.ERROR


def section_of(path: str) -> tuple[dict[str, object] | None, Unread | None]:
    """The `mcp_replay` section of the file at `path` (None: it has none) read by the loader, or
    why it could not be."""
    try:
        from opentelemetry.configuration import load_config_file
    except ImportError:
        missing = (
            f"{OTEL_CONFIG_FILE} cannot be read without opentelemetry-configuration (pip install '{EXTRA}')"
        )
        return None, Unread(missing, logging.WARNING)
    try:
        loaded = load_config_file(path)
    except Exception as exc:  # the SDK reports what is wrong with its file itself
        return None, Unread(f"{OTEL_CONFIG_FILE} could not be read ({type(exc).__name__})")
    instrumentation = loaded.instrumentation_development
    python = getattr(instrumentation, "python", None) or {}
    section = python.get(SECTION) if isinstance(python, Mapping) else None
    if section is None:
        return None, None
    if not isinstance(section, Mapping):
        return None, Unread(f"{SECTION} must be a mapping of options")
    return dict(section), None
