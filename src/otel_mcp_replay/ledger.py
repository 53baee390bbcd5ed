"""One request's replay facts: the ledger (the spec's `RequestReplay`), and what a series knows.

The rule: each fact has one writer, the request's attempts (attempt.py): what HTTP showed (an
attempt got no whole response, the status the SDK was handed) and the JSON-RPC answer to its id
that arrived: two layers kept apart, for a response is not the answer. The call only reads them
(`uncertain`); how it settled is its ending's (call.py), and its request's id is the call's. The
record is built from the ledger. Pure: no I/O.
"""

from __future__ import annotations

from typing import Final

from otel_mcp_replay.evidence import Answer
from otel_mcp_replay.record import AttemptRow
from otel_mcp_replay.telemetry import Effect

# What a series' effect becomes after one more attempt's (the spec's SeriesKnowledge): uncertainty
# survives (once any attempt is `unknown`, the series is), and evidence that something ran
# (`applied`) is never erased.
_RANK: Final[dict[Effect, int]] = {"none": 0, "applied": 1, "unknown": 2}
SERIES_EFFECT: Final[dict[tuple[Effect, Effect], Effect]] = {
    (so_far, attempt): so_far if _RANK[so_far] >= _RANK[attempt] else attempt
    for so_far in _RANK
    for attempt in _RANK
}


def series_effect(so_far: Effect, attempt: Effect) -> Effect:
    """What is known of a whole series' effect once one more attempt came to `attempt`."""
    try:
        return SERIES_EFFECT[so_far, attempt]
    except KeyError:
        raise ValueError("an effect is none, unknown or applied") from None


class RequestReplay:
    """One request's replay facts: each written by its attempts (attempt.py) alone, and read by its
    call.

    Not thread-safe: a request's owners take turns on one event loop."""

    # What most requests never change starts as a class attribute (one store fewer per request each).
    sent = 0  # times the request was sent: its attempts done that reached the server
    effect: Effect = "none"  # of the whole series so far: series_effect of its attempts'
    unanswered = False  # an attempt got no whole response: none at all, or its body cut
    delivered: int | None = None  # the status of the response the SDK was handed: the first word stands
    answer: Answer | None = None  # the JSON-RPC answer to its id that arrived: a result or an error
    final_error: BaseException | None = None  # the transport error of the latest unanswered attempt
    http_version: str | None = None  # of the latest response
    # One per attempt done, for the record (max_attempts bounds them); the next attempt's number is
    # one past them (an attempt is done before the next one opens, a redirect's hops are one).
    rows: tuple[AttemptRow, ...] = ()

    @property
    def accepted_without_answer(self) -> bool:
        """The HTTP layer took the request (a 2xx), and its JSON-RPC answer never arrived."""
        return self.delivered is not None and 200 <= self.delivered < 300 and self.answer is None

    def uncertain(self, app_authorized: bool) -> bool:
        """Under `app-authorized`: the call genuinely lacked an answer somewhere (an attempt got no
        response, or a 2xx whose answer never came), so if it fails it fails as "may have run". A
        chain of received refusals and errors is an answer throughout: it keeps the server's error."""
        return app_authorized and (self.unanswered or self.accepted_without_answer)
