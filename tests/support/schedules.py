"""The reliability rig: randomized fault schedules drawn from one seed, run over the real server
and a real TCP proxy, and every call checked against the server's ground truth (its POSTs and
executions per request id). test_fault_schedules.py runs it; its docstring says what it proves.
"""

from __future__ import annotations

import json
import os
import random
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
from tests.support.calls import leaves
from tests.support.leaks import client_connections, no_leaks, settled
from tests.support.telemetry import Telemetry, records

from harness.client import ERAS, Client, McpError, http, is_error
from harness.faults import (
    DropAfterExecution,
    DropBeforeExecution,
    DropMidBody,
    Fault,
    FaultContext,
    SseWithoutAnswer,
    StallThenPass,
    Status,
    Throttle,
)
from harness.proxy import TcpProxy
from harness.sdk import LINE
from harness.server import ServerHandle, running_server
from otel_mcp_replay import UnknownEffectError
from otel_mcp_replay import telemetry as t

if sys.version_info < (3, 11):  # pragma: no cover - Python 3.10
    from exceptiongroup import BaseExceptionGroup


# What tears the SDK's whole transport down (its own behaviour, kept). On both lines: a connection
# lost for good, passed on under compatibility. On mcp 1.x also a 4xx/5xx answer the SDK is handed
# (`raise_for_status` in its POST task, docs/mcp-lines.md); 2.x resolves that one request with an error.
TEARDOWN_ERRORS: tuple[type[BaseException], ...] = (http.TransportError,)
REFUSAL_TEARS_DOWN = LINE == 1
REFUSAL_TEARDOWN_ERRORS: tuple[type[BaseException], ...] = (
    (http.HTTPStatusError,) if REFUSAL_TEARS_DOWN else ()
)

SEED_ENV = "OTEL_MCP_REPLAY_RELIABILITY_SEED"
QUICK_SEED = 20261129
QUICK_CALLS = 240
LONG_CALLS = 2400
# A call settles within its wait cap, plus the stalls the server was told to make, plus this: the
# figure the summary prints against. The verdict on waiting is the record's (its waits within the
# cap), never a clock's.
SETTLE_SLACK_S = 5.0
# A call that has not settled this long after that is stuck: stop it and report it (a hang guard).
HANG_GUARD_S = 20.0
# A caller who gives up during a 1 s Retry-After wait does so this far in.
IN_WAIT_CANCEL_S = 0.4

Policy = Literal["compatibility", "app-authorized"]
Mode = Literal["legacy", "2026-07-28"]
Kind = Literal["search", "charge-keyed", "charge", "send_email"]
KINDS: tuple[Kind, ...] = ("search", "charge-keyed", "charge", "send_email")
FAILURE_KINDS = ("throttle", "network")


# ----------------------------------------------------------------------------------------------
# The schedule: one plan per call, drawn from the seed.


@dataclass(frozen=True)
class CallPlan:
    """One call: which tool, what the server does to each POST of it that reaches it, whether the
    proxy cuts its first attempt (before the server sees it, or after the server answered), and
    whether the caller gives up: `in-wait` (0.4 s into the series' wait for a 1 s Retry-After),
    `at-server` (once the server holds its POST, stalled 0.5 s)."""

    index: int  # unique in the whole run: it is the call's marker in its arguments
    kind: Kind
    faults: tuple[Fault, ...] = ()
    proxy_cut: Literal["before", "after"] | None = None
    cancel: Literal["in-wait", "at-server"] | None = None

    @property
    def tool(self) -> str:
        return "charge" if self.kind.startswith("charge") else self.kind

    def arguments(self) -> dict[str, Any]:
        if self.kind == "search":
            return {"query": f"q{self.index}"}
        if self.kind == "send_email":
            return {"to": f"u{self.index}@example.test", "body": "hello"}
        arguments: dict[str, Any] = {"amount": self.index}
        if self.kind == "charge-keyed":
            arguments["idempotency_key"] = f"k{self.index}"
        return arguments

    @property
    def marker(self) -> bytes | None:
        """Bytes only this call's request body holds (the proxy matches on them)."""
        if self.kind == "search":
            return f'"q{self.index}"'.encode()
        if self.kind == "send_email":
            return f'"u{self.index}@example.test"'.encode()
        if self.kind == "charge-keyed":
            return f'"k{self.index}"'.encode()
        return None

    @property
    def changes_without_key(self) -> bool:
        return self.kind in ("charge", "send_email")

    @property
    def may_be_refused(self) -> bool:
        """The server answers some POST of it with a 4xx/5xx, which the SDK is handed when the law
        does not repeat it (or the repeats run out)."""
        return any(isinstance(f, (Throttle, Status)) for f in self.faults)

    @property
    def stall_s(self) -> float:
        return sum(f.seconds for f in self.faults if isinstance(f, StallThenPass))


def key_of(tool: str | None, arguments: Any) -> tuple[str, str] | None:
    """The call a tools/call POST belongs to, read from its arguments (the server's side)."""
    if not isinstance(arguments, dict):
        return None
    if tool == "search":
        return ("search", str(arguments.get("query")))
    if tool == "send_email":
        return ("send_email", str(arguments.get("to")))
    if tool == "charge":
        return ("charge", str(arguments.get("amount")))
    return None


def plan_key(plan: CallPlan) -> tuple[str, str] | None:
    return key_of(plan.tool, plan.arguments())


class ScheduleRule:
    """The server's fault rule: the n-th POST of a call that reaches the server gets the plan's
    n-th fault (then none). Deterministic per call, whatever the interleaving of calls."""

    def __init__(self, plans: Sequence[CallPlan]) -> None:
        self._plans = {plan_key(p): p for p in plans}
        self._seen: dict[tuple[str, str] | None, int] = {}
        self._arrived = {plan_key(p): threading.Event() for p in plans}
        self._lock = threading.Lock()

    def arrived(self, plan: CallPlan) -> threading.Event:
        """Set once a POST of `plan`'s call reached the server."""
        return self._arrived[plan_key(plan)]

    def __call__(self, ctx: FaultContext) -> Fault | None:
        if ctx.method != "tools/call":
            return None
        key = key_of(ctx.tool, dict(ctx.arguments))
        plan = self._plans.get(key)
        if plan is None:
            return None
        with self._lock:
            n = self._seen.get(key, 0)
            self._seen[key] = n + 1
        self._arrived[key].set()
        return plan.faults[n] if n < len(plan.faults) else None


@dataclass(frozen=True)
class Round:
    """One `Client` (or, under compatibility with drops, a run of them; on mcp 1.x one for the calls
    the server never refuses and a run for those it may): settings, declaration, calls."""

    number: int
    policy: Policy
    mode: Mode
    drops: bool  # faults that cut the connection are in the menu
    max_attempts: int
    max_wait_ms: int
    retry_budget: tuple[int, float] | None
    search_on: tuple[str, ...]
    charge_on: tuple[str, ...]
    concurrency: int
    plans: tuple[CallPlan, ...]

    @property
    def sequential(self) -> bool:
        # Under compatibility a connection lost for good tears the SDK's whole transport down (its
        # own behaviour, kept): those calls run one at a time, and a new Client follows a teardown.
        return self.policy == "compatibility" and self.drops

    def servers(self, url: str) -> dict[str, Any]:
        tools = {
            "search": {"on": list(self.search_on)},
            "charge": {"changes": True, "on": list(self.charge_on)},
            "send_email": {"changes": True, "on": list(FAILURE_KINDS)},
        }
        return {
            url: {
                "policy": self.policy,
                "label": f"round-{self.number}",
                "tools": tools,
                "deduplicates": {"argument": "idempotency_key"},
            }
        }

    def describe(self) -> str:
        return (
            f"round {self.number} ({self.policy}, {self.mode}, drops={self.drops}, "
            f"max_attempts={self.max_attempts}, max_wait_ms={self.max_wait_ms}, "
            f"retry_budget={self.retry_budget}, search_on={self.search_on}, charge_on={self.charge_on})"
        )


def _fault(rng: random.Random, policy: Policy, drops: bool, sequential: bool) -> Fault | None:
    menu: list[tuple[Callable[[], Fault | None], float]] = [
        (lambda: None, 30),
        (lambda: Throttle(None), 8),
        (lambda: Throttle("0"), 8),
        (lambda: Status(503), 8),
        (lambda: StallThenPass(round(rng.uniform(0.02, 0.2), 3)), 5),
    ]
    if not sequential:  # a 1 s wait, one call at a time, is too slow for its worth
        menu.append((lambda: Throttle("1"), 4))
    if drops:
        menu += [
            (lambda: DropBeforeExecution(reset=rng.random() < 0.3), 6),
            (lambda: DropAfterExecution(reset=rng.random() < 0.3), 6),
        ]
    if drops and policy == "app-authorized":
        # A 2xx whose JSON-RPC answer never comes (cut mid-stream, or the stream ends without it).
        menu += [(lambda: DropMidBody(), 2), (lambda: SseWithoutAnswer(run_tool=rng.random() < 0.5), 2)]
    maker: Callable[[], Fault | None] = rng.choices([m for m, _ in menu], [w for _, w in menu])[0]
    return maker()


def draw_plan(rng: random.Random, index: int, policy: Policy, drops: bool, sequential: bool) -> CallPlan:
    kind: Kind = rng.choices(KINDS, (4, 2, 2, 2))[0]
    roll = rng.random()
    if not sequential and roll < 0.06:
        # The caller gives up while the series waits out a 1 s Retry-After.
        return CallPlan(index, kind, (Throttle("1"),), cancel="in-wait")
    if not sequential and roll < 0.10:
        # The caller gives up while its POST is at the server.
        return CallPlan(index, kind, (StallThenPass(0.5),), cancel="at-server")
    faults: list[Fault] = []
    for _ in range(rng.choice((0, 1, 1, 2, 3))):
        fault = _fault(rng, policy, drops, sequential)
        if fault is None:
            break
        faults.append(fault)
    cut: Literal["before", "after"] | None = None
    if drops and rng.random() < 0.12 and kind != "charge":  # charge without key has no string marker
        cut = rng.choice(("before", "after"))
    return CallPlan(index, kind, tuple(faults), proxy_cut=cut)


def tour(rng: random.Random, first: int, policy: Policy, drops: bool, sequential: bool) -> list[CallPlan]:
    """Every fault, cut and cancellation of the round's menu once, on a first attempt (each seed
    covers them all; the random draws then mix them)."""
    specs: list[
        tuple[tuple[Fault, ...], Literal["before", "after"] | None, Literal["in-wait", "at-server"] | None]
    ] = [
        ((Throttle(None),), None, None),
        ((Throttle("0"),), None, None),
        ((Status(503),), None, None),
        ((StallThenPass(0.1),), None, None),
    ]
    if not sequential:
        specs += [
            ((Throttle("1"),), None, None),
            ((Throttle("1"),), None, "in-wait"),
            ((StallThenPass(0.5),), None, "at-server"),
        ]
    if drops:
        specs += [
            ((DropBeforeExecution(),), None, None),
            ((DropAfterExecution(reset=True),), None, None),
            ((), "before", None),
            ((), "after", None),
        ]
    if drops and policy == "app-authorized":
        specs += [((DropMidBody(),), None, None), ((SseWithoutAnswer(run_tool=True),), None, None)]
    plans = []
    for i, (faults, cut, cancel) in enumerate(specs):
        kind: Kind = rng.choice(("search", "charge-keyed", "send_email")) if cut else rng.choice(KINDS)
        plans.append(CallPlan(first + i, kind, faults, proxy_cut=cut, cancel=cancel))
    return plans


def draw_rounds(seed: int, total_calls: int, per_round: int, concurrency: int) -> list[Round]:
    rng = random.Random(seed)
    # (policy, mode, drops): app-authorized takes every fault; compatibility runs the faults that
    # do not drop concurrently, and the dropping ones one call at a time.
    kinds: list[tuple[Policy, Mode, bool, float]] = [
        ("app-authorized", "legacy", True, 3),
        ("app-authorized", "2026-07-28", True, 3),
        ("compatibility", "legacy", False, 2),
        ("compatibility", "2026-07-28", False, 2),
        ("compatibility", "legacy", True, 0.5),
        ("compatibility", "2026-07-28", True, 0.5),
    ]
    kinds = [kind for kind in kinds if kind[1] in ERAS]  # the eras the installed line speaks
    rounds: list[Round] = []
    index = 0
    number = 0
    while index < total_calls:
        # Round-robin first (every kind runs at least once), then by weight.
        chosen = kinds[number] if number < len(kinds) else rng.choices(kinds, [k[3] for k in kinds])[0]
        policy, mode, drops, _ = chosen
        sequential = policy == "compatibility" and drops
        size = max(5, per_round // 3) if sequential else per_round
        size = min(size, total_calls - index)
        toured = tour(rng, index, policy, drops, sequential)[:size] if number < len(kinds) else []
        plans = tuple(
            toured + [draw_plan(rng, index + i, policy, drops, sequential) for i in range(len(toured), size)]
        )
        budget_pick = rng.random()
        rounds.append(
            Round(
                number=number,
                policy=policy,
                mode=mode,
                drops=drops,
                max_attempts=rng.choice((2, 3, 4)),
                max_wait_ms=rng.choice((1200, 1500, 2500)),
                retry_budget=None if budget_pick < 0.7 else (100, 0.1),
                search_on=tuple(k for k in FAILURE_KINDS if rng.random() < 0.7),
                charge_on=tuple(k for k in FAILURE_KINDS if rng.random() < 0.7),
                concurrency=concurrency,
                plans=plans,
            )
        )
        index += size
        number += 1
    return rounds


# ----------------------------------------------------------------------------------------------
# Running a round and checking it against the server.


@dataclass
class CallResult:
    # ok | tool-error | UnknownEffectError | MCPError (the line's error class) | cancelled | torn-down | hang
    outcome: str
    duration_s: float


@dataclass
class Stats:
    calls: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    attempts: int = 0
    teardowns: int = 0
    refusal_teardowns: int = 0  # mcp 1.x: by a 4xx/5xx the SDK was handed
    faults: dict[str, int] = field(default_factory=dict)  # applied by the server, and the proxy's cuts
    longest_over_s: float = float("-inf")  # the most a call took beyond its wait cap and stalls
    violations: list[str] = field(default_factory=list)

    def note(self, outcome: str) -> None:
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1


class Rig:
    """The server, the proxy in front of it, the telemetry and the instrumentor, for a whole run."""

    def __init__(
        self, server: ServerHandle, proxy: TcpProxy, telemetry: Telemetry, instrument: Any, seed: int
    ) -> None:
        self.server = server
        self.proxy = proxy
        self.telemetry = telemetry
        self.instrument = instrument
        self.seed = seed
        self.url = proxy.url_for(server.url)
        self.stats = Stats()
        self.rule = ScheduleRule(())

    def violation(self, rnd: Round, text: str, plan: CallPlan | None = None) -> None:
        where = f"seed {self.seed}, {rnd.describe()}"
        self.stats.violations.append(f"[{where}] {text}" + (f" :: {plan}" if plan else ""))

    def bound_s(self, rnd: Round, plan: CallPlan) -> float:
        if plan.cancel == "in-wait":
            return IN_WAIT_CANCEL_S + SETTLE_SLACK_S
        if plan.cancel == "at-server":
            return plan.stall_s + SETTLE_SLACK_S
        return rnd.max_wait_ms / 1000 + plan.stall_s + SETTLE_SLACK_S

    async def call(self, client: Any, rnd: Round, plan: CallPlan, results: dict[int, CallResult]) -> None:
        """One call; its outcome and duration go to `results`. MCPError is an outcome; a teardown of
        the transport (CancelledError from the SDK) is noted and passed on; anything else is a bug."""
        started = time.monotonic()
        outcome = "ok"
        try:
            with anyio.fail_after(self.bound_s(rnd, plan) + HANG_GUARD_S):
                if plan.cancel is None:
                    result = await client.call_tool(plan.tool, plan.arguments())
                else:
                    result = None
                    error: Exception | None = None
                    with anyio.CancelScope() as scope:
                        async with anyio.create_task_group() as tg:
                            tg.start_soon(self._give_up, plan, scope)
                            try:
                                result = await client.call_tool(plan.tool, plan.arguments())
                            except Exception as exc:  # raised as is below, not in a task group's
                                error = exc
                            tg.cancel_scope.cancel()
                    if error is not None:
                        raise error
                    if scope.cancelled_caught:
                        outcome = "cancelled"
                if result is not None and is_error(result):
                    outcome = "tool-error"
        except UnknownEffectError:
            outcome = "UnknownEffectError"
        except McpError:
            outcome = "MCPError"
        except TimeoutError:
            outcome = "hang"
            self.violation(
                rnd, f"the call did not settle within {self.bound_s(rnd, plan) + HANG_GUARD_S:.1f} s", plan
            )
        except anyio.get_cancelled_exc_class():
            outcome = "torn-down"
            raise
        except Exception as exc:
            outcome = f"unexpected {type(exc).__name__}"
            self.violation(rnd, f"the caller got {type(exc).__name__}: {exc!r}", plan)
        finally:
            results[plan.index] = CallResult(outcome, time.monotonic() - started)
            self.stats.note(outcome)

    async def _give_up(self, plan: CallPlan, scope: anyio.CancelScope) -> None:
        """The caller gives up: 0.4 s in (in-wait), or once the server holds the POST (at-server)."""
        if plan.cancel == "at-server":
            arrived = self.rule.arrived(plan)
            with anyio.move_on_after(5.0):
                while not arrived.is_set():
                    await anyio.sleep(0.005)
            await anyio.sleep(0.05)
        else:
            await anyio.sleep(IN_WAIT_CANCEL_S)
        scope.cancel()

    async def run(self, rnd: Round) -> None:
        server = self.server
        server.faults.clear()
        self.rule = ScheduleRule(rnd.plans)
        server.faults.set_rule(self.rule)
        self.instrument(
            servers=rnd.servers(self.url),
            max_attempts=rnd.max_attempts,
            max_wait_ms=rnd.max_wait_ms,
            retry_budget=rnd.retry_budget,
        )
        if rnd.sequential:
            await self._run_sequential(rnd, list(rnd.plans))
        elif REFUSAL_TEARS_DOWN:
            # mcp 1.x: a refusal handed to the SDK tears the session down under every call on it. The
            # calls the server may refuse run one at a time (as above), the others together.
            await self._run_client(rnd, [p for p in rnd.plans if not p.may_be_refused])
            await self._run_sequential(rnd, [p for p in rnd.plans if p.may_be_refused])
        else:
            await self._run_client(rnd, list(rnd.plans))
        for _, _, _, name in server.faults.applied():
            self.stats.faults[name] = self.stats.faults.get(name, 0) + 1
        server.faults.set_rule(None)

    def _arm(self, plans: Sequence[CallPlan]) -> None:
        for plan in plans:
            if plan.proxy_cut is not None:
                name = f"proxy cut {plan.proxy_cut}"
                self.stats.faults[name] = self.stats.faults.get(name, 0) + 1
                self.proxy.cut_next(forward_request=plan.proxy_cut == "after", match=plan.marker)

    async def _run_client(self, rnd: Round, plans: list[CallPlan]) -> None:
        """Every plan on one Client, `concurrency` at a time; then the checks."""
        self._begin_client()
        self._arm(plans)
        results: dict[int, CallResult] = {}
        limiter = anyio.CapacityLimiter(rnd.concurrency)

        async def one(plan: CallPlan) -> None:
            async with limiter:
                await self.call(client, rnd, plan, results)

        try:
            async with Client(self.url, mode=rnd.mode) as client, anyio.create_task_group() as tg:
                for plan in plans:
                    tg.start_soon(one, plan)
        except BaseExceptionGroup as group:
            self.violation(rnd, f"the session was torn down: {group!r}")
        await self._check_client(rnd, plans, results)

    async def _run_sequential(self, rnd: Round, plans: list[CallPlan]) -> None:
        """Compatibility with drops (and, on mcp 1.x, the calls the server may refuse): one call at a
        time; a teardown ends that Client (checked), and the next calls go on a new one."""
        remaining = list(plans)
        while remaining:
            self._begin_client()
            done: list[CallPlan] = []
            results: dict[int, CallResult] = {}
            try:
                async with Client(self.url, mode=rnd.mode) as client:
                    while remaining:
                        plan = remaining[0]
                        self._arm([plan])
                        done.append(remaining.pop(0))
                        await self.call(client, rnd, plan, results)
            except BaseExceptionGroup as group:
                found = leaves(group)
                refused = done[-1].may_be_refused if done else False
                allowed = TEARDOWN_ERRORS + (REFUSAL_TEARDOWN_ERRORS if refused else ())
                if not found or not all(isinstance(e, allowed) for e in found):
                    self.violation(rnd, f"a teardown with more than {allowed}: {group!r}")
                self.stats.teardowns += 1
                if any(isinstance(e, REFUSAL_TEARDOWN_ERRORS) for e in found):
                    self.stats.refusal_teardowns += 1
                if done and results.get(done[-1].index, CallResult("", 0)).outcome != "torn-down":
                    self.violation(rnd, "the transport was torn down after the call returned", done[-1])
            await self._check_client(rnd, done, results)

    def _begin_client(self) -> None:
        # Request ids start again on each connection: the server's counts and the records are
        # read per Client.
        self.server.counters.reset()
        self.telemetry.exporter.clear()

    async def _check_client(self, rnd: Round, plans: list[CallPlan], results: dict[int, CallResult]) -> None:
        stats = self.stats
        stats.calls += len(plans)
        counters = self.server.counters
        # Let the server finish what it still runs (a stall, an answer the proxy drains).
        stall = max([p.stall_s for p in plans] + [IN_WAIT_CANCEL_S if p.cancel else 0.0 for p in plans])
        await anyio.sleep(0.15 + stall)
        # The Client closed: no socket of ours to the proxy is left open. (The proxy itself may
        # still drain the server's side of a connection it cut after the answer began, until the
        # server's keep-alive closes it; the run's end waits for those: proxy.active == 0.)
        port = self.proxy.port
        if not await settled(lambda: client_connections(port) == 0, timeout=2.0):
            self.violation(rnd, f"{client_connections(port)} client connections open after the Client closed")
        if self.proxy.armed:
            # (Markers are unique in the whole run: a leftover cannot land on a later call.)
            self.violation(rnd, f"{self.proxy.armed} proxy cuts were never claimed by their call")

        # POSTs are counted per (session, request id): legacy calls carry the Client's one session
        # id, 2026-07-28 calls none (hence one Client per count).
        sessions = {p.session_id for p in counters.post_log() if p.method == "tools/call"}
        if len(sessions) > 1 or (sessions and (None in sessions) != (rnd.mode == "2026-07-28")):
            self.violation(rnd, f"{len(sessions)} sessions on one Client ({rnd.mode})")
        session = next(iter(sessions), None)
        by_key = {plan_key(p): p for p in plans}
        plan_of: dict[str, CallPlan] = {}
        for post in counters.post_log():
            if post.method != "tools/call" or post.request_id is None:
                continue
            params = json.loads(post.body).get("params", {})
            plan = by_key.get(key_of(post.tool, params.get("arguments")))
            if plan is None:
                self.violation(rnd, f"a tools/call POST of no planned call: {post.tool}")
                continue
            if plan_of.setdefault(post.request_id, plan) is not plan:
                self.violation(rnd, f"request id {post.request_id} carried two calls", plan)

        found = records(self.telemetry)
        if len(found) != len(plans):
            self.violation(rnd, f"{len(found)} records for {len(plans)} calls")
        seen: set[int] = set()
        unmapped_sent_one = 0
        unmapped: list[str] = []
        for record in found:
            rid = str(record[t.JSONRPC_REQUEST_ID])
            sent = int(record[t.SENT])
            posts = counters.posts(rid, session)
            stats.attempts += sent
            if sent > rnd.max_attempts:
                self.violation(rnd, f"record {rid}: sent {sent} > max_attempts")
            if sum(record[t.ATTEMPTS_WAIT_MS]) > rnd.max_wait_ms:
                self.violation(rnd, f"record {rid}: waited {record[t.ATTEMPTS_WAIT_MS]} ms > the cap")
            plan = plan_of.get(rid)
            if plan is None:
                # No POST of it reached the server: never sent, or its only attempt was cut by the
                # proxy before the server saw it (counted below).
                if posts != 0 or sent > 1:
                    self.violation(rnd, f"record {rid} of no known call: sent {sent}, server POSTs {posts}")
                unmapped_sent_one += sent
                unmapped.append(
                    f"{rid} {record[t.GEN_AI_TOOL_NAME]} sent {sent} effect {record[t.EFFECT]} "
                    f"failures {record[t.ATTEMPTS_FAILURE]}"
                )
                continue
            if plan.index in seen:
                self.violation(rnd, f"two records for one call (request id {rid})", plan)
            seen.add(plan.index)
            cut_before = 1 if plan.proxy_cut == "before" else 0
            if sent != posts + cut_before:
                self.violation(
                    rnd, f"record {rid}: sent {sent}, server POSTs {posts} (+{cut_before} cut before)", plan
                )
            if plan.changes_without_key and sent > 1:
                self.violation(rnd, f"record {rid}: a changes tool without a key was sent {sent} times", plan)
            self._check_outcome(rnd, plan, record, results.get(plan.index))
        unseen_cut_before = [p for p in plans if p.proxy_cut == "before" and p.index not in seen]
        if unmapped_sent_one != len(unseen_cut_before):
            unseen = [(p, results.get(p.index)) for p in plans if p.index not in seen]
            self.violation(
                rnd,
                f"{unmapped_sent_one} records sent once with no POST at the server, "
                f"{len(unseen_cut_before)} calls cut before the server; records {unmapped}; "
                f"calls with no POST {unseen}",
            )

        # The guard, on the server's own counts: a changes tool without a key runs (and is
        # received) at most once per call; with its key, the server runs it at most once.
        for rid, plan in plan_of.items():
            executions = counters.executions_for(rid, plan.tool)
            posts = counters.posts(rid, session)
            if plan.changes_without_key and (posts > 1 or executions > 1):
                self.violation(rnd, f"request {rid}: {posts} POSTs, {executions} executions", plan)
            if plan.kind == "charge-keyed" and executions > 1:
                self.violation(rnd, f"request {rid}: charged {executions} times with one key", plan)
        for plan in plans:
            result = results.get(plan.index)
            if result is None:
                self.violation(rnd, "the call never ran", plan)
                continue
            if plan.cancel is None:  # a figure for the summary, not a verdict
                over = result.duration_s - (rnd.max_wait_ms / 1000 + plan.stall_s)
                self.stats.longest_over_s = max(self.stats.longest_over_s, over)

    def _check_outcome(
        self, rnd: Round, plan: CallPlan, record: dict[str, Any], result: CallResult | None
    ) -> None:
        if result is None:
            return
        verdict, may_have_run = record[t.VERDICT], record[t.MAY_HAVE_RUN]
        expected: dict[str, tuple[set[str], bool]] = {
            "ok": ({"completed"}, False),
            "tool-error": ({"tool-error"}, False),
            "UnknownEffectError": ({"failed"}, True),
            "MCPError": ({"failed"}, False),
            "cancelled": ({"failed"}, False),
            "torn-down": ({"failed"}, False),
        }
        if result.outcome not in expected:
            return  # already a violation
        verdicts, must_have_run = expected[result.outcome]
        if verdict not in verdicts or may_have_run is not must_have_run:
            self.violation(
                rnd,
                f"the caller saw {result.outcome}; the record says {verdict}, may_have_run {may_have_run}",
                plan,
            )
        if result.outcome == "UnknownEffectError" and rnd.policy != "app-authorized":
            self.violation(rnd, "UnknownEffectError under compatibility", plan)
        if record[t.POLICY] != rnd.policy or record[t.ENDPOINT] != f"round-{rnd.number}":
            self.violation(rnd, f"record names {record[t.POLICY]} at {record[t.ENDPOINT]}", plan)


async def run_schedules(telemetry: Telemetry, instrument: Any, seed: int, rounds: Sequence[Round]) -> Stats:
    async with no_leaks(f"seed {seed}"):
        with running_server("streamable") as server, TcpProxy(server.port) as proxy:
            rig = Rig(server, proxy, telemetry, instrument, seed)
            for rnd in rounds:
                await rig.run(rnd)
            # Every proxied connection closed: the proxy's drains end with the server's keep-alive.
            assert await settled(lambda: proxy.active == 0, timeout=10.0), f"{proxy.active} still open"
    return rig.stats


def report(seed: int, stats: Stats, started: float, rounds: Sequence[Round]) -> str:
    return (
        f"seed {seed} ({SEED_ENV}={seed} replays it): {stats.calls} calls in {len(rounds)} rounds, "
        f"{stats.attempts} attempts, {stats.teardowns} teardowns ({stats.refusal_teardowns} by a refusal), "
        f"{time.monotonic() - started:.1f} s; outcomes {dict(sorted(stats.outcomes.items()))}; "
        f"faults {dict(sorted(stats.faults.items()))}; the slowest call took "
        f"{stats.longest_over_s:+.2f} s beyond its wait cap and stalls"
    )


async def schedules_keep_every_invariant(telemetry: Telemetry, instrument: Any, long_run: bool) -> None:
    seed = seed_for(long_run)
    total = LONG_CALLS if long_run else QUICK_CALLS
    rounds = draw_rounds(seed, total, per_round=80 if long_run else 40, concurrency=16 if long_run else 12)
    print(f"reliability schedule: seed {seed}, {total} calls, {len(rounds)} rounds")
    started = time.monotonic()
    stats = await run_schedules(telemetry, instrument, seed, rounds)
    summary = report(seed, stats, started, rounds)
    print(summary)
    assert stats.calls == total, summary
    shown = "\n".join(stats.violations[:25])
    assert not stats.violations, f"{len(stats.violations)} violations; {summary}\n{shown}"
    # The schedule exercised what it claims to.
    assert stats.outcomes.get("ok", 0) > total // 4, summary
    assert stats.outcomes.get("UnknownEffectError", 0) > 0, summary
    if REFUSAL_TEARS_DOWN:  # mcp 1.x: a refusal reaches the caller as its session's teardown
        assert stats.refusal_teardowns > 0, summary
    else:
        assert stats.outcomes.get("MCPError", 0) > 0, summary
    assert stats.outcomes.get("cancelled", 0) > 0, summary
    assert stats.teardowns > 0, summary
    assert stats.attempts > stats.calls, summary  # repeats happened
    every_fault = {
        "Throttle",
        "Status",
        "StallThenPass",
        "DropBeforeExecution",
        "DropAfterExecution",
        "DropMidBody",
        "SseWithoutAnswer",
        "proxy cut before",
        "proxy cut after",
    }
    assert every_fault <= set(stats.faults), summary


def seed_for(long_run: bool) -> int:
    given = os.environ.get(SEED_ENV, "").strip()
    if given:
        return int(given)
    return random.SystemRandom().randrange(1, 2**31) if long_run else QUICK_SEED
