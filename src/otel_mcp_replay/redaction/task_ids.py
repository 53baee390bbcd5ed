"""The task ids this process saw (the MCP tasks extension, SEP-2663), masked wherever a text holds one.

The rule: a server may use a task id as a bearer token, and clients write it into their own texts
(fastmcp's "Task <id> was cancelled", as a span's status description and its exception event). Each
id is learnt as its task-backed call begins (tasks.py); the redaction then masks it in every string
it reads, as a whole value or as a word of a text (a run of letters, digits, `-` and `_`: base64url,
hex and UUID ids), in one linear pass. Bounded: the most recent MAX_KEPT ids are kept. Thread-safe.
The process's `TaskIds` is the instrumentor's, as its vouches are (`McpReplayInstrumentor.task_ids`):
every runtime it builds tells it, every redaction wrapper reads it (wrappers.py).
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Collection
from typing import Any, Final

from otel_mcp_replay.redaction.text import MASK

MAX_KEPT: Final = 4096
# A word a task id can be (shorter ones are no credential); the pattern is linear in the text.
_WORD: Final = re.compile(r"[A-Za-z0-9_-]{8,}")
_SEQUENCES: Final = frozenset({tuple, list})
_is_str: Final = str.__instancecheck__  # isinstance(value, str), as filter's C callable


class TaskIds:
    """Task ids seen, the most recent MAX_KEPT."""

    __slots__ = ("_ids", "_lock")

    def __init__(self) -> None:
        self._ids: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def saw(self, task_id: str) -> None:
        with self._lock:
            self._ids[task_id] = None
            self._ids.move_to_end(task_id)
            if len(self._ids) > MAX_KEPT:
                self._ids.popitem(last=False)

    def __bool__(self) -> bool:
        return bool(self._ids)  # read unlocked: a length, never half-written

    def held_in(self, values: Collection[Any]) -> bool:
        """Whether any of `values` (attribute values) holds a task id seen: their strings tested at
        once, in C (no Python line runs per value), a list or tuple item by item."""
        ids = self._ids
        if any(map(ids.__contains__, filter(_is_str, values))):
            return True
        joined = "\x00".join(filter(_is_str, values))
        if any(map(ids.__contains__, _WORD.findall(joined))):
            return True
        if _SEQUENCES.isdisjoint(map(type, values)):
            return False
        return any(self.held_in(value) for value in values if type(value) in _SEQUENCES)

    def masked(self, text: str) -> str:
        """`text` with every task id seen masked; `text` itself when it holds none."""
        ids = self._ids  # membership reads only: an id added meanwhile is masked from the next span
        if text in ids:
            return MASK
        if len(text) < 8 or not any(word.group() in ids for word in _WORD.finditer(text)):
            return text
        return _WORD.sub(lambda word: MASK if word.group() in ids else word.group(), text)
