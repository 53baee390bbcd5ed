"""The repeat guard: the side-effect guard across calls.

A retry layer above the SDK (a framework's retry setting, a model told to try again) repeats a
failed call as a NEW call. So a call of a tool declared `changes: true` that does not carry the
deduplication key, identical (endpoint, tool, arguments) to a call that failed with its effect
unknown within the window, is refused before anything is sent. The app repeats deliberately by
carrying the key, inside `repeat_confirmed()`, or after the window. What is remembered is a keyed
hash, at most `capacity` of them, the oldest forgotten first: never the arguments.
"""

from __future__ import annotations

import contextvars
import hashlib
import hmac
import json
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Final

CAPACITY: Final = 4096

_CONFIRMED: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "otel_mcp_replay_repeat_confirmed", default=False
)


@contextmanager
def repeat_confirmed() -> Iterator[None]:
    """Calls made inside are not refused by the repeat guard: the app checked, and repeats on purpose."""
    token = _CONFIRMED.set(True)
    try:
        yield
    finally:
        _CONFIRMED.reset(token)


class RepeatGuard:
    """Fingerprints of calls that failed with their effect unknown, each remembered `window_s`."""

    __slots__ = ("_capacity", "_clock", "_key", "_lock", "_seen", "_window_s")

    def __init__(
        self, window_s: float, *, capacity: int = CAPACITY, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._window_s = window_s
        self._capacity = capacity
        self._clock = clock
        self._key = secrets.token_bytes(32)  # per process: a fingerprint means nothing elsewhere
        self._seen: OrderedDict[bytes, float] = OrderedDict()  # fingerprint -> when it expires
        self._lock = threading.Lock()

    def fingerprint(self, endpoint: str, tool: str, arguments: object) -> bytes | None:
        """The keyed hash of one call, or None when its arguments are not plain JSON data."""
        try:
            text = json.dumps([endpoint, tool, arguments], sort_keys=True, separators=(",", ":"))
        except (TypeError, ValueError, RecursionError):
            return None
        return hmac.new(self._key, text.encode("utf-8", "surrogatepass"), hashlib.sha256).digest()

    def refuses(self, fingerprint: bytes) -> bool:
        """Whether a call with this fingerprint must not be sent now."""
        if _CONFIRMED.get():
            return False
        with self._lock:
            expires = self._seen.get(fingerprint)
            if expires is None:
                return False
            if expires <= self._clock():
                del self._seen[fingerprint]
                return False
            return True

    def remember(self, fingerprint: bytes) -> None:
        """A call with this fingerprint failed with its effect unknown."""
        with self._lock:
            self._seen[fingerprint] = self._clock() + self._window_s
            self._seen.move_to_end(fingerprint)
            while len(self._seen) > self._capacity:
                self._seen.popitem(last=False)

    def forget(self, fingerprint: bytes) -> None:
        """A call with this fingerprint completed: there is nothing left to check."""
        with self._lock:
            self._seen.pop(fingerprint, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._seen)
