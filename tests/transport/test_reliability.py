"""The reliability suite: what the plugin promises, under randomized faults and abuse.

- Randomized fault schedules over the real server and a real TCP proxy, across both policies and
  the protocol eras the installed mcp line speaks (harness/client.py ERAS), tools with and without
  `changes` and keys. Ground truth is the server's
  (POSTs and executions per request id); the invariants are checked for every call.
- The OTLP exporter down (refusing, hanging): the app's calls are unaffected.
- 100 instrument/uninstrument cycles while calls run: no crash, no leftover patch.
(Fuzzed declarations and environment values: test_fuzz_config.py.)

Both mcp lines run it (scripts/test-lines: 1.30). Where the SDKs differ, the suite says so once:
what tears a session down (REFUSAL_TEARS_DOWN: on 1.x any 4xx/5xx the SDK is handed), and the
error class, client and HTTP library (harness/client.py). The invariants on the plugin are the same.

Seeds: every schedule is drawn from one seed, printed by the test (shown with a failure) and
written into every violation. `OTEL_MCP_REPLAY_RELIABILITY_SEED=<int>` replays a run. The quick
run (CI) uses a fixed seed; `--long` (at least 2,000 calls) draws a fresh one unless told.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import random
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
import mcp.client.sse
import mcp.client.stdio
import mcp.client.streamable_http
import pytest
from mcp import ClientSession
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from tests.support.calls import declared
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
from harness.receiver import OtlpReceiver
from harness.sdk import LINE
from harness.server import ServerHandle, running_server
from otel_mcp_replay import McpReplayInstrumentor, UnknownEffectError
from otel_mcp_replay import telemetry as t
from otel_mcp_replay.patches.sse import SseStream

if sys.version_info < (3, 11):  # pragma: no cover - Python 3.10
    from exceptiongroup import BaseExceptionGroup

pytestmark = pytest.mark.anyio

# The originals, taken at import (collection), before any test instruments anything: every function
# the plugin wraps on the installed line (instrumentor._seams), and the transports' entry points.
ORIGINALS: dict[str, tuple[object, str, object]] = {
    f"{http.__name__}.AsyncClient.send": (http.AsyncClient, "send", http.AsyncClient.send),
    "ClientSession.call_tool": (ClientSession, "call_tool", ClientSession.call_tool),
    "mcp.client.sse.sse_client": (mcp.client.sse, "sse_client", mcp.client.sse.sse_client),
    "mcp.client.stdio.stdio_client": (mcp.client.stdio, "stdio_client", mcp.client.stdio.stdio_client),
}
if LINE == 2:
    import mcp.client.client

    ORIGINALS["mcp.client.client.stdio_client"] = (
        mcp.client.client,
        "stdio_client",
        getattr(mcp.client.client, "stdio_client"),  # noqa: B009 - not in its __all__
    )
    from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher

    ORIGINALS["JSONRPCDispatcher.notify"] = (JSONRPCDispatcher, "notify", JSONRPCDispatcher.notify)
else:  # 1.x: the call is carried to the task that POSTs it (patches/carrier.py)
    ORIGINALS["ClientSession.__init__"] = (ClientSession, "__init__", ClientSession.__init__)
    _transport = mcp.client.streamable_http.StreamableHTTPTransport
    ORIGINALS["StreamableHTTPTransport.post_writer"] = (_transport, "post_writer", _transport.post_writer)

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
FD_SLACK = 4

Policy = Literal["compatibility", "app-authorized"]
Mode = Literal["legacy", "2026-07-28"]
Kind = Literal["search", "charge-keyed", "charge", "send_email"]
KINDS: tuple[Kind, ...] = ("search", "charge-keyed", "charge", "send_email")
FAILURE_KINDS = ("throttle", "network")


# ----------------------------------------------------------------------------------------------
# Leak probes.


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def client_connections(port: int) -> int:
    """Open client sockets to 127.0.0.1:`port` (ESTABLISHED or CLOSE_WAIT: still held by a client)."""
    count = 0
    with open("/proc/net/tcp", encoding="ascii") as table:
        next(table)
        for line in table:
            fields = line.split()
            remote, state = fields[2], fields[3]
            host, _, remote_port = remote.partition(":")
            if host == "0100007F" and int(remote_port, 16) == port and state in ("01", "08"):
                count += 1
    return count


def task_names() -> list[str]:
    return sorted(repr(task.get_coro()) for task in asyncio.all_tasks())


async def settled(predicate: Callable[[], bool], timeout: float = 3.0) -> bool:
    """Poll `predicate` until it holds or `timeout` passes (collecting garbage between polls)."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() > deadline:
            return False
        gc.collect()
        await anyio.sleep(0.05)


@contextlib.asynccontextmanager
async def no_leaks(what: str) -> Any:
    """Around a block that starts and stops its own servers and clients: afterwards the process
    holds no more file descriptors (small slack), asyncio tasks or SSE waiters than before."""
    gc.collect()
    fds_before = open_fds()
    tasks_before = len(asyncio.all_tasks())
    yield
    assert await settled(lambda: len(asyncio.all_tasks()) <= tasks_before), (
        f"{what}: asyncio tasks left behind: {task_names()}"
    )
    assert await settled(lambda: open_fds() <= fds_before + FD_SLACK), (
        f"{what}: file descriptors leaked: {fds_before} before, {open_fds()} after"
    )
    # Every legacy-SSE connection still in memory (garbage not yet collected included) holds no
    # call awaiting its answer.
    waiting = sum(len(o.waiting) for o in gc.get_objects() if type(o) is SseStream)
    assert not waiting, f"{what}: the SSE waiters hold {waiting} entries"


def seed_for(long_run: bool) -> int:
    given = os.environ.get(SEED_ENV, "").strip()
    if given:
        return int(given)
    return random.SystemRandom().randrange(1, 2**31) if long_run else QUICK_SEED


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
                leaves = _leaves(group)
                refused = done[-1].may_be_refused if done else False
                allowed = TEARDOWN_ERRORS + (REFUSAL_TEARDOWN_ERRORS if refused else ())
                if not leaves or not all(isinstance(e, allowed) for e in leaves):
                    self.violation(rnd, f"a teardown with more than {allowed}: {group!r}")
                self.stats.teardowns += 1
                if any(isinstance(e, REFUSAL_TEARDOWN_ERRORS) for e in leaves):
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


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    out: list[BaseException] = []
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            out.extend(_leaves(exc))
        else:
            out.append(exc)
    return out


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


async def _schedules(telemetry: Telemetry, instrument: Any, long_run: bool) -> None:
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


async def test_randomized_fault_schedules_keep_every_invariant(telemetry: Telemetry, instrument: Any) -> None:
    """Quick size (CI): ~240 calls, every policy, era, tool and fault kind; a fixed seed."""
    await _schedules(telemetry, instrument, long_run=False)


@pytest.mark.timeout(1800)
async def test_randomized_fault_schedules_long_run(
    telemetry: Telemetry, instrument: Any, request: pytest.FixtureRequest
) -> None:
    """`--long`: at least 2,000 calls from a fresh seed (or OTEL_MCP_REPLAY_RELIABILITY_SEED)."""
    if not request.config.getoption("--long"):
        pytest.skip("the long reliability run needs --long")
    await _schedules(telemetry, instrument, long_run=True)


# ----------------------------------------------------------------------------------------------
# The exporter down: the app's calls do not notice.


class WatchedExporter(OTLPSpanExporter):
    """The real OTLP/HTTP exporter, noting the threads it exported on and whether an export is
    under way (so that a test can see a call end while an export is still held up)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.threads: set[int] = set()
        self.exporting = False
        self.held = False  # an export is waiting for `release`, held up by the test
        # Cleared by the test to hold the next export up while calls run: that an export is under
        # way as they end is then a certainty, not a race with how long the endpoint takes.
        self.release = threading.Event()
        self.release.set()

    def export(self, spans: Any) -> Any:
        self.threads.add(threading.get_ident())
        self.exporting = True
        try:
            if not self.release.is_set():
                self.held = True
                self.release.wait(30)  # a guard: the test releases it
                self.held = False
            return super().export(spans)
        finally:
            self.exporting = False


async def _timed_calls(
    client: Any, server: ServerHandle, n: int, tag: str, exporter: WatchedExporter
) -> tuple[list[float], int]:
    """`n` calls of a tool declared to repeat a 429, every other one refused once first: their
    durations (a figure to print, never a verdict), and how many ended while an export was under way."""
    durations: list[float] = []
    during_an_export = 0
    for i in range(n):
        if i % 2:
            server.faults.add("search", Throttle("0"))
        started = time.monotonic()
        result = await client.call_tool("search", {"query": f"{tag}{i}"})
        durations.append(time.monotonic() - started)
        during_an_export += exporter.exporting
        assert not is_error(result)
    return durations, during_an_export


@pytest.mark.parametrize("down", ["refuse", "hang"])
async def test_the_exporter_down_leaves_the_calls_unaffected(down: Literal["refuse", "hang"]) -> None:
    """A real BatchSpanProcessor + OTLP/HTTP exporter (timeout 1 s) to an endpoint that refuses
    (503) or hangs: no call waits on an export (none runs on the calls' thread, and calls end while
    an export is held up), and the provider's shutdown ends. Durations are printed, not judged."""
    n = 40
    async with no_leaks(f"exporter {down}"):
        with running_server("streamable") as server, OtlpReceiver() as receiver:
            provider = TracerProvider()
            exporter = WatchedExporter(endpoint=receiver.traces_endpoint, timeout=1)
            provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=50))
            instrumentor = McpReplayInstrumentor()
            instrumentor.instrument(
                tracer_provider=provider,
                servers=declared(server, {"search": {"on": ["throttle"]}}),
            )
            try:
                async with Client(server.url) as client:
                    await _timed_calls(client, server, 5, "warm", exporter)
                    up, _ = await _timed_calls(client, server, n, "up", exporter)
                    # The pipeline works while the endpoint is up: the records reach it.
                    delivered = await anyio.to_thread.run_sync(
                        lambda: receiver.wait_for(
                            lambda spans: (
                                sum(1 for s in spans for e in s["events"] if e["name"] == t.RECORD_EVENT) >= n
                            ),
                            10.0,
                        )
                    )
                    assert delivered, "the records never reached the receiver while it was up"
                    receiver.set_mode(down, hang_seconds=2.0)
                    # The next export is held up until the calls below have ended: a call that
                    # waited on an export would never end (the test's own timeout would end it).
                    exporter.release.clear()
                    await _timed_calls(client, server, 1, "first", exporter)
                    assert await settled(lambda: exporter.held, timeout=10.0), "no export was held up"
                    broken, ended_during_an_export = await _timed_calls(client, server, n, "down", exporter)
                    exporter.release.set()
                    # Spans keep coming, and the exporter keeps failing to hand them over.
                    await _timed_calls(client, server, 5, "more", exporter)
                    tried = await settled(lambda: receiver.rejected > 0, timeout=10.0)
                    assert tried, "the exporter never reached the broken endpoint"
            finally:
                exporter.release.set()
                instrumentor.uninstrument()
                started = time.monotonic()
                await anyio.to_thread.run_sync(provider.shutdown)
                shutdown_s = time.monotonic() - started
    p50_up, p50_down = statistics.median(up), statistics.median(broken)
    summary = (
        f"exporter {down}: p50 {p50_up * 1000:.1f} ms up, {p50_down * 1000:.1f} ms down; "
        f"max {max(up) * 1000:.1f} / {max(broken) * 1000:.1f} ms; shutdown {shutdown_s:.2f} s"
    )
    print(summary)
    # Exports ran on the processor's worker only, never on the thread that made the calls, and
    # calls ended while an export was held up (by the test, at the broken endpoint): none waited on one.
    assert exporter.threads and threading.get_ident() not in exporter.threads, summary
    assert ended_during_an_export == n, summary
    assert shutdown_s < 60.0, summary  # a guard against a hang only (it takes about a second)


# ----------------------------------------------------------------------------------------------
# instrument()/uninstrument() while calls run.


async def run_cycles(server: ServerHandle, telemetry: Telemetry, mode: str, cycles: int) -> dict[str, int]:
    """Calls run all along in a task group on one Client (search, and send_email: a changes tool
    without a key; the server refusing some with 429 or 503) while the main task turns the plugin
    on and off `cycles` times. Any exception but an MCPError fails; the outcomes are returned.

    mcp 1.x tears a session down under all its calls when it is handed a refusal (REFUSAL_TEARS_DOWN):
    there each worker calls on a Client of its own, opened again after such a teardown (counted as
    `torn-down`), so that a refusal costs one call, as its McpError does on 2.x."""
    seed = seed_for(long_run=False)
    rng = random.Random(seed)
    print(f"instrument cycles: seed {seed}")
    faults: list[Fault | None] = [None, None, Throttle("0"), Status(503)]
    server.faults.set_rule(lambda ctx: rng.choice(faults) if ctx.method == "tools/call" else None)
    servers = {
        server.url: {
            "policy": "app-authorized",
            "tools": {"search": {"on": ["throttle"]}, "send_email": {"changes": True, "on": ["throttle"]}},
        }
    }
    instrumentor = McpReplayInstrumentor()
    outcomes: dict[str, int] = {}
    async with no_leaks(f"instrument cycles, seed {seed}"), Client(server.url, mode=mode) as client:
        stop = anyio.Event()

        async def worker(w: int) -> None:
            i = 0

            async def calls(on: Any) -> None:
                nonlocal i
                while not stop.is_set():
                    i += 1
                    tool, arguments = "search", {"query": f"w{w}-{i}"}
                    if i % 3 == 0:
                        tool, arguments = "send_email", {"to": f"w{w}-{i}@example.test", "body": "x"}
                    try:
                        result = await on.call_tool(tool, arguments)
                        outcome = "tool-error" if is_error(result) else "ok"
                    except McpError as exc:  # the faults' own errors; anything else fails the test
                        outcome = type(exc).__name__
                    outcomes[outcome] = outcomes.get(outcome, 0) + 1

            if not REFUSAL_TEARS_DOWN:
                await calls(client)
                return
            while not stop.is_set():
                try:
                    async with Client(server.url, mode=mode) as own:
                        await calls(own)
                except BaseExceptionGroup as group:
                    if not all(isinstance(e, REFUSAL_TEARDOWN_ERRORS) for e in _leaves(group)):
                        raise
                    outcomes["torn-down"] = outcomes.get("torn-down", 0) + 1

        try:
            async with anyio.create_task_group() as tg:
                for w in range(6):
                    tg.start_soon(worker, w)
                try:
                    for _ in range(cycles):
                        instrumentor.instrument(
                            tracer_provider=telemetry.tracer_provider,
                            meter_provider=telemetry.meter_provider,
                            servers=servers,
                        )
                        await anyio.sleep(rng.uniform(0, 0.012))
                        instrumentor.uninstrument()
                        await anyio.sleep(rng.uniform(0, 0.006))
                finally:
                    stop.set()
        finally:
            if instrumentor.is_instrumented_by_opentelemetry:
                instrumentor.uninstrument()

        for name, (owner, attr, original) in ORIGINALS.items():
            assert getattr(owner, attr) is original, f"{name} is still patched"
        assert McpReplayInstrumentor().runtime is None
        server.faults.clear()
        telemetry.exporter.clear()
        result = await client.call_tool("search", {"query": "after"})
        assert not is_error(result)
        assert records(telemetry) == []  # off means off: nothing recorded
    print(f"instrument cycles ({mode}): outcomes {outcomes}")
    return outcomes


def changes_tool_posts(server: ServerHandle, tool: str) -> dict[tuple[str | None, str], int]:
    """POSTs per (session, request id) of `tool`'s calls (request ids are unique on one Client)."""
    counts: dict[tuple[str | None, str], int] = {}
    for post in server.counters.post_log():
        if post.tool == tool and post.request_id is not None:
            key = (post.session_id, post.request_id)
            counts[key] = counts.get(key, 0) + 1
    return counts


async def test_a_hundred_instrument_uninstrument_cycles_while_calls_run(
    server: ServerHandle, telemetry: Telemetry, mode: str
) -> None:
    """No crash and no exception but the faults' MCPErrors while the plugin is turned on and off
    100 times under running calls; afterwards every patched function is its original (`is`), the
    plugin holds no runtime, and calls still work and record nothing."""
    outcomes = await run_cycles(server, telemetry, mode, 100)
    assert outcomes.get("ok", 0) > 20, outcomes
    # mcp 1.x: a refusal the SDK is handed tears the session down instead of raising McpError.
    assert set(outcomes) <= {"ok", "torn-down" if REFUSAL_TEARS_DOWN else McpError.__name__}, outcomes
    # The guard held whatever the plugin's state when a call began and when it was sent (a call
    # begun while it was off and sent once it was on included).
    sent = changes_tool_posts(server, "send_email")
    assert len(sent) > 20, sent
    assert max(sent.values()) == 1, {rid: n for rid, n in sent.items() if n > 1}
