"""One request's replay facts: the ledger (the spec's `RequestReplay`), and what a series knows.

The rule: each fact is written by its owner. The request's attempts (attempt.py) write what HTTP
showed (it was sent, an attempt got no whole response, the status the SDK was handed) and whether
the JSON-RPC answer to its id arrived: two layers kept apart, for a response is not the answer. The
call only reads them (`uncertain`) and writes how it settled (`may_have_run`). The record is built
from the ledger. Pure: no I/O.
"""

from __future__ import annotations

from typing import Final

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
    """One request's replay facts, written by its attempts (attempt.py) and read by its call.

    Not thread-safe: a request's owners take turns on one event loop."""

    # What most requests never change starts as a class attribute (one store fewer per request each).
    id: object = None  # its JSON-RPC id, once its request was seen leaving
    records_http_duration = False  # its attempts record http.client.request.duration (read as it leaves)
    attempts = 0  # attempts opened (a client's re-send is one of its own)
    sent = 0  # times the request was sent
    unanswered = False  # an attempt got no whole response: none at all, or its body cut
    delivered: int | None = None  # the status of the response the SDK was handed: the first word stands
    answer_came = False  # the JSON-RPC response to its id arrived
    error_answered = False  # ... and it was a JSON-RPC error (its code is the server's)
    effect: Effect = "none"  # of the whole series so far: series_effect of its attempts'
    final_error: BaseException | None = None  # the transport error of the latest unanswered attempt
    http_version: str | None = None  # of the latest response
    may_have_run = False  # the call settled as "may have run" (UnknownEffectError): the call's word
    rows: tuple[
        AttemptRow, ...
    ] = ()  # one per attempt done, for the record (a few: max_attempts bounds them)

    @property
    def accepted_without_answer(self) -> bool:
        """The HTTP layer took the request (a 2xx), and its JSON-RPC answer never arrived."""
        return self.delivered is not None and 200 <= self.delivered < 300 and not self.answer_came

    def uncertain(self, app_authorized: bool) -> bool:
        """Under `app-authorized`: the call genuinely lacked an answer somewhere (an attempt got no
        response, or a 2xx whose answer never came), so if it fails it fails as "may have run". A
        chain of received refusals and errors is an answer throughout: it keeps the server's error."""
        return app_authorized and (self.unanswered or self.accepted_without_answer)
