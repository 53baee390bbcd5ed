"""A multi-round tool call (SEP-2322) is one call, on every protocol era the installed mcp speaks.

Against the real server's `ask_then_charge` (harness/server.py, `era_tools`): it asks the client to
confirm, then charges, counted on the server once when the charge runs. On 2026-07-28 the question
is a round of its own (round 1 answers `InputRequiredResult`, round 2 carries the answer); on the
legacy era it is asked mid-call, inside one request. Either way the app's one `Client.call_tool` is
one `tools/call` span holding every round's attempts and one record per round (`mcp.replay.round`),
counted once in the metrics; the law applies per round, and no round is ever a repeat of another.
The same app code then gives the same call spans, records (but for the rounds), metrics and errors
on both eras (`test_the_same_app_code_tells_the_same_story_on_both_eras`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import anyio
import pytest
from tests.support.telemetry import Telemetry, is_attempt

from harness.client import ERAS, is_error
from harness.faults import DropAfterExecution, DropAtAnswer, Fault, FaultContext, Throttle
from harness.sdk import LINE
from harness.server import Counters, ServerHandle, build_server, running_server
from otel_mcp_replay import RepeatRefusedError, UnknownEffectError
from otel_mcp_replay import telemetry as t

if LINE == 2:  # mcp 1.x has no Client, no round driver: its era is the legacy one, one request
    import mcp_types as types
    from mcp import Client
    from mcp.client.context import ClientRequestContext

pytestmark = pytest.mark.anyio
needs_client = pytest.mark.skipif(LINE == 1, reason="mcp.Client (the SDK's round driver) is mcp 2.x's")

MODERN = "2026-07-28"
TOOL = "ask_then_charge"
needs_modern = pytest.mark.skipif(MODERN not in ERAS, reason="the installed mcp line has no 2026-07-28 era")


def rounds_of(mode: str) -> int:
    """The requests one ask_then_charge call sends: the question is a round of its own on 2026-07-28."""
    return 2 if mode == MODERN else 1


@pytest.fixture
def server() -> Iterator[ServerHandle]:
    counters = Counters()
    with running_server(counters=counters, server=build_server(counters, era_tools=True)) as handle:
        yield handle


class Confirming:
    """The app's elicitation callback: confirms, and counts how often it was asked."""

    def __init__(self) -> None:
        self.asked = 0

    async def __call__(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        self.asked += 1
        return types.ElicitResult(action="accept", content={"ok": True})


def app_client(server: ServerHandle, mode: str, confirm: Any = None) -> Client:
    return Client(server.url, mode=mode, elicitation_callback=confirm or Confirming())


def on_post(index: int, fault: Fault) -> Callable[[FaultContext], Fault | None]:
    """A fault for the `index`-th tools/call POST of the tool (0 for the first), none for the others."""
    return lambda ctx: fault if ctx.tool == TOOL and ctx.index == index else None


def call_spans(telemetry: Telemetry, tool: str = TOOL) -> list[Any]:
    return [
        s
        for s in telemetry.spans()
        if s.name == f"{t.CALL_SPAN_PREFIX} {tool}"
        and s.instrumentation_scope is not None
        and s.instrumentation_scope.name == t.INSTRUMENTATION_NAME
    ]


def attempts_under(telemetry: Telemetry, span: Any) -> list[Any]:
    return [
        s
        for s in telemetry.spans()
        if is_attempt(s) and s.parent is not None and s.parent.span_id == span.context.span_id
    ]


def records_on(span: Any) -> list[dict[str, Any]]:
    return [dict(e.attributes or {}) for e in span.events if e.name == t.RECORD_EVENT]


def calls_metric(
    telemetry: Telemetry, before: list[tuple[dict[str, Any], float]] = (), tool: str | None = TOOL
) -> list[tuple[dict[str, Any], float]]:
    """The calls counted (cumulative), less those counted `before`. With `tool`, each is counted
    with that tool's name (the app's call's, never a round's own), checked here and left out."""
    now = telemetry.metrics().get(t.METRIC_CALLS, [])
    if tool is not None:
        assert all(attributes.get(t.GEN_AI_TOOL_NAME) == tool for attributes, _ in now), now
        now = [({k: v for k, v in a.items() if k != t.GEN_AI_TOOL_NAME}, value) for a, value in now]
    earlier = {repr(sorted(attributes.items())): value for attributes, value in before}
    counted = [
        (attributes, value - earlier.get(repr(sorted(attributes.items())), 0.0)) for attributes, value in now
    ]
    return [(attributes, value) for attributes, value in counted if value]


def declared(server: ServerHandle, policy: str = "app-authorized", **tool: Any) -> dict[str, Any]:
    return {server.url: {"policy": policy, "tools": {TOOL: tool} if tool else {}}}


# -- one call, one span ----------------------------------------------------------------------


async def test_a_tool_that_asks_mid_call_through_a_session_is_one_call_span_round_1(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    """The legacy era on both lines (mcp 1.x has only it): the question is asked inside the one
    request, so `ClientSession.call_tool` is one call with one record, round 1."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    from harness.client import types as line_types

    asked: list[object] = []

    async def confirm(context: Any, params: Any) -> Any:
        asked.append(params)
        return line_types.ElicitResult(action="accept", content={"ok": True})

    instrument()
    async with (
        streamable_http_client(server.url) as streams,
        ClientSession(streams[0], streams[1], elicitation_callback=confirm) as session,
    ):
        await session.initialize()
        with anyio.fail_after(20):
            result = await session.call_tool(TOOL, {"amount": 7})
    assert not is_error(result) and len(asked) == 1
    assert (server.counters.executions(TOOL), server.counters.tool_posts(TOOL)) == (1, 1)
    (span,) = call_spans(telemetry)
    assert [(r[t.ROUND], r[t.VERDICT], r[t.EFFECT]) for r in records_on(span)] == [
        (1, "completed", "applied")
    ]
    assert len(attempts_under(telemetry, span)) == 1
    assert calls_metric(telemetry) == [
        ({t.VERDICT: "completed", t.EFFECT: "applied", t.POLICY: "compatibility"}, 1.0)
    ]


@needs_client
async def test_a_multi_round_call_is_one_call_span(
    server: ServerHandle, telemetry: Telemetry, instrument: Any, mode: str
) -> None:
    instrument()
    confirm = Confirming()
    async with app_client(server, mode, confirm) as client:
        with anyio.fail_after(20):
            result = await client.call_tool(TOOL, {"amount": 7})
    assert not result.is_error and confirm.asked == 1
    assert server.counters.executions(TOOL) == 1
    assert server.counters.tool_posts(TOOL) == rounds_of(mode)

    (span,) = call_spans(telemetry)  # one span for the app's one call, whatever the era
    assert span.parent is None or span.parent.span_id not in {
        s.context.span_id for s in call_spans(telemetry)
    }
    found = records_on(span)
    expected = [(1, "input-required", "applied"), (2, "completed", "applied")] if mode == MODERN else []
    expected = expected or [(1, "completed", "applied")]
    assert [(r[t.ROUND], r[t.VERDICT], r[t.EFFECT]) for r in found] == expected
    assert all(r[t.SENT] == 1 and list(r[t.ATTEMPTS_PERMISSION]) == ["first"] for r in found)
    # Every round's attempts are under the one call span; each round is its own request.
    attempts = attempts_under(telemetry, span)
    assert len(attempts) == rounds_of(mode)
    assert sorted(a.attributes[t.JSONRPC_REQUEST_ID] for a in attempts) == sorted(
        r[t.JSONRPC_REQUEST_ID] for r in found
    )
    assert len({r[t.JSONRPC_REQUEST_ID] for r in found}) == rounds_of(mode)
    assert all(a.attributes[t.ATTEMPT] == 1 for a in attempts)  # no round is a repeat of another
    # Counted once, as the final round ended.
    assert calls_metric(telemetry) == [
        ({t.VERDICT: "completed", t.EFFECT: "applied", t.POLICY: "compatibility"}, 1.0)
    ]


@needs_modern
async def test_an_app_driving_rounds_itself_gets_one_call_per_call_tool(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    instrument()
    async with app_client(server, MODERN) as client:
        first = await client.session.call_tool(TOOL, {"amount": 7}, allow_input_required=True)
        assert isinstance(first, types.InputRequiredResult) and first.input_requests
        answers = {
            key: types.ElicitResult(action="accept", content={"ok": True}) for key in first.input_requests
        }
        second = await client.session.call_tool(
            TOOL,
            {"amount": 7},
            input_responses=answers,
            request_state=first.request_state,
            allow_input_required=True,
        )
    assert isinstance(second, types.CallToolResult) and not second.is_error
    assert server.counters.executions(TOOL) == 1
    spans = call_spans(telemetry)
    assert [[(r[t.ROUND], r[t.VERDICT]) for r in records_on(s)] for s in spans] == [
        [(1, "input-required")],
        [(1, "completed")],
    ]
    assert sorted(calls_metric(telemetry), key=lambda point: point[0][t.VERDICT]) == [
        ({t.VERDICT: "completed", t.EFFECT: "applied", t.POLICY: "compatibility"}, 1.0),
        ({t.VERDICT: "input-required", t.EFFECT: "applied", t.POLICY: "compatibility"}, 1.0),
    ]


# -- the law per round --------------------------------------------------------------------------


@needs_client
async def test_a_cut_in_the_last_round_fails_the_call_then_the_identical_call_is_refused(
    server: ServerHandle, telemetry: Telemetry, instrument: Any, mode: str
) -> None:
    instrument(servers=declared(server, changes=True))
    last = rounds_of(mode) - 1
    # Cut in place of the answer: on the legacy era the question, asked mid-call, gets through first.
    server.faults.set_rule(on_post(last, DropAtAnswer()))
    async with app_client(server, mode) as client:
        with anyio.fail_after(20), pytest.raises(UnknownEffectError):
            await client.call_tool(TOOL, {"amount": 7})
        assert server.counters.executions(TOOL) == 1  # the charge ran; its answer was cut
        with anyio.fail_after(20), pytest.raises(RepeatRefusedError) as refused:
            await client.call_tool(TOOL, {"amount": 7})  # the app's identical call
        assert "failed moments ago" in str(refused.value)
    assert server.counters.executions(TOOL) == 1  # never charged twice
    assert server.counters.tool_posts(TOOL) == rounds_of(mode)  # the refused call sent nothing

    cut, again = call_spans(telemetry)
    found = records_on(cut)
    assert [r[t.ROUND] for r in found] == list(range(1, rounds_of(mode) + 1))
    final = found[-1]
    assert (final[t.VERDICT], final[t.EFFECT], final[t.MAY_HAVE_RUN]) == ("failed", "unknown", True)
    assert cut.attributes[t.ERROR_TYPE] == "otel_mcp_replay.UnknownEffectError"
    (refused_record,) = records_on(again)
    assert (refused_record[t.ROUND], refused_record[t.SENT], refused_record[t.EFFECT]) == (1, 0, "none")
    assert again.attributes[t.DECLINED] == "repeat-of-unknown"
    assert sorted(calls_metric(telemetry), key=lambda point: point[0][t.EFFECT]) == [
        ({t.VERDICT: "failed", t.EFFECT: "none", t.POLICY: "app-authorized"}, 1.0),
        ({t.VERDICT: "failed", t.EFFECT: "unknown", t.POLICY: "app-authorized"}, 1.0),
    ]


@needs_modern
@pytest.mark.parametrize(
    ("policy", "tool", "by"),
    [
        ("compatibility", {}, "compatibility"),  # the 429 rule, on its recorded assumption
        ("app-authorized", {"on": ["throttle"]}, "app"),  # the kind the app named
    ],
)
async def test_a_429_in_round_2_is_repeated_by_the_law_never_as_a_repeat_of_round_1(
    server: ServerHandle, telemetry: Telemetry, instrument: Any, policy: str, tool: dict[str, Any], by: str
) -> None:
    instrument(servers=declared(server, policy, **tool))
    server.faults.set_rule(on_post(1, Throttle(retry_after="0")))  # round 2's first send
    async with app_client(server, MODERN) as client:
        with anyio.fail_after(20):
            result = await client.call_tool(TOOL, {"amount": 7})
    assert not result.is_error
    assert server.counters.executions(TOOL) == 1
    assert server.counters.tool_posts(TOOL) == 3  # round 1, round 2 refused with 429, round 2 again

    (span,) = call_spans(telemetry)
    one, two = records_on(span)
    assert (one[t.ROUND], one[t.VERDICT], one[t.SENT], list(one[t.ATTEMPTS_PERMISSION])) == (
        1,
        "input-required",
        1,
        ["first"],
    )
    # A 429 does not prove the tool did not run: round 2's effect, and the call's, are unknown.
    assert (two[t.ROUND], two[t.VERDICT], two[t.SENT], two[t.EFFECT]) == (2, "completed", 2, "unknown")
    assert list(two[t.ATTEMPTS_STATUS]) == [429, 200]
    assert list(two[t.ATTEMPTS_FAILURE]) == ["throttle", ""]
    assert list(two[t.ATTEMPTS_PERMISSION]) == ["first", by]
    assert one[t.JSONRPC_REQUEST_ID] != two[t.JSONRPC_REQUEST_ID]
    # Round 2's attempts are its own series: its first is a first, its repeat repeats round 2.
    attempts = sorted(attempts_under(telemetry, span), key=lambda a: a.start_time)
    assert [(a.attributes[t.JSONRPC_REQUEST_ID], a.attributes[t.ATTEMPT]) for a in attempts] == [
        (one[t.JSONRPC_REQUEST_ID], 1),
        (two[t.JSONRPC_REQUEST_ID], 1),
        (two[t.JSONRPC_REQUEST_ID], 2),
    ]
    assert t.HTTP_RESEND_COUNT not in attempts[1].attributes
    assert (attempts[2].attributes[t.PERMISSION_BY], attempts[2].attributes[t.PERMISSION_ON]) == (
        by,
        "throttle",
    )
    assert calls_metric(telemetry) == [({t.VERDICT: "completed", t.EFFECT: "unknown", t.POLICY: policy}, 1.0)]


@needs_modern
async def test_round_2_is_never_refused_as_a_repeat_even_when_the_guard_holds_its_fingerprint(
    server: ServerHandle, telemetry: Telemetry, instrument: Any
) -> None:
    """While the app answers round 1's question, an identical call elsewhere is cut after it ran:
    the guard now remembers these arguments. Round 2 of the first call is that call going on,
    never a repeat of it: it is sent, and charges."""
    instrument(servers=declared(server, changes=True))
    # tools/call POSTs: 0 the first call's round 1, 1 and 2 the other call's rounds (2 is cut),
    # 3 the first call's round 2.
    server.faults.set_rule(on_post(2, DropAfterExecution()))
    other_failed: list[BaseException] = []

    async def confirm_after_the_other_call(context: Any, params: Any) -> types.ElicitResult:
        async with app_client(server, MODERN) as other:
            try:
                await other.call_tool(TOOL, {"amount": 7})
            except UnknownEffectError as failed:
                other_failed.append(failed)
        return types.ElicitResult(action="accept", content={"ok": True})

    async with app_client(server, MODERN, confirm_after_the_other_call) as client:
        with anyio.fail_after(30):
            result = await client.call_tool(TOOL, {"amount": 7})
    assert len(other_failed) == 1  # the guard holds the fingerprint of these very arguments
    assert not result.is_error
    assert server.counters.executions(TOOL) == 2  # the other call's charge, then this one's
    assert server.counters.tool_posts(TOOL) == 4
    first, other = sorted(call_spans(telemetry), key=lambda s: s.start_time)
    assert [(r[t.ROUND], r[t.VERDICT]) for r in records_on(first)] == [
        (1, "input-required"),
        (2, "completed"),
    ]
    assert [(r[t.ROUND], r[t.VERDICT], r[t.EFFECT]) for r in records_on(other)] == [
        (1, "input-required", "applied"),
        (2, "failed", "unknown"),
    ]
    assert t.DECLINED not in (first.attributes or {})


# -- era parity ---------------------------------------------------------------------------------

PARITY_TOOLS = {
    "search": {"on": ["throttle"]},
    "send_email": {"changes": True},
    TOOL: {"changes": True},
}


async def the_app(server: ServerHandle, mode: str) -> list[str]:
    """The same app code on each era: list, call, a 429 repeated, a cut changing tool, a multi-round
    call. Returns what each step came to (the result's text kind, or the error's type)."""
    server.faults.add("search", Throttle(retry_after="0"))
    server.faults.add("send_email", DropAfterExecution())
    outcomes: list[str] = []
    async with app_client(server, mode) as client:
        listed = await client.list_tools()
        outcomes.append(
            f"listed {len({tool.name for tool in listed.tools} & {'search', 'send_email', TOOL})}"
        )
        for tool, arguments in (
            ("search", {"query": "throttled"}),  # the queued 429 is this call's
            ("search", {"query": "plain"}),
            ("send_email", {"to": "ada@example.com", "body": "hello"}),
            (TOOL, {"amount": 7}),
        ):
            try:
                with anyio.fail_after(20):
                    result = await client.call_tool(tool, arguments)
            except Exception as error:
                outcomes.append(f"{tool}: {type(error).__name__}")
            else:
                outcomes.append(f"{tool}: {'tool error' if result.is_error else 'result'}")
    return outcomes


def story(
    telemetry: Telemetry, server: ServerHandle, before: list[tuple[dict[str, Any], float]]
) -> dict[str, Any]:
    """What the app's telemetry says, but for the rounds: per call span its name, status, error
    type and policy, and its final record without `mcp.replay.round` and the request id; the
    calls metric; the executions on the server."""
    spans = sorted(
        (
            s
            for s in telemetry.spans()
            if s.instrumentation_scope and s.instrumentation_scope.name == t.INSTRUMENTATION_NAME
        ),
        key=lambda s: s.start_time,
    )
    calls = [s for s in spans if s.name.startswith(t.CALL_SPAN_PREFIX)]
    told = []
    for span in calls:
        final = records_on(span)[-1]
        told.append(
            (
                span.name,
                span.status.status_code.name,
                (span.attributes or {}).get(t.ERROR_TYPE),
                (span.attributes or {}).get(t.POLICY),
                {k: v for k, v in final.items() if k not in (t.ROUND, t.JSONRPC_REQUEST_ID)},
            )
        )
    return {
        "calls": told,
        "metric": sorted(calls_metric(telemetry, before, tool=None), key=repr),
        "executions": {tool: server.counters.executions(tool) for tool in ("search", "send_email", TOOL)},
    }


@needs_modern
async def test_the_same_app_code_tells_the_same_story_on_both_eras(
    telemetry: Telemetry, instrument: Any
) -> None:
    told: dict[str, dict[str, Any]] = {}
    outcomes: dict[str, list[str]] = {}
    rounds: dict[str, list[list[int]]] = {}
    for mode in ERAS:
        counters = Counters()
        with running_server(counters=counters, server=build_server(counters, era_tools=True)) as server:
            telemetry.exporter.clear()
            declaration = {"policy": "app-authorized", "label": "parity", "tools": PARITY_TOOLS}
            instrument(servers={server.url: declaration})
            before = calls_metric(telemetry, tool=None)  # the previous era's calls are not this one's
            outcomes[mode] = await the_app(server, mode)
            told[mode] = story(telemetry, server, before)
            rounds[mode] = [[r[t.ROUND] for r in records_on(s)] for s in call_spans(telemetry, TOOL)]
    legacy, modern = ERAS
    assert outcomes[legacy] == [
        "listed 3",
        "search: result",
        "search: result",
        "send_email: UnknownEffectError",
        f"{TOOL}: result",
    ]
    assert outcomes[modern] == outcomes[legacy]
    assert len(told[legacy]["calls"]) == 4
    assert told[modern] == told[legacy]
    # What differs is what the era does: the question is a round of its own on 2026-07-28.
    assert rounds == {legacy: [[1]], modern: [[1, 2]]}
