"""The replay law: who may send a request again, and what is known of what each attempt did.

PERMISSION to repeat a tool call comes only from the app's declaration (or, on a 429 under
`compatibility`, from that policy's recorded assumption, or from the adapter's own refusal); a tool
that makes changes is never repeated without its idempotency key. KNOWLEDGE of an attempt's effect
comes only from what came back (`classify`): `none` only when never sent, `applied` when a JSON-RPC
result came, else `unknown`. Neither is read from the other. Pure: no I/O, no mcp, no HTTP client.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timezone
from email.utils import parsedate_to_datetime
from functools import partial
from itertools import repeat
from operator import is_
from typing import Final, Literal, NamedTuple

from otel_mcp_replay import telemetry as t
from otel_mcp_replay.declaration import Declaration
from otel_mcp_replay.telemetry import (
    Assumption,
    DeclinedReason,
    Effect,
    FailureKind,
    PermissionBy,
)

# What a 2xx reply said of the request's JSON-RPC answer, as the seam read it:
# "result"/"error": the answer to this id came; "other": the body held no answer to this id;
# "later": it comes on a stream still to be read; "accepted": a 202, no answer will follow on it;
# "cut": the body was cut before it was whole (its connection lost: `network`, with its status).
Reply = Literal["result", "error", "other", "later", "accepted", "cut"]
Answer = Literal["result", "error"]


@dataclass(frozen=True, slots=True)
class Target:
    """One request as the law reads it: the protocol's own, or a `tools/call` of `tool`. A tools/call
    body is read into one Target once (`target_of`), and every reader shares it."""

    tool: str | None = None  # None: a protocol request; "": a tools/call that names no tool
    key_carried: bool = False  # its arguments carry a non-empty str under the declared key argument
    # A JSON-RPC batch carrying a tools/call: one permission cannot cover several calls, so it is
    # never repeated. (mcp >= 2.3 sends no batches; the protocol dropped them in 2025-06-18.)
    batch: bool = False
    request_id: object = None  # the tools/call's JSON-RPC id as sent (None: none, or a batch)
    # Its params as sent, for the repeat guard's keyed fingerprint of its arguments alone
    # (`arguments()`): never in a repr, never compared, never an attribute of anything exported.
    _params: object = field(default=None, repr=False, compare=False)
    # A task's poll (`tasks/get`, SEP-2663): a pure, idempotent read of a task that durably exists.
    poll: bool = False

    @property
    def is_tool(self) -> bool:
        return self.tool is not None

    def arguments(self) -> object:
        """The tools/call's arguments as sent (None: none), read as data when asked: for the repeat
        guard's fingerprint."""
        params = self._params
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


def _tool_target(request: object, declaration: Declaration, from_json: bool) -> Target | None:
    """The target of one JSON-RPC request object when it is a tools/call, else None."""
    if type(request) is not dict:
        return None
    read = request.get if from_json else _reader(request)
    method = read("method")
    if type(method) is not str or method != t.TOOLS_CALL_METHOD:
        return None
    request_id, params = read("id"), read("params")
    if type(params) is not dict:
        return Target(tool="", request_id=request_id)
    read = params.get if from_json else _reader(params)
    name = read("name")
    tool = name if type(name) is str else ""
    key_carried = False
    if declaration.key_argument is not None:
        arguments = read("arguments")
        if type(arguments) is dict:
            key = (
                arguments.get(declaration.key_argument)
                if from_json
                else _get(arguments, declaration.key_argument)
            )
            key_carried = type(key) is str and key != ""
    return Target(tool, key_carried, False, request_id, params)


def target_of(body: object, declaration: Declaration, *, from_json: bool = False) -> Target:
    """`body`, the parsed JSON of one request exactly as sent, read as a target. Never raises.

    A tools/call whose name is not a string is Target(tool=""), which no declared entry matches.
    Anything else, malformed bodies included, is PROTOCOL. `from_json`: `body` is what the JSON
    decoder made of a text, whose every object key is exactly str: the dicts' own lookup reads it.
    """
    if type(body) is list:
        if any(_tool_target(item, declaration, from_json) is not None for item in body):
            return _BATCH
        return PROTOCOL
    target = _tool_target(body, declaration, from_json)
    return PROTOCOL if target is None else target


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
    if not target.is_tool:
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


# -- knowledge: what one attempt came to -----------------------------------------------------------


class Outcome(NamedTuple):
    """What one attempt came to. Immutable: a later fact makes a new Outcome (`after_stream`).
    A named tuple: one is made per attempt, and it is built in C."""

    status: int  # 0: no response
    failure: FailureKind | None  # None: no failure (for a tools/call: its result came, or may yet)
    effect: Effect | None  # None: delivered, its answer still to come on a stream
    server_wait_ms: int | None = None  # Retry-After, when the server sent one
    answered: bool = False  # the JSON-RPC answer to the request's id came (a result or an error)

    def after_stream(self, kind: Answer | None, *, cut: bool = False) -> Outcome:
        """The same attempt once its stream said what it came to (None: it ended without the answer;
        `cut`: its connection was lost, else a response came and never brought the answer)."""
        if kind == "result":
            return Outcome(self.status, None, "applied", answered=True)
        if kind == "error":
            return Outcome(self.status, "error", "unknown", answered=True)
        return Outcome(self.status, "network" if cut else "error", "unknown")


# Never sent (raised before the request reached the connection): no failure kind, nothing can have
# run; the caller sees what the SDK alone shows, and nothing repeats it.
NOT_SENT: Final = Outcome(0, None, "none")
NO_RESPONSE: Final = Outcome(0, "network", "unknown")  # sent, and no response (or only a cut one)
_ANSWERED_200: Final = Outcome(200, None, "applied", answered=True)
# Sent, and its caller gave up before any response came: the caller's, no failure below the SDK, so
# not `network`; `error`, as when it gives up after the headers came, and it may have run.
GIVEN_UP: Final = Outcome(0, "error", "unknown")


def classify(
    status: int,
    reply: Reply | None,
    *,
    sent: bool = True,
    session_busy: bool = False,
    retry_after: str | None = None,
    now_epoch_s: float = 0.0,
) -> Outcome:
    """THE one classification of an attempt, from what the transport saw: `status` 0 is no
    response (`sent` False: the request never reached the connection, NOT_SENT; else NO_RESPONSE),
    else the response's status, and `reply` what its body said of the JSON-RPC answer (None: the
    body is not read, e.g. the SSE transport's 202, whose answer comes on the GET stream). A call
    sent without HTTP (stdio, in-process) is `status` 0 with `reply` "result", or "other" when it
    failed without one. A later
    word of its stream is `Outcome.after_stream`. A refusal (429, an adapter's) is `unknown`: it is
    not proof that nothing ran."""
    if status == 429 or session_busy:
        wait = retry_after_ms(retry_after, now_epoch_s)
        return Outcome(status, "throttle" if status == 429 else "session-busy", "unknown", wait)
    if status >= 400:
        return Outcome(status, "error", "unknown")
    if not 200 <= status < 300:
        if status == 0:  # no response (asked here, off the path of a 2xx)
            if reply == "result":  # no HTTP at all: the call went another way (stdio), and its result came
                return Outcome(0, None, "applied", answered=True)
            if reply == "other":  # ... and it failed without a result: it may have run
                return Outcome(0, "error", "unknown")
            return NO_RESPONSE if sent else NOT_SENT
        return Outcome(status, None, "unknown")  # a redirect the client may follow: its own attempt
    if reply is None or reply == "later":
        return Outcome(status, None, None)
    if reply == "result":  # a clean call's: made once for the usual 200
        return _ANSWERED_200 if status == 200 else Outcome(status, None, "applied", answered=True)
    if reply == "error":
        return Outcome(status, "error", "unknown", answered=True)
    if reply == "cut":  # the response came, and its body was cut: kept with its status, as a cut stream is
        return Outcome(status, "network", "unknown")
    if reply == "accepted":  # a 202: a response came, and no answer will follow on it
        return Outcome(status, "error", "unknown")
    return Outcome(status, "error", "unknown")  # no answer to this id


# A Retry-After longer than this is as good as never: it is held here, so it passes any sane cap
# (and declines the repeat) without overflowing anything on the way.
MAX_RETRY_AFTER_MS: Final = 86_400_000  # one day
_DELTA_SECONDS: Final = re.compile(r"[0-9]+", re.ASCII)


def retry_after_ms(value: str | None, now_epoch_s: float) -> int | None:
    """A `Retry-After` header value as milliseconds to wait, or None when absent or malformed.

    RFC 9110 §10.2.3: delta-seconds (a non-negative integer; a fraction or a sign is malformed)
    or an HTTP-date (IMF-fixdate, and the obsolete RFC 850 and asctime forms). A date in the past
    is 0. Never raises, whatever the text.
    """
    if type(value) is not str:
        return None
    text = value.strip(" \t")
    if _DELTA_SECONDS.fullmatch(text):
        digits = text.lstrip("0") or "0"
        # Enough digits to pass a day are a day: int() of a huge string would be slow or refused.
        if len(digits) > 8:
            return MAX_RETRY_AFTER_MS
        return min(int(digits) * 1000, MAX_RETRY_AFTER_MS)
    if len(text) > 64:  # no HTTP-date is this long: the date parser is not handed a server's essay
        return None
    try:
        when = parsedate_to_datetime(text)
        if when.tzinfo is None:  # an HTTP-date is always GMT
            when = when.replace(tzinfo=timezone.utc)
        delta_s = when.timestamp() - now_epoch_s
    except Exception:  # the stdlib parser's errors differ across versions (TypeError, ValueError, ...)
        return None
    if not math.isfinite(delta_s):
        return None
    if delta_s <= 0:
        return 0
    return min(math.ceil(delta_s * 1000), MAX_RETRY_AFTER_MS)
