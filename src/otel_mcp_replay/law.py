"""The replay law: who may send a request again, and what is known of what each attempt did.

The rule, as CONTRACT.md's table: PERMISSION to repeat a tool call comes only from the app's
declaration (or, on a 429 under `compatibility`, from that policy's recorded assumption, or from
the adapter's own refusal); a tool that makes changes is never repeated without its idempotency
key. KNOWLEDGE of an attempt's effect comes only from what came back: `none` only when never sent,
`applied` when a JSON-RPC result came, else `unknown`. Neither is read from the other.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import repeat
from operator import is_
from typing import Final, Literal

from otel_mcp_replay.declaration import Declaration

FailureKind = Literal["throttle", "session-busy", "network", "error"]
Effect = Literal["none", "unknown", "applied"]
CallVerdict = Literal["completed", "tool-error", "failed"]
DeclinedReason = Literal["not-retryable", "not-permitted", "changes-without-key", "budget"]


@dataclass(frozen=True, slots=True)
class Target:
    """One request as the law reads it: the protocol's own, or a `tools/call` of `tool`."""

    tool: str | None = None  # None: a protocol request; "": a tools/call that names no tool
    key_carried: bool = False  # its arguments carry a non-empty str under the declared key argument
    # A JSON-RPC batch carrying a tools/call: one permission cannot cover several calls, so it is
    # never repeated. (mcp >= 2.3 sends no batches; the protocol dropped them in 2025-06-18.)
    batch: bool = False

    @property
    def is_tool(self) -> bool:
        return self.tool is not None


PROTOCOL: Final = Target()
_UNNAMED: Final = Target(tool="")
_BATCH: Final = Target(tool="", batch=True)


def _get(obj: dict[object, object], key: str) -> object:
    # Read as data: no __eq__ or __hash__ of a stored key runs. When every key is exactly str (as
    # JSON's are; checked in C), the dict's own lookup is safe; otherwise exact str keys are compared.
    if all(map(is_, map(type, obj), repeat(str))):
        return dict.get(obj, key)
    for k, v in dict.items(obj):
        if type(k) is str and k == key:
            return v
    return None


def _tool_target(request: object, declaration: Declaration) -> Target | None:
    """The target of one JSON-RPC request object when it is a tools/call, else None."""
    if type(request) is not dict:
        return None
    method = _get(request, "method")
    if type(method) is not str or method != "tools/call":
        return None
    params = _get(request, "params")
    if type(params) is not dict:
        return _UNNAMED
    name = _get(params, "name")
    tool = name if type(name) is str else ""
    key_carried = False
    if declaration.key_argument is not None:
        arguments = _get(params, "arguments")
        if type(arguments) is dict:
            key = _get(arguments, declaration.key_argument)
            key_carried = type(key) is str and key != ""
    return Target(tool=tool, key_carried=key_carried)


def target_of(body: object, declaration: Declaration) -> Target:
    """`body`, the parsed JSON of one request exactly as sent, read as a target. Never raises.

    A tools/call whose name is not a string is Target(tool=""), which no declared entry matches.
    Anything else, malformed bodies included, is PROTOCOL.
    """
    if type(body) is list:
        if any(_tool_target(item, declaration) is not None for item in body):
            return _BATCH
        return PROTOCOL
    target = _tool_target(body, declaration)
    return PROTOCOL if target is None else target


@dataclass(frozen=True, slots=True)
class Permission:
    """What allowed a repeat: who, on which failure kind, and the assumption it rests on, if any."""

    by: Literal["app", "compatibility", "adapter"]
    on: FailureKind
    assumes: Literal["refused-before-execution"] | None = None


@dataclass(frozen=True, slots=True)
class Repeat:
    """Send the request again. `permission` is None for a protocol request: it files no record."""

    permission: Permission | None


@dataclass(frozen=True, slots=True)
class Declined:
    """Do not send it again, and why. `budget` is the caller's reason, asked after `permit`."""

    reason: DeclinedReason


Decision = Repeat | Declined

_PROTOCOL_REPEAT: Final = Repeat(None)
_NOT_RETRYABLE: Final = Declined("not-retryable")
_NOT_PERMITTED: Final = Declined("not-permitted")
_CHANGES_WITHOUT_KEY: Final = Declined("changes-without-key")
_BY_APP_ON_THROTTLE: Final = Repeat(Permission("app", "throttle"))
_BY_APP_ON_NETWORK: Final = Repeat(Permission("app", "network"))
_BY_COMPATIBILITY: Final = Repeat(Permission("compatibility", "throttle", "refused-before-execution"))
_BY_ADAPTER: Final = Repeat(Permission("adapter", "session-busy", "refused-before-execution"))


def permit(
    declaration: Declaration, target: Target, failure: FailureKind, *, retry_on_throttle: bool = True
) -> Decision:
    """THE rule: may `target` be sent again after `failure`? Asked before every repeat.

    `retry_on_throttle=False` turns off only the rules that repeat a 429 without the app's word:
    compatibility's assumption and the protocol requests'. The budget is asked after this.
    """
    if not target.is_tool:
        if failure == "throttle":
            return _PROTOCOL_REPEAT if retry_on_throttle else _NOT_PERMITTED
        return _NOT_RETRYABLE
    if failure == "error":
        return _NOT_RETRYABLE
    if target.batch:
        return _NOT_PERMITTED
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
            decision = _NOT_PERMITTED
    elif failure == "network":
        decision = _BY_APP_ON_NETWORK if "network" in named else _NOT_PERMITTED
    elif failure == "session-busy":
        decision = _BY_ADAPTER
    else:  # a word outside FailureKind: nothing permits what the law does not know
        return _NOT_RETRYABLE
    # THE SIDE-EFFECT GUARD: a retry of an effect without a key can apply it twice.
    if (
        isinstance(decision, Repeat)
        and entry is not None
        and entry.changes
        and not (declaration.key_argument is not None and target.key_carried)
    ):
        return _CHANGES_WITHOUT_KEY
    return decision


def needs_series(declaration: Declaration) -> bool:
    """Whether tool calls under `declaration` need a retry series even with the 429 rule off.

    A tool declared repeatable (on anything), the `app-authorized` policy (its record and its
    "may have run" rest on the series) or an adapter (its own refusals are repeated).
    """
    return (
        declaration.policy == "app-authorized"
        or declaration.adapter is not None
        or any(entry.on for entry in declaration.tools.values())
    )


def attempt_effect(sent: bool, result_came: bool) -> Effect:
    """The effect of one attempt: `none` if never sent; `applied` if a JSON-RPC result came back
    (`isError` or not); else `unknown`. A 429 or a refusal is not evidence that nothing ran."""
    if not sent:
        return "none"
    return "applied" if result_came else "unknown"


class SeriesKnowledge:
    """What is known of a whole series' effect, one attempt at a time.

    Uncertainty survives: once any attempt is `unknown`, the series is, whatever later attempts
    show. Evidence that something ran (`applied`) is never erased by a later failure.
    """

    __slots__ = ("_applied", "_unknown")

    def __init__(self) -> None:
        self._unknown = False
        self._applied = False

    def note(self, effect: Effect) -> None:
        if effect == "unknown":
            self._unknown = True
        elif effect == "applied":
            self._applied = True
        elif effect != "none":
            raise ValueError("an effect is none, unknown or applied")

    @property
    def effect(self) -> Effect:
        if self._unknown:
            return "unknown"
        return "applied" if self._applied else "none"


class RequestFacts:
    """One `tools/call` request's replay facts (the spec's RequestReplay), shared by the series that
    sends it, the ledger that watches for its answer, and the call that waits for it.

    Two layers kept apart: the series sees HTTP (whether an attempt got any response, the status
    it delivered); the ledger sees the JSON-RPC answer to this request's id. Each fact is written
    once by its owner; for the delivered status and the settlement, the first word stands.
    Not thread-safe: one request's owners take turns on one event loop.
    """

    __slots__ = (
        "_answered",
        "_app_authorized",
        "_delivered",
        "_may_have_run",
        "_sent",
        "_unanswered",
        "_verdict",
        "_watched",
        "id",
    )

    def __init__(self, request_id: str | int, watched: bool) -> None:
        """`watched`: whether the connection's incoming messages are observed. Without that the
        logical layer is unknown and never decides anything."""
        self.id: str | int = request_id
        self._watched = watched
        self._sent = 0
        self._app_authorized = False
        self._unanswered = False
        self._delivered: int | None = None
        self._answered = False
        self._verdict: CallVerdict | None = None
        self._may_have_run = False

    def sent_one(self) -> None:
        """The series sent the request once more."""
        self._sent += 1

    def app_authorized_policy(self) -> None:
        """The series runs under the `app-authorized` policy."""
        self._app_authorized = True

    def no_answer(self) -> None:
        """The series: an attempt got no response at all. A received refusal is never this."""
        self._unanswered = True

    def delivered_status(self, status: int) -> None:
        """The series handed the MCP SDK a response with this status. The first word stands."""
        if self._delivered is None:
            self._delivered = status

    def answered(self) -> None:
        """The ledger: the JSON-RPC response to this request's id arrived."""
        self._answered = True

    def settle(self, verdict: CallVerdict, may_have_run: bool) -> None:
        """The call settled. `may_have_run` only with `failed`. The first word stands."""
        if may_have_run and verdict != "failed":
            raise ValueError("only a failed call may have run")
        if self._verdict is None:
            self._verdict = verdict
            self._may_have_run = may_have_run

    @property
    def sent(self) -> int:
        return self._sent

    @property
    def accepted_without_answer(self) -> bool:
        """The HTTP layer took the request (a 2xx), and its JSON-RPC answer never arrived."""
        return (
            self._watched
            and self._delivered is not None
            and 200 <= self._delivered < 300
            and not self._answered
        )

    @property
    def uncertain(self) -> bool:
        """Under `app-authorized`: the call genuinely lacked an answer somewhere (an attempt got no
        response, or a 2xx whose answer never came), so if it fails it fails as "may have run".
        A chain of received refusals and errors is an answer throughout: it keeps the server's error.
        """
        return self._app_authorized and (self._unanswered or self.accepted_without_answer)

    @property
    def verdict(self) -> CallVerdict | None:
        return self._verdict

    @property
    def may_have_run(self) -> bool:
        return self._may_have_run
