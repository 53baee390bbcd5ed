"""What a span holds of an MCP request's name, and where that is a secret.

The rule: a request's name leaves the process only where the span says the request names a tool or
a prompt. Over HTTP a request carries its name in the `Mcp-Name` header: a tool's on `tools/call`, a
prompt's on `prompts/get`, a resource's URI (a path) on `resources/read`, and on `tasks/*` the task
id, a credential (SEP-2663: a server may use task ids as bearer tokens; fastmcp-tasks sends it from
4.1.8), which fastmcp's component key also holds on a task's request span. Where the span says no
method (an app may capture `Mcp-Name` alone, and poll a task another process created) the name may
be any of these: masked (fail closed). What a span says: its `mcp.method.name`, or a captured
`Mcp-Method` header.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Final

from opentelemetry.util.types import Attributes

from otel_mcp_replay import telemetry as t
from otel_mcp_replay.redaction import keys
from otel_mcp_replay.redaction.spans import plain_dict
from otel_mcp_replay.redaction.text import masked_whole

# Where a span of a task's request holds its task id besides `Mcp-Name` (on a `tools/call` span
# fastmcp's component key names the tool).
_TASK_ID_KEYS: Final = frozenset({"fastmcp.component.key"})
_TASK_METHOD_PREFIX: Final = "tasks/"
# The requests whose `Mcp-Name` is a name, no secret.
_NAMING_METHODS: Final = frozenset({"tools/call", "prompts/get"})


def header_of(key: str, name: str) -> bool:
    """`key` spells a captured `Mcp-<name>` header (`http.request.header.mcp-name`, `mcp_name`, ...)."""
    return "mcp" in key.lower() and keys.key_words(key)[-2:] == ["mcp", name]


def masked(said: Attributes, held: Attributes, method_headers: Iterable[str]) -> dict[str, Any] | None:
    """A copy of `held` (a span's attributes redacted so far; None: `said`) with what it holds of a
    request's name masked where `said` (the span's own attributes) makes it a secret; None when
    nothing is. `method_headers`: the keys seen spelling a captured `Mcp-Method`."""
    task = of_a_task(said, method_headers)
    if not task and _names_only(said, method_headers):
        return None
    held = said if held is None else held
    found = [key for key in held or () if (task and key in _TASK_ID_KEYS) or header_of(key, "name")]
    if not found:
        return None
    copied = plain_dict(held)
    changed = False
    for key in found:
        value = copied[key]
        copied[key] = masked_whole(value)
        changed = changed or copied[key] is not value
    return copied if changed else None


def of_a_task(attributes: Attributes, method_headers: Iterable[str]) -> bool:
    """A span of a task's request: it says `tasks/...`."""
    return any(method.startswith(_TASK_METHOD_PREFIX) for method in _methods(attributes, method_headers))


def _names_only(attributes: Attributes, method_headers: Iterable[str]) -> bool:
    """A span whose request's `Mcp-Name` names a tool or a prompt: it says such methods, and no other."""
    said = list(_methods(attributes, method_headers))
    return bool(said) and all(method in _NAMING_METHODS for method in said)


def _methods(attributes: Attributes, method_headers: Iterable[str]) -> Iterator[str]:
    """The methods a span says its request is: its `mcp.method.name`, and each captured `Mcp-Method`
    header (one of `method_headers`)."""
    if not attributes:
        return
    for key in (t.MCP_METHOD_NAME, *method_headers):
        value = attributes.get(key)
        for method in value if type(value) is tuple or type(value) is list else (value,):
            if type(method) is str:
                yield method
