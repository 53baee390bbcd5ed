"""The evidence: what is known of what each attempt of a request did (the spec's requestEvidence).

The rule: KNOWLEDGE of an attempt's effect comes only from what came back (`classify`, the one
classification): `none` only when never sent, `applied` when a JSON-RPC result came, else
`unknown`; a refusal (a 429, an adapter's) is not proof that nothing ran. It is never read from the
permission to repeat (law.py). Pure: no I/O, no mcp, no HTTP client.
"""

from __future__ import annotations

import math
import re
from datetime import timezone
from email.utils import parsedate_to_datetime
from typing import Final, Literal, NamedTuple

from otel_mcp_replay.telemetry import Effect, FailureKind

# What a 2xx reply said of the request's JSON-RPC answer, as the seam read it:
# "result"/"error": the answer to this id came; "other": the body held no answer to this id;
# "later": it comes on a stream still to be read; "accepted": a 202, no answer will follow on it;
# "cut": the body was cut before it was whole (its connection lost: `network`, with its status).
Reply = Literal["result", "error", "other", "later", "accepted", "cut"]
Answer = Literal["result", "error"]


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
    if status == 200 and reply == "result" and not session_busy:  # a clean call's, asked first
        return _ANSWERED_200
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
    if reply == "result":  # (a 200's is made once, above)
        return Outcome(status, None, "applied", answered=True)
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
