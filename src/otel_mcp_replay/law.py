"""The replay law: who may send a request again.

PERMISSION to repeat a tool call comes only from the app's declaration (or, on a 429 under
`compatibility`, from that policy's recorded assumption, or from the adapter's own refusal); a tool
that makes changes is never repeated without its idempotency key. KNOWLEDGE of an attempt's effect
is the other half of the law, kept apart in evidence.py (the spec's requestEvidence): neither is
read from the other. Pure: no I/O, no mcp, no HTTP client.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from itertools import repeat
from operator import is_
from typing import Final, NamedTuple

from otel_mcp_replay import telemetry as t
from otel_mcp_replay.declaration import Declaration
from otel_mcp_replay.telemetry import (
    Assumption,
    DeclinedReason,
    FailureKind,
    PermissionBy,
)


class Target(NamedTuple):
    """One request as the law reads it: the protocol's own, or a `tools/call` of `tool`. A tools/call
    body is read into one Target once (`target_of`), and every reader shares it. (A NamedTuple: one
    is made per request, and a tuple is made in C.)"""

    tool: str | None = None  # None: a protocol request; "": a tools/call that names no tool
    key_carried: bool = False  # its arguments carry a non-empty str at the declared key's path
    # A JSON-RPC batch carrying a tools/call: one permission cannot cover several calls, so it is
    # never repeated. (mcp >= 2.3 sends no batches; the protocol dropped them in 2025-06-18.)
    batch: bool = False
    request_id: object = None  # the tools/call's JSON-RPC id as sent (None: none, or a batch)
    # A task's poll (`tasks/get`, SEP-2663): a pure, idempotent read of a task that durably exists.
    poll: bool = False
    # Its params as sent, for the repeat guard's keyed fingerprint of its arguments alone
    # (`arguments()`): no part of what it is (never compared, never in its repr), never an
    # attribute of anything exported.
    params: object = None

    def __eq__(self, other: object) -> bool:
        return self[:5] == other[:5] if type(other) is Target else NotImplemented

    def __ne__(self, other: object) -> bool:
        return self[:5] != other[:5] if type(other) is Target else NotImplemented

    def __hash__(self) -> int:
        return hash(self[:5])

    def __repr__(self) -> str:
        return (
            f"Target(tool={self.tool!r}, key_carried={self.key_carried}, batch={self.batch}, "
            f"request_id={self.request_id!r}, poll={self.poll})"
        )

    @property
    def is_tool(self) -> bool:
        return self.tool is not None

    def arguments(self) -> object:
        """The tools/call's arguments as sent (None: none), read as data when asked: for the repeat
        guard's fingerprint."""
        params = self.params
        return _get(params, "arguments") if type(params) is dict else None


PROTOCOL: Final = Target()
TASK_POLL: Final = Target(poll=True)
_BATCH: Final = Target(tool="", batch=True)


def _get(obj: dict[object, object], key: str) -> object:
    return _reader(obj)(key)


def _reader(obj: dict[object, object]) -> Callable[[str], object]:
    """How `obj`, exactly a dict, is read as data: no __eq__ or __hash__ of a stored key runs. When
    every key is exactly str (as JSON's are; checked in C, once for all its reads), the dict's own
    lookup is safe; otherwise exact str keys are compared."""
    if all(map(is_, map(type, obj), repeat(str))):
        return obj.get
    return partial(_scan, obj)


def _scan(obj: dict[object, object], key: str) -> object:
    for k, v in dict.items(obj):
        if type(k) is str and k == key:
            return v
    return None


def _is_tool_call(request: object) -> bool:
    """Whether one request object of a batch is a tools/call."""
    if type(request) is not dict:
        return False
    method = _get(request, "method")
    return type(method) is str and method == t.TOOLS_CALL_METHOD


def _value_at(node: object, tokens: tuple[str, ...], from_json: bool) -> object:
    """The value the reference tokens lead to from `node` (the call's arguments), else None. A
    bounded walk, one step per token: into an object by its member's name, into an array by an
    index RFC 6901 writes ("0", "10": no sign, no leading zero; "-", past the end, is nothing).
    `from_json` vouches for the arguments' own keys only: a level below them is read as data (the
    HTTP seam checks no deeper level of a dict the SDK built before it reads it as JSON)."""
    for depth, token in enumerate(tokens):
        if type(node) is dict:
            node = node.get(token) if from_json and depth == 0 else _get(node, token)
        elif type(node) is list and _is_index(token) and int(token) < len(node):
            node = node[int(token)]
        else:
            return None
    return node


def _is_index(token: str) -> bool:
    # At most 18 digits: past any array's length, and int() never reads a long run of them.
    return 0 < len(token) <= 18 and token.isascii() and token.isdigit() and (token[0] != "0" or token == "0")


def target_of(body: object, declaration: Declaration, *, from_json: bool = False) -> Target:
    """`body`, the parsed JSON of one request exactly as sent, read as a target. Never raises.

    A tools/call whose name is not a string is Target(tool=""), which no declared entry matches.
    Anything else, malformed bodies included, is PROTOCOL. `from_json`: `body` is what the JSON
    decoder made of a text, whose every object key is exactly str: the dicts' own lookup reads it.
    """
    if type(body) is not dict:
        if type(body) is list and any(map(_is_tool_call, body)):
            return _BATCH
        return PROTOCOL
    read = body.get if from_json else _reader(body)
    method = read("method")
    if type(method) is not str or method != t.TOOLS_CALL_METHOD:
        return PROTOCOL
    request_id, params = read("id"), read("params")
    if type(params) is not dict:
        return Target(tool="", request_id=request_id)
    read = params.get if from_json else _reader(params)
    name = read("name")
    tool = name if type(name) is str else ""
    key_carried = False
    if declaration.key_path is not None:
        key = _value_at(read("arguments"), declaration.key_path, from_json)
        key_carried = type(key) is str and key != ""
    return Target(tool, key_carried, False, request_id, False, params)


# -- permission ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Permission:
    """What allowed a repeat: who, on which failure kind, and the assumption it rests on, if any."""

    by: PermissionBy
    on: FailureKind
    assumes: Assumption | None = None


@dataclass(frozen=True, slots=True)
class Repeat:
    """Send the request again. `permission` is None for a protocol request: it files no record."""

    permission: Permission | None


@dataclass(frozen=True, slots=True)
class Declined:
    """Do not send it again, and why. `budget` is the policy's reason, asked after `permit`."""

    reason: DeclinedReason


Decision = Repeat | Declined

_PROTOCOL_REPEAT: Final = Repeat(None)
NOT_RETRYABLE: Final = Declined("not-retryable")
NOT_PERMITTED: Final = Declined("not-permitted")
CHANGES_WITHOUT_KEY: Final = Declined("changes-without-key")
BUDGET: Final = Declined("budget")
_BY_APP_ON_THROTTLE: Final = Repeat(Permission("app", "throttle"))
_BY_APP_ON_NETWORK: Final = Repeat(Permission("app", "network"))
_BY_COMPATIBILITY: Final = Repeat(Permission("compatibility", "throttle", "refused-before-execution"))
_BY_ADAPTER: Final = Repeat(Permission("adapter", "session-busy", "refused-before-execution"))


def permit(
    declaration: Declaration,
    target: Target,
    failure: FailureKind,
    *,
    retry_on_throttle: bool = True,
    status: int = 0,
) -> Decision:
    """THE rule: may `target` be sent again after `failure` (a response's `status`, 0: none)? Asked
    before every repeat.

    `retry_on_throttle=False` turns off only the rules that repeat a 429 without the app's word:
    compatibility's assumption and the protocol requests'. The budget is asked after this.
    """
    if target.poll:  # reading a task twice runs nothing: repeated on what says nothing of the read
        if failure == "error":  # a 5xx is the server's failure to read; its answer is its word
            return _PROTOCOL_REPEAT if status >= 500 else NOT_RETRYABLE
        if failure == "throttle" and not retry_on_throttle:
            return NOT_PERMITTED
        return _PROTOCOL_REPEAT
    if target.tool is None:  # (is_tool, read in place: THE rule is asked at every request)
        if failure == "throttle":
            return _PROTOCOL_REPEAT if retry_on_throttle else NOT_PERMITTED
        if failure == "session-busy":  # the adapter's own refusal, under both policies
            return _PROTOCOL_REPEAT
        return NOT_RETRYABLE
    if failure == "error":
        return NOT_RETRYABLE
    if target.batch:
        return NOT_PERMITTED
    # "" is a tools/call that named no tool: it matches no entry, whatever the app declared.
    entry = declaration.tools.get(target.tool) if target.tool else None
    named = entry.on if entry is not None else frozenset()
    decision: Decision
    if failure == "throttle":
        if "throttle" in named:
            decision = _BY_APP_ON_THROTTLE
        elif declaration.policy == "compatibility" and retry_on_throttle:
            decision = _BY_COMPATIBILITY
        else:
            decision = NOT_PERMITTED
    elif failure == "network":
        decision = _BY_APP_ON_NETWORK if "network" in named else NOT_PERMITTED
    elif failure == "session-busy":
        decision = _BY_ADAPTER
    else:  # a word outside FailureKind: nothing permits what the law does not know
        return NOT_RETRYABLE
    # THE SIDE-EFFECT GUARD: a retry of an effect without a key can apply it twice.
    if (
        isinstance(decision, Repeat)
        and entry is not None
        and entry.changes
        and not (declaration.key_argument is not None and target.key_carried)
    ):
        return CHANGES_WITHOUT_KEY
    return decision


def permit_on_network(declaration: Declaration, target: Target, fail_closed: bool) -> Decision:
    """`permit` after a network failure (a cut of its answer's stream too), asked once per request
    as it is read: what the wire reads (whether a stream is read ahead, so a cut of it can be
    repeated) and the policy reads (whether a network failure is repeated). A runtime that fails
    closed repeats nothing."""
    return NOT_PERMITTED if fail_closed else permit(declaration, target, "network")
