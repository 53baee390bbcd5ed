"""The user's redaction rules: read from the environment (or given in code) and compiled once.

The rule: a bad entry costs that entry only. Each pattern is compiled on RE2 (linear time in the
text it reads, whatever the pattern); one that RE2 refuses (bad syntax, too large a program) or
that matches the empty string is dropped with an error naming the variable and the entry's
1-based position, never the pattern; the other entries, and the built-in rules, stay in force.

Lists are comma-separated. A comma inside `(...)`, `{m,n}` or `[...]`, or written `\\,`, belongs to
its pattern. A variable is read up to MAX_VARIABLE_CHARS characters; entries past that are
ignored, with one error saying so.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

import re2  # type: ignore[import-untyped]

from otel_mcp_replay import environment_variables as ev

ENV_REDACT_KEYS: Final = ev.OTEL_PYTHON_MCP_REPLAY_REDACT_KEYS
ENV_REDACT_VALUES: Final = ev.OTEL_PYTHON_MCP_REPLAY_REDACT_VALUES
ENV_SESSION_KEY: Final = ev.OTEL_PYTHON_MCP_REPLAY_SESSION_KEY
ENV_REDACT_CONTENT: Final = ev.OTEL_PYTHON_MCP_REPLAY_REDACT_CONTENT

MIN_SESSION_KEY_BYTES: Final = 16
# Generous: thousands of patterns. Past it the rest of the variable is ignored, said once at ERROR.
MAX_VARIABLE_CHARS: Final = 65536

# Drawn once per process, so that every processor and exporter of the process hashes alike.
PROCESS_SESSION_KEY: Final = secrets.token_bytes(32)


class Pattern(Protocol):
    """A compiled RE2 pattern, as the rules use it."""

    def search(self, text: str) -> Any: ...

    def sub(self, repl: Any, text: str) -> str: ...


class RuleError(ValueError):
    """A bad rule, named by its field and the entry's position; never its text."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


def compile_re2(pattern: str, *, ignore_case: bool = False) -> Pattern:
    """`pattern` on RE2; re2.error when RE2 refuses it. RE2 never logs it (it would quote it)."""
    options = re2.Options()
    options.log_errors = False
    options.case_sensitive = not ignore_case
    compiled: Pattern = re2.compile(pattern, options)
    return compiled


def split_patterns(text: str) -> list[str]:
    """A comma list of patterns; commas in `()`, `{}`, `[]` or after a backslash belong to the pattern."""
    entries: list[str] = []
    current: list[str] = []
    escaped = in_class = negated = False
    members = 0  # characters of the class read so far: a `]` first in a class is one of them
    depth = 0  # open `(` and `{` outside classes
    for char in text:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
            members += 1
        elif in_class:
            if char == "^" and not members and not negated:
                negated = True
            elif char == "]" and members:
                in_class = False
            else:
                members += 1
        elif char == "[":
            in_class, negated, members = True, False, 0
        elif char in "({":
            depth += 1
        elif char in ")}" and depth:
            depth -= 1
        elif char == "," and not depth:
            entries.append("".join(current).strip())
            current = []
            continue
        current.append(char)
    entries.append("".join(current).strip())
    return [entry for entry in entries if entry]


def compile_entries(
    field: str, entries: Iterable[object], *, ignore_case: bool
) -> tuple[tuple[Pattern, ...], list[RuleError]]:
    """Each good entry compiled, in order, and one error per bad entry."""
    compiled: list[Pattern] = []
    errors: list[RuleError] = []
    for position, entry in enumerate(entries, start=1):
        if not isinstance(entry, str):
            errors.append(RuleError(field, f"entry {position} is not a string"))
            continue
        try:
            pattern = compile_re2(entry, ignore_case=ignore_case)
        except re2.error as error:
            # Our own words only: RE2's message quotes the pattern.
            if any(word in str(error) for word in ("too large", "repetition size")):
                problem = f"entry {position} is too large for the linear-time engine (RE2)"
            else:
                problem = f"entry {position} is not a valid regular expression (RE2 syntax)"
            errors.append(RuleError(field, problem))
            continue
        except (TypeError, ValueError, OverflowError):
            errors.append(
                RuleError(field, f"entry {position} is not a valid regular expression (RE2 syntax)")
            )
            continue
        if pattern.search("") is not None:
            errors.append(RuleError(field, f"entry {position} matches the empty string"))
            continue
        compiled.append(pattern)
    return tuple(compiled), errors


def session_key_bytes(field: str, key: bytes | str | None) -> bytes:
    if key is None:
        return PROCESS_SESSION_KEY
    raw = key.encode("utf-8") if isinstance(key, str) else bytes(key)
    if len(raw) < MIN_SESSION_KEY_BYTES:
        raise RuleError(field, f"shorter than {MIN_SESSION_KEY_BYTES} bytes")
    return raw


@dataclass(frozen=True)
class UserRules:
    """The user's part of the rules, compiled: key patterns (case-insensitive), value patterns, the
    HMAC key of session hashes, and whether other instrumentations' GenAI content is masked."""

    key_patterns: tuple[Pattern, ...] = ()
    value_patterns: tuple[Pattern, ...] = ()
    session_key: bytes = PROCESS_SESSION_KEY
    mask_content: bool = True

    @classmethod
    def given(
        cls,
        redact_keys: Iterable[str],
        redact_values: Iterable[str],
        session_key: bytes | str | None,
        redact_content: bool = True,
    ) -> UserRules:
        """From code: the first bad entry raises RuleError (a ValueError), `from None`."""
        keys, key_errors = compile_entries("redact_keys", redact_keys, ignore_case=True)
        values, value_errors = compile_entries("redact_values", redact_values, ignore_case=False)
        for error in (*key_errors, *value_errors):
            raise error from None
        if not isinstance(redact_content, bool):
            raise RuleError("redact_content", "must be True or False")
        return cls(keys, values, session_key_bytes("session_key", session_key), redact_content)

    @classmethod
    def read(cls, environ: Mapping[str, str]) -> tuple[UserRules, list[RuleError]]:
        """From the environment: what is good, and one error per bad entry or variable."""
        errors: list[RuleError] = []
        lists: dict[str, tuple[Pattern, ...]] = {}
        for variable, ignore_case in ((ENV_REDACT_KEYS, True), (ENV_REDACT_VALUES, False)):
            raw = environ.get(variable, "")
            entries = split_patterns(raw[:MAX_VARIABLE_CHARS])
            if len(raw) > MAX_VARIABLE_CHARS:
                entries = entries[:-1]  # the last one may have been cut in the middle
                errors.append(
                    RuleError(
                        variable,
                        f"longer than {MAX_VARIABLE_CHARS} characters; entries from "
                        f"{len(entries) + 1} on are ignored",
                    )
                )
            lists[variable], bad = compile_entries(variable, entries, ignore_case=ignore_case)
            errors.extend(bad)
        session_key = PROCESS_SESSION_KEY
        raw_key = environ.get(ENV_SESSION_KEY, "")
        if raw_key.strip():
            try:
                session_key = session_key_bytes(ENV_SESSION_KEY, raw_key)
            except RuleError as error:
                errors.append(error)
        mask_content = True  # anything but a clear `false` keeps the content masked (fail closed)
        spoken = environ.get(ENV_REDACT_CONTENT, "").strip()
        if spoken.isascii() and spoken.lower() in ("false", "0", "no", "off"):
            mask_content = False
        elif spoken and not (spoken.isascii() and spoken.lower() in ("true", "1", "yes", "on")):
            errors.append(RuleError(ENV_REDACT_CONTENT, "must be true or false; the content stays masked"))
        return cls(lists[ENV_REDACT_KEYS], lists[ENV_REDACT_VALUES], session_key, mask_content), errors
