"""The repeat guard: the side-effect guard across calls.

A retry layer above the SDK (a framework's retry setting, a model told to try again) repeats a
failed call as a NEW call. So a call of a tool declared `changes: true` that does not carry the
deduplication key, identical (endpoint, tool, arguments) to a call that failed with its effect
unknown within the window, is refused before anything is sent. The app repeats deliberately by
carrying the key, inside `repeat_confirmed()`, or after the window. What is remembered is a keyed
hash for its whole window, never the arguments; at most `max_bytes` of them (the oldest
forgotten first, counted and said).

It arms on a call that failed having been sent: its effect unknown, or applied (its result came
back, then the client failed: the SDK's validation or a claim's resolver raised), since it ran.

With a shared store (guard_store.py) the hash is keyed by the secret every process shares, and the
store widens the guard, never narrows it: a call of one process arms it for all. What this process
armed only positive evidence clears: a clear written after its arm (an identical call completed,
or ran inside `repeat_confirmed()`, in any process) or its window's end. A key the store lost (a
restart, an eviction, a flush, a failover) is evidence of nothing: this process still refuses, and
arms the store again; a process that never saw the call cannot know of it. Any store operation
that does not answer within the bound falls back on this process's memory: a store never fails,
blocks or delays a call beyond it.
"""

from __future__ import annotations

import contextvars
import enum
import hashlib
import hmac
import json
import logging
import math
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Final, TypeVar

import anyio

from otel_mcp_replay import environment_variables as ev
from otel_mcp_replay.guard_store import PREFIX, GuardStore, is_cleared
from otel_mcp_replay.telemetry import (
    GUARD_STORE_FAILURE,
    METRIC_GUARD_FORGOTTEN,
    METRIC_GUARD_STORE_FALLBACKS,
    Effect,
)
from otel_mcp_replay.telemetry import GuardStoreFailure as StoreFailure
from otel_mcp_replay.telemetry import GuardStoreOperation as StoreOperation

_logger = logging.getLogger(__name__)

# What this process remembers is bounded in bytes: every call it armed is refused for the whole
# window however many there are, up to MEMORY_BYTES. An entry (its 32-byte hash, when it expires,
# and what its arm replaced in the store, at most a clear's token) takes at most ENTRY_BYTES
# (measured: about 280; tests/law/test_repeat_guard.py holds it). 16 MiB is about 43,000 calls:
# at the default 600 s window, 70 calls a second that failed after they were sent, for ten minutes
# in one process, a rate no working agent arms at; and little beside a process that runs an
# MCP client. Past it the oldest still in its window is forgotten: counted and said at WARNING.
MEMORY_BYTES: Final = 16 * 1024 * 1024
ENTRY_BYTES: Final = 384

_T = TypeVar("_T")


class Failed(enum.Enum):
    """A store operation that gave no result within its bound."""

    FAILED = enum.auto()


FAILED: Final = Failed.FAILED

# Whether the caller is inside `repeat_confirmed()`: read where the call begins, in the caller's
# context (mcp 1.x sends the request from a task of its transport, which is not).
CONFIRMED: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "otel_mcp_replay_repeat_confirmed", default=False
)


@contextmanager
def repeat_confirmed() -> Iterator[None]:
    """Calls made inside are not refused by the repeat guard: the app checked, and repeats on purpose."""
    token = CONFIRMED.set(True)
    try:
        yield
    finally:
        CONFIRMED.reset(token)


class CallGuard:
    """What the repeat guard knows of one call, held by the calls it has a word on only: whether its
    caller was inside `repeat_confirmed()` as it began (`confirmed`: read then, in the caller's
    context), its fingerprint (a changing call without its key), and what the guard remembered of it
    as it ended, for its store (`armed`: True armed, False cleared, None nothing)."""

    __slots__ = ("armed", "confirmed", "fingerprint")

    def __init__(self, confirmed: bool) -> None:
        self.confirmed = confirmed
        self.fingerprint: bytes | None = None
        self.armed: bool | None = None


class RepeatGuard:
    """Fingerprints of calls that failed with their effect unknown, each remembered `window_s`."""

    __slots__ = (
        "_capacity",
        "_clock",
        "_forgetting",
        "_forgot",
        "_key",
        "_lock",
        "_seen",
        "_shared",
        "_window_s",
        "shared",
    )

    def __init__(
        self,
        window_s: float,
        *,
        max_bytes: int = MEMORY_BYTES,
        clock: Callable[[], float] = time.monotonic,
        shared: SharedStore | None = None,
        forgot: Callable[[], None] = lambda: None,
    ) -> None:
        self._window_s = window_s
        self._capacity = max(1, max_bytes // ENTRY_BYTES)
        self._clock = clock
        self._forgot = forgot  # counts one call forgotten within its window
        self._forgetting = False  # said at WARNING since the memory last had room
        # Per process, a fingerprint means nothing elsewhere; with a store, every process sharing
        # the secret computes the same one.
        self._key = shared.secret if shared is not None else secrets.token_bytes(32)
        self._seen: OrderedDict[bytes, float] = OrderedDict()  # fingerprint -> when it expires
        # Those of them the store took -> what their arm replaced there: a clear seen later that is
        # not this one was written after the arm. One missing here was never taken (the store failed,
        # or it is still being told): the store is told again at its next check.
        self._shared: dict[bytes, str | None] = {}
        self._lock = threading.Lock()
        self.shared = shared  # the store every process naming it shares; None: in-process only

    def fingerprint(self, endpoint: str, tool: str, arguments: object) -> bytes | None:
        """The keyed hash of one call, or None when its arguments are not plain JSON data."""
        try:
            text = json.dumps([endpoint, tool, arguments], sort_keys=True, separators=(",", ":"))
        except (TypeError, ValueError, RecursionError):
            return None
        return hmac.new(self._key, text.encode("utf-8", "surrogatepass"), hashlib.sha256).digest()

    def refuses(self, fingerprint: bytes, *, repeat_confirmed: bool | None = None) -> bool:
        """Whether a call with this fingerprint must not be sent now (`repeat_confirmed`: as the
        call's caller was, when it began; None: as this context is)."""
        if CONFIRMED.get() if repeat_confirmed is None else repeat_confirmed:
            return False
        with self._lock:
            expires = self._seen.get(fingerprint)
            if expires is None:
                return False
            if expires <= self._clock():
                del self._seen[fingerprint]
                self._shared.pop(fingerprint, None)
                return False
            return True

    def remember(self, fingerprint: bytes) -> None:
        """A call with this fingerprint failed after it was sent: it may have run, or did."""
        forgotten = 0
        with self._lock:
            now = self._clock()
            self._seen[fingerprint] = now + self._window_s
            self._seen.move_to_end(fingerprint)
            self._shared.pop(fingerprint, None)  # armed anew: the store is yet to take this arm
            # The oldest first (one window for all: the order they expire in); those past their
            # window go for nothing, those within it are forgotten.
            while len(self._seen) > self._capacity:
                oldest, expires = self._seen.popitem(last=False)
                self._shared.pop(oldest, None)
                forgotten += expires > now
            said, self._forgetting = (
                self._forgetting,
                forgotten > 0 or (self._forgetting and len(self._seen) >= self._capacity),
            )
        for _ in range(forgotten):
            self._forgot()
        if forgotten and not said:
            _logger.warning(
                "otel-mcp-replay: the repeat guard's memory is full (%d calls, %d MiB): it forgets the "
                "oldest calls still in their window, which a blind repeat may then run again "
                "(counted in %s); shorten %s or find what fails so often",
                self._capacity,
                self._capacity * ENTRY_BYTES // (1024 * 1024),
                METRIC_GUARD_FORGOTTEN,
                ev.OTEL_PYTHON_MCP_REPLAY_REPEAT_GUARD_S,
            )

    def forget(self, fingerprint: bytes) -> None:
        """A call with this fingerprint completed: there is nothing left to check."""
        with self._lock:
            self._seen.pop(fingerprint, None)
            self._shared.pop(fingerprint, None)

    def ended(self, fingerprint: bytes, effect: Effect, *, failed: bool) -> bool | None:
        """A guarded call ended: what the guard now remembers of it, for its store. True: armed, as
        it failed after it was sent (its effect unknown, or applied: it ran, then the client
        failed). False: cleared, as it completed. None: nothing, as nothing of it was sent."""
        if not failed:
            self.forget(fingerprint)
            return False
        if effect == "none":
            return None
        self.remember(fingerprint)
        return True

    def __len__(self) -> int:
        with self._lock:
            return len(self._seen)

    # -- with a shared store: each a bounded store operation, else this process's own memory --

    async def refuses_shared(self, fingerprint: bytes, *, repeat_confirmed: bool) -> bool:
        """Whether a call with this fingerprint must not be sent now: armed in the store, or armed
        here with no evidence since that it completed anywhere."""
        shared = self.shared
        if shared is None or repeat_confirmed:
            return self.refuses(fingerprint, repeat_confirmed=repeat_confirmed)
        held = await shared.bounded("check", shared.store.read(fingerprint.hex()))
        if held is FAILED:
            return self.refuses(fingerprint, repeat_confirmed=False)
        if held is not None and not is_cleared(held):
            return True  # armed, by this process or another
        with self._lock:
            taken = fingerprint in self._shared
            replaced = self._shared.get(fingerprint)
        if taken and held is not None and held != replaced:
            self.forget(fingerprint)  # cleared after this process's arm: an identical call completed
            return False
        if not self.refuses(fingerprint, repeat_confirmed=False):
            return False  # never armed here, or its window ended
        # Armed here, and the store lost it or never took it: still refused, and shared again.
        await self._share(shared, fingerprint)
        return True

    async def _share(self, shared: SharedStore, fingerprint: bytes) -> None:
        with self._lock:
            expires = self._seen.get(fingerprint)
        if expires is None:
            return
        ttl = max(1, math.ceil(expires - self._clock()))  # what is left of its window, no more
        replaced = await shared.bounded("arm", shared.store.arm(fingerprint.hex(), ttl))
        with self._lock:
            if replaced is FAILED:
                self._shared.pop(fingerprint, None)
            elif fingerprint in self._seen:
                self._shared[fingerprint] = replaced

    async def settled_shared(self, fingerprint: bytes, *, may_have_run: bool) -> None:
        """Tell the store what this process already remembered (`ended`): a call that may have run
        arms it for every process; a completed one writes a fresh clear, evidence for them all."""
        shared = self.shared
        if shared is None:
            return
        with anyio.CancelScope(shield=True):  # a caller's cancel may end the call, not the telling
            if may_have_run:
                await self._share(shared, fingerprint)
            else:
                window = max(1, math.ceil(self._window_s))
                await shared.bounded("clear", shared.store.clear(fingerprint.hex(), window))


async def settle_shared(guard: RepeatGuard | None, guarded: CallGuard | None) -> None:
    """What the repeat guard remembered of a call as it ended (`guarded`), told to its shared store,
    if one is named, within the store's bound: a call that may have run arms it for every process,
    a completed one clears it."""
    if guard is None or guard.shared is None or guarded is None:
        return
    fingerprint, armed = guarded.fingerprint, guarded.armed
    if fingerprint is not None and armed is not None:
        await guard.settled_shared(fingerprint, may_have_run=armed)


class SharedStore:
    """A store, the secret every process sharing it shares, the bound on each operation, and what
    is told when one fails: each failure counted in the fallback metric by its cause; said in the
    log when it begins: an outage (`timeout` or `unreachable`) at WARNING, again after the store
    answered in between; a refusal at ERROR by the class of its cause, again after a write was
    taken in between (a read may be let while every write is refused: a full store, a replica)."""

    __slots__ = ("_count", "_outage_said", "_refusals_said", "bound_s", "secret", "store")

    def __init__(
        self,
        store: GuardStore,
        secret: bytes,
        bound_s: float,
        count: Callable[[StoreOperation, StoreFailure], None],
    ) -> None:
        self.store = store
        self.secret = secret
        self.bound_s = bound_s
        self._count = count
        self._outage_said = False  # since the store last answered
        self._refusals_said: set[str] = set()  # their causes, since the store last took a write

    async def bounded(self, operation: StoreOperation, step: Awaitable[_T]) -> _T | Failed:
        """`step`'s result within the bound, or FAILED (told and counted) when it did not give one."""
        failure: StoreFailure
        try:
            with anyio.move_on_after(self.bound_s):
                result = await step
                self._outage_said = False
                if operation != "check":
                    self._refusals_said.clear()
                return result
            failure, cause = "timeout", "the bound"
        except Exception as exc:  # any failure of the store: the call goes on with this process's memory
            failure, cause = self.store.failure_of(exc)
        self._count(operation, failure)
        self._tell(failure, cause)
        return FAILED

    def _tell(self, failure: StoreFailure, cause: str) -> None:
        if failure == "refused":
            if cause in self._refusals_said:
                return
            self._refusals_said.add(cause)
        elif self._outage_said:
            return
        else:
            self._outage_said = True
        variable = ev.OTEL_PYTHON_MCP_REPLAY_REPEAT_GUARD_STORE
        if failure == "refused":
            _logger.error(
                "otel-mcp-replay: %s: the store refused the repeat guard (%s): a credential, an ACL "
                "without ~%s* +get +set, a read-only replica named as the master, a full store or a "
                "failed TLS check; the guard falls back to this process's memory for each call until "
                "the store is set right (counted in %s, %s=refused)",
                variable,
                cause,
                PREFIX,
                METRIC_GUARD_STORE_FALLBACKS,
                GUARD_STORE_FAILURE,
            )
            return
        what = (
            f"gave no answer within the bound of {round(self.bound_s * 1000)} ms"
            if failure == "timeout"
            else f"is unreachable ({cause})"
        )
        _logger.warning(
            "otel-mcp-replay: %s: the store %s; the repeat guard falls back to this process's memory "
            "for each call, and is shared again when the store answers (counted in %s, %s=%s)",
            variable,
            what,
            METRIC_GUARD_STORE_FALLBACKS,
            GUARD_STORE_FAILURE,
            failure,
        )
