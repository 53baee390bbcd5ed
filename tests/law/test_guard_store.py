"""The repeat guard across processes and restarts: a shared store on a real Redis server.

Two agent processes (harness/guard_agent.py, configured by the environment alone) call one real
MCP server whose `charge` is cut after it ran; the server counts executions, Redis counts the
commands it ran. A store that lost its keys (a flush, a restart without persistence, an eviction, a
failover) never clears what a process armed: only a clear written after the arm (an identical call
completed) or the window's end does. A store that stops answering leaves each call to the agent's
own guard, told once; a store refusing the credential, a bad URL or a missing secret is an ERROR
naming the variable, never its value, and the app runs. Redis is started here (scripts/redis-server
installs it).
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import pytest
from tests.support.guard_agents import ANSWERING_BOUND_MS, SECRET, Agent, declared
from tests.support.telemetry import Telemetry, records

from harness.client import Client
from harness.faults import DropAfterExecution, UnstructuredResult
from harness.guard_agent import call_once
from harness.redis_server import RedisServer, redis_binary
from harness.server import ServerHandle
from otel_mcp_replay import environment_variables as ev
from otel_mcp_replay import repeat_confirmed
from otel_mcp_replay import telemetry as t
from otel_mcp_replay.guard_store import CLEARED, PREFIX

PASSWORD = "hunter2-redis-password"
ORDER = {"amount": 7}
# Where the test stops the store: each operation runs into it while the store is paused.
OUTAGE_BOUND_MS = 400

pytestmark = pytest.mark.timeout(240)


def _need_redis() -> None:
    if redis_binary() is None:
        message = "redis-server is not installed: run scripts/redis-server (./scripts/test does)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)  # in CI the project's own scripts must have installed it
        pytest.skip(message)


@pytest.fixture
def redis() -> Iterator[RedisServer]:
    _need_redis()
    with RedisServer() as server:
        yield server


@pytest.fixture
def redis_with_password() -> Iterator[RedisServer]:
    _need_redis()
    with RedisServer(password=PASSWORD) as server:
        yield server


def guard_keys(redis: RedisServer) -> int:
    return redis.count("DBSIZE")


def with_store(server: ServerHandle, url: str, bound_ms: int) -> dict[str, Any]:
    """The settings of an app that declares `server` and shares its guard through the store at `url`."""
    return {
        "servers": declared(server),
        "repeat_guard_store": url,
        "repeat_guard_secret": SECRET,
        "repeat_guard_store_timeout_ms": bound_ms,
    }


def armed_keys(redis: RedisServer) -> list[str]:
    """The keys that say "armed" (what a process arms them with)."""
    held = redis.keys()
    return [key for key in held if redis.command("GET", key) == b"1"]


def cleared_keys(redis: RedisServer) -> list[str]:
    """The keys a completed call wrote its clear to (a token of its own, never its arguments)."""
    held = redis.keys()
    return [key for key in held if redis.command("GET", key).startswith(CLEARED.encode())]


def evict_every_key(redis: RedisServer) -> None:
    """A real eviction: memory capped below what the server uses, so the next write evicts every
    key (and is then refused for want of memory), and the cap lifted again."""
    redis.command("CONFIG", "SET", "maxmemory-policy", "allkeys-random")
    redis.command("CONFIG", "SET", "maxmemory", "1")
    redis.command("SET", "otel-mcp-replay-test:filler", "x")
    redis.command("CONFIG", "SET", "maxmemory", "0")


def lose_every_key(redis: RedisServer, how: str) -> None:
    """The store loses what it held, as stores do."""
    if how == "flush":
        redis.command("FLUSHALL")
    elif how == "restart":  # without persistence: back on the same port, empty
        redis.stop()
        redis.start()
    else:
        evict_every_key(redis)
    assert redis.keys() == []


def store_commands(redis: RedisServer) -> dict[str, int]:
    """The commands Redis ran since CONFIG RESETSTAT, but the test's own."""
    return {name: n for name, n in redis.command_calls().items() if name not in ("config|resetstat", "info")}


# -- two processes, one guard ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("backend_a", "backend_b"), [("asyncio", "asyncio"), ("trio", "trio"), ("asyncio", "trio")]
)
def test_a_call_cut_in_one_process_is_refused_in_another_and_after_a_restart_until_one_completes(
    mcp_server: ServerHandle, redis: RedisServer, agents: Callable[..., Agent], backend_a: str, backend_b: str
) -> None:
    a = agents(mcp_server, redis.url, backend_a)
    b = agents(mcp_server, redis.url, backend_b)
    mcp_server.faults.add("charge", DropAfterExecution())
    assert a.call(ORDER) == "UnknownEffectError"
    assert mcp_server.counters.executions("charge") == 1
    (key,) = redis.keys()  # one keyed hash, under the prefix, with the window as its TTL
    digest = key.removeprefix(PREFIX)
    assert key.startswith(PREFIX) and re.fullmatch("[0-9a-f]{64}", digest)  # a SHA-256, in hex
    assert redis.command("GET", key) == b"1"  # nothing of the call's arguments is stored
    assert 590 <= redis.count("TTL", key) <= 600
    assert b.call(dict(ORDER)) == "RepeatRefusedError"  # B never saw A's call
    assert mcp_server.counters.executions("charge") == 1
    assert mcp_server.counters.tool_posts("charge") == 1  # the refusal sent nothing

    a.stop()  # the process restarted within the window
    a = agents(mcp_server, redis.url, backend_a)
    assert a.call(ORDER) == "RepeatRefusedError"
    assert mcp_server.counters.executions("charge") == 1

    assert b.call(ORDER, confirmed=True) == "completed"  # B checked, and repeats on purpose
    assert mcp_server.counters.executions("charge") == 2
    # The completed call cleared it for every process: a fresh clear in its place, for the window.
    assert armed_keys(redis) == [] and cleared_keys(redis) == [key]
    assert 590 <= redis.count("TTL", key) <= 600
    assert a.call(ORDER) == "completed"
    assert mcp_server.counters.executions("charge") == 3
    assert a.fallbacks() == {} and b.fallbacks() == {}  # every store operation answered in time


def test_the_window_expires_by_the_stored_ttl(
    mcp_server: ServerHandle, redis: RedisServer, agents: Callable[..., Agent]
) -> None:
    """The configured window is the TTL the store holds, and when that TTL runs out the entry no
    longer arms the guard. No verdict waits on the window: the TTL is read back, then cut short in
    Redis and let run out, so a slow machine only lets it run out further."""
    window_s = 300  # not the default (600): the TTL read back can only come from this setting
    window = {ev.OTEL_PYTHON_MCP_REPLAY_REPEAT_GUARD_S: str(window_s)}
    a = agents(mcp_server, redis.url, "asyncio", **window)
    b = agents(mcp_server, redis.url, "trio", **window)
    mcp_server.faults.add("charge", DropAfterExecution())
    assert a.call(ORDER) == "UnknownEffectError"
    (key,) = redis.keys()
    # At most the window, and most of it left: the arm's call answered within the agents' hang
    # guard (60 s), so only a failed hang guard could leave less than half.
    assert window_s * 1000 // 2 < redis.count("PTTL", key) <= window_s * 1000
    assert b.call(ORDER) == "RepeatRefusedError"  # within the stored TTL: refused
    assert redis.command("GET", key) == b"1"  # still armed: nothing but the TTL ends it

    assert redis.count("PEXPIRE", key, "1") == 1  # the stored TTL cut to 1 ms: Redis expires it
    while redis.count("PTTL", key) != -2:  # -2: expired and gone (the test's timeout bounds this)
        time.sleep(0.01)
    assert guard_keys(redis) == 0
    assert b.call(ORDER) == "completed"  # the expired entry no longer arms the guard
    assert mcp_server.counters.executions("charge") == 2


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_store_that_stops_answering_leaves_calls_to_each_process_then_is_shared_again(
    mcp_server: ServerHandle, redis: RedisServer, agents: Callable[..., Agent], backend: str
) -> None:
    bound = {ev.OTEL_PYTHON_MCP_REPLAY_REPEAT_GUARD_STORE_TIMEOUT_MS: str(OUTAGE_BOUND_MS)}
    a = agents(mcp_server, redis.url, backend, **bound)
    b = agents(mcp_server, redis.url, backend, **bound)
    x, y, z, w, v = ({"amount": n} for n in (1, 2, 3, 4, 5))
    mcp_server.faults.add("charge", DropAfterExecution())
    assert a.call(x) == "UnknownEffectError"  # armed in the store

    redis.pause()  # accepts connections, answers nothing: every operation runs into its bound
    assert a.call(x) == "RepeatRefusedError"  # this process's own memory
    mcp_server.faults.add("charge", DropAfterExecution())
    assert a.call(y) == "UnknownEffectError"
    assert a.call(y) == "RepeatRefusedError"
    assert a.call(z) == "completed"  # calls go on
    assert mcp_server.counters.executions("charge") == 3
    assert a.fallbacks() == {("check", "timeout"): 4, ("arm", "timeout"): 1, ("clear", "timeout"): 1}

    redis.resume()
    assert b.call(x) == "RepeatRefusedError"  # shared again: B learns of A's call from the store
    assert a.call(y) == "RepeatRefusedError"  # armed here while the store was paused: still refused,
    assert b.call(y) == "RepeatRefusedError"  # and now shared

    redis.stop()  # refuses connections
    mcp_server.faults.add("charge", DropAfterExecution())
    assert a.call(w) == "UnknownEffectError"
    assert a.call(w) == "RepeatRefusedError"
    fallbacks = a.fallbacks()
    assert fallbacks[("arm", "unreachable")] == 1 and fallbacks[("check", "unreachable")] == 2

    redis.start()  # back, on the same port (empty: it persists nothing)
    assert a.call(w) == "RepeatRefusedError"  # armed while it was down: still refused, and shared
    assert b.call(w) == "RepeatRefusedError"
    mcp_server.faults.add("charge", DropAfterExecution())
    assert a.call(v) == "UnknownEffectError"
    assert b.call(v) == "RepeatRefusedError"  # shared again
    assert mcp_server.counters.executions("charge") == 5

    report = a.report()
    warnings = [message for level, message in report["logs"] if level == "WARNING"]
    # Each outage said once when it began, however many calls fell back: the pause, then (the store
    # having answered in between) the stop.
    assert len(warnings) == 2, warnings
    assert all(ev.OTEL_PYTHON_MCP_REPLAY_REPEAT_GUARD_STORE in warning for warning in warnings)
    assert "no answer within the bound of 400 ms" in warnings[0] and "failure=timeout" in warnings[0]
    assert "unreachable (ConnectionError)" in warnings[1] and "failure=unreachable" in warnings[1]
    assert not [message for level, message in report["logs"] if level == "ERROR"]
    assert str(redis.port) not in a.log.read_text() + json.dumps(report)  # nor the URL
    assert b.fallbacks() == {}


# -- a store that lost its keys: only positive evidence clears -------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("loss", ["flush", "restart", "eviction"])
async def test_a_store_that_lost_its_keys_never_clears_what_this_process_armed(
    server: ServerHandle, redis: RedisServer, telemetry: Telemetry, instrument: Any, loss: str
) -> None:
    """A cut `charge(7)`, the store loses its keys, `charge(7)` again in the same process: refused,
    as without a store. Then repeated on purpose, which clears it."""
    instrument(**with_store(server, redis.url, ANSWERING_BOUND_MS))
    server.faults.add("charge", DropAfterExecution())
    assert await call_once(server.url, "charge", ORDER) == "UnknownEffectError"
    assert server.counters.executions("charge") == 1 and len(armed_keys(redis)) == 1
    lose_every_key(redis, loss)
    assert await call_once(server.url, "charge", dict(ORDER)) == "RepeatRefusedError"
    assert server.counters.executions("charge") == 1  # the tool did not run a second time
    assert server.counters.tool_posts("charge") == 1  # nothing was sent
    assert len(armed_keys(redis)) == 1  # and the store is armed again from this process's memory
    assert await call_once(server.url, "charge", ORDER, confirmed=True) == "completed"  # on purpose
    assert await call_once(server.url, "charge", ORDER) == "completed"  # cleared by its completion
    assert server.counters.executions("charge") == 3
    cut, refused, confirmed, again = records(telemetry)
    assert (cut[t.MAY_HAVE_RUN], cut[t.EFFECT]) == (True, "unknown")
    assert (refused[t.VERDICT], refused[t.SENT], refused[t.EFFECT]) == ("failed", 0, "none")
    assert confirmed[t.VERDICT] == again[t.VERDICT] == "completed"
    declined = [s for s in telemetry.spans() if (s.attributes or {}).get(t.DECLINED) == "repeat-of-unknown"]
    assert len(declined) == 1


def test_a_key_the_store_lost_is_still_refused_by_the_process_that_armed_it(
    mcp_server: ServerHandle, redis: RedisServer, agents: Callable[..., Agent]
) -> None:
    """B armed `charge(7)`; the store evicts the key. B still refuses, and arms the store again, so
    A refuses too. Lost again before A asks, A cannot know: it never saw the call. A's call then
    completed: positive evidence, which clears B."""
    a = agents(mcp_server, redis.url, "asyncio")
    b = agents(mcp_server, redis.url, "trio")
    mcp_server.faults.add("charge", DropAfterExecution())
    assert b.call(ORDER) == "UnknownEffectError"
    assert mcp_server.counters.executions("charge") == 1
    evict_every_key(redis)
    assert redis.keys() == []
    assert b.call(ORDER) == "RepeatRefusedError"  # B remembers what it armed
    assert mcp_server.counters.executions("charge") == 1
    assert a.call(ORDER) == "RepeatRefusedError"  # B armed the store again: A learns of it
    assert mcp_server.counters.executions("charge") == 1

    lose_every_key(redis, "flush")
    assert a.call(ORDER) == "completed"  # A never saw the call: nothing tells it
    assert mcp_server.counters.executions("charge") == 2
    assert b.call(ORDER) == "completed"  # an identical call completed after B armed: cleared
    assert mcp_server.counters.executions("charge") == 3
    assert a.fallbacks() == {} and b.fallbacks() == {}


def test_a_clear_from_before_the_arm_is_no_evidence(
    mcp_server: ServerHandle, redis: RedisServer, agents: Callable[..., Agent]
) -> None:
    """A failover to a replica that never saw B's arm brings back the clear written before it
    (A's completed `charge(7)`): that is no completion after the arm, so B still refuses."""
    a = agents(mcp_server, redis.url, "asyncio")
    b = agents(mcp_server, redis.url, "asyncio")
    assert a.call(ORDER) == "completed"
    (key,) = cleared_keys(redis)
    before = redis.command("GET", key).decode()
    mcp_server.faults.add("charge", DropAfterExecution())
    assert b.call(ORDER) == "UnknownEffectError"
    assert armed_keys(redis) == [key]
    redis.command("SET", key, before, "EX", "600")  # what the stale replica holds
    assert b.call(ORDER) == "RepeatRefusedError"
    assert mcp_server.counters.executions("charge") == 2
    assert armed_keys(redis) == [key]  # armed again by B
    assert a.call(ORDER, confirmed=True) == "completed"  # a completion after the arm
    assert b.call(ORDER) == "completed"
    assert mcp_server.counters.executions("charge") == 4


def test_a_call_that_failed_after_its_result_came_back_is_refused_in_every_process(
    mcp_server: ServerHandle, redis: RedisServer, agents: Callable[..., Agent]
) -> None:
    """Its result came back without the structured content its output schema requires: the SDK's
    validation raised. It ran: the store is armed, and no process repeats it blindly."""
    a = agents(mcp_server, redis.url, "asyncio")
    b = agents(mcp_server, redis.url, "trio")
    mcp_server.faults.add("charge", UnstructuredResult())
    assert a.call(ORDER) == "RuntimeError"  # the SDK's own error
    assert mcp_server.counters.executions("charge") == 1
    assert len(armed_keys(redis)) == 1
    assert b.call(ORDER) == "RepeatRefusedError"
    assert a.call(ORDER) == "RepeatRefusedError"
    assert mcp_server.counters.executions("charge") == 1
    assert mcp_server.counters.tool_posts("charge") == 1


# -- what touches the store ----------------------------------------------------------------------


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.mark.anyio
async def test_only_a_call_the_guard_could_refuse_touches_the_store(
    server: ServerHandle, redis: RedisServer, telemetry: Telemetry, instrument: Any
) -> None:
    instrument(
        servers=declared(server),
        repeat_guard_store=redis.url,
        repeat_guard_secret=SECRET,
        repeat_guard_store_timeout_ms=ANSWERING_BOUND_MS,
    )
    redis.command("CONFIG", "RESETSTAT")
    async with Client(server.url) as client:
        with anyio.fail_after(20):
            await client.call_tool("search", {"query": "q"})  # not declared changing
            await client.call_tool("charge", {"amount": 1, "idempotency_key": "k-1"})  # carries its key
            with repeat_confirmed():
                await client.call_tool("search", {"query": "r"})
    assert server.counters.executions() == 3
    touched = store_commands(redis)
    assert touched == {}, touched  # nothing of these calls reached the store

    redis.command("CONFIG", "RESETSTAT")
    async with Client(server.url) as client:
        with anyio.fail_after(20):
            await client.call_tool("charge", {"amount": 2})  # changing, without its key
    touched = store_commands(redis)
    assert touched.pop("get") == 1 and touched.pop("set") == 1  # checked, then cleared
    assert set(touched) <= {"hello", "client|setinfo", "client|setname", "select"}  # a connection's set-up

    server.faults.add("charge", DropAfterExecution())
    assert await call_once(server.url, "charge", {"amount": 3}) == "UnknownEffectError"
    assert await call_once(server.url, "charge", {"amount": 3}) == "RepeatRefusedError"
    assert redis.command_calls()["set"] == 2 and len(armed_keys(redis)) == 1  # the clear, then the arm
    assert t.METRIC_GUARD_STORE_FALLBACKS not in telemetry.metrics() or all(
        value == 0 for _, value in telemetry.metrics()[t.METRIC_GUARD_STORE_FALLBACKS]
    )


# -- configuration errors ----------------------------------------------------------------------


def plugin_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The plugin's ERROR records, on its modules' loggers (mcp 1.x's server and client log errors of
    their own)."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.ERROR and r.name.partition(".")[0] == "otel_mcp_replay"
    ]


def _logged(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(f"{r.levelname} {r.getMessage()} {r.exc_text or ''}" for r in caplog.records)


def _exported(telemetry: Telemetry) -> str:
    return json.dumps(
        [
            [
                span.name,
                dict(span.attributes or {}),
                [[e.name, dict(e.attributes or {})] for e in span.events],
            ]
            for span in telemetry.spans()
        ],
        default=repr,
    )


@pytest.mark.anyio
async def test_a_store_without_its_secret_is_an_error_and_the_guard_stays_in_process(
    server: ServerHandle,
    redis_with_password: RedisServer,
    telemetry: Telemetry,
    instrument: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv(ev.OTEL_PYTHON_MCP_REPLAY_REPEAT_GUARD_STORE, redis_with_password.url)
    monkeypatch.delenv(ev.OTEL_PYTHON_MCP_REPLAY_REPEAT_GUARD_SECRET, raising=False)
    with caplog.at_level(logging.ERROR, "otel_mcp_replay"):
        instrumentor = instrument(servers=declared(server))
    errors = plugin_errors(caplog)
    assert len(errors) == 1 and ev.OTEL_PYTHON_MCP_REPLAY_REPEAT_GUARD_SECRET in errors[0]
    guard = instrumentor.runtime.guard
    assert guard is not None and guard.shared is None  # in-process
    server.faults.add("charge", DropAfterExecution())
    assert await call_once(server.url, "charge", ORDER) == "UnknownEffectError"
    assert await call_once(server.url, "charge", ORDER) == "RepeatRefusedError"
    assert server.counters.executions("charge") == 1
    assert guard_keys(redis_with_password) == 0  # the store was never used
    assert PASSWORD not in _logged(caplog) + _exported(telemetry)


BAD_URLS = [
    pytest.param(f"http://user:{PASSWORD}@127.0.0.1:6379/0", id="not-redis"),
    pytest.param(f"redis://:{PASSWORD}@/0", id="no-host"),
    pytest.param(f"redis://:{PASSWORD}@127.0.0.1:99999/0", id="bad-port"),
    pytest.param(f"redis://:{PASSWORD}@127.0.0.1:6379/db{PASSWORD}", id="bad-database"),
    pytest.param(f"redis://:{PASSWORD}@[::1/0", id="unparsable"),
    pytest.param(f"redis://:{PASSWORD}@127.0.0.1:6379/0\n{PASSWORD}", id="control-character"),
    pytest.param(f"redis://:{PASSWORD}@127.0.0.1:6379/0?socket_timeoutt=1", id="misspelt-option"),
    pytest.param(f"redis://:{PASSWORD}@127.0.0.1:6379/0?socket_timeout=x{PASSWORD}", id="bad-option-value"),
    pytest.param(f"redis://:{PASSWORD}@127.0.0.1:6379/0?ssl_ca_certs=/ca.pem", id="tls-option-without-tls"),
    pytest.param(f"REDIS://:{PASSWORD}@127.0.0.1:6379/0", id="upper-case-scheme"),
    pytest.param(f"valkey://:{PASSWORD}@127.0.0.1:6379/0", id="unknown-scheme"),
    pytest.param(f"redis+sentinel://:{PASSWORD}@127.0.0.1:26379", id="sentinel-without-service"),
    pytest.param(f"redis+sentinel://:{PASSWORD}@127.0.0.1/master", id="sentinel-without-port"),
]


@pytest.mark.parametrize("url", BAD_URLS)
def test_a_bad_store_url_is_an_error_naming_the_variable_never_the_url(
    url: str, instrument: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(ev.OTEL_PYTHON_MCP_REPLAY_REPEAT_GUARD_STORE, url)
    monkeypatch.setenv(ev.OTEL_PYTHON_MCP_REPLAY_REPEAT_GUARD_SECRET, SECRET)
    with caplog.at_level(logging.ERROR, "otel_mcp_replay"):
        instrumentor = instrument()  # the app runs
    errors = plugin_errors(caplog)
    assert len(errors) == 1 and ev.OTEL_PYTHON_MCP_REPLAY_REPEAT_GUARD_STORE in errors[0]
    assert PASSWORD not in _logged(caplog) and SECRET not in _logged(caplog)
    assert instrumentor.runtime.fail_closed
    guard = instrumentor.runtime.guard
    assert guard is not None and guard.shared is None


@pytest.mark.parametrize("url", BAD_URLS)
def test_a_bad_store_keyword_raises_naming_the_field_never_the_url(url: str, instrument: Any) -> None:
    with pytest.raises(ValueError) as raised:
        instrument(repeat_guard_store=url, repeat_guard_secret=SECRET)
    assert "repeat_guard_store" in str(raised.value) and PASSWORD not in str(raised.value)


def test_the_secret_keyword_is_required_with_a_store_and_checked(instrument: Any) -> None:
    redis_url = "redis://h/0"
    with pytest.raises(ValueError, match="repeat_guard_secret") as missing:
        instrument(repeat_guard_store=redis_url)
    with pytest.raises(ValueError, match="repeat_guard_secret") as short:
        instrument(repeat_guard_store=redis_url, repeat_guard_secret="short-secret")
    assert "short-secret" not in str(short.value) + str(missing.value)
    with pytest.raises(ValueError, match="repeat_guard_store_timeout_ms"):
        instrument(repeat_guard_store=redis_url, repeat_guard_secret=SECRET, repeat_guard_store_timeout_ms=0)


@pytest.mark.anyio
async def test_a_wrong_password_is_an_error_naming_the_variable_and_the_guard_stays_in_process(
    server: ServerHandle,
    redis_with_password: RedisServer,
    telemetry: Telemetry,
    instrument: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    wrong = "not-the-password-at-all"
    url = redis_with_password.url.replace(PASSWORD, wrong)
    with caplog.at_level(logging.WARNING, "otel_mcp_replay"):
        instrumentor = instrument(
            servers=declared(server),
            repeat_guard_store=url,
            repeat_guard_secret=SECRET,
            repeat_guard_store_timeout_ms=ANSWERING_BOUND_MS,
        )
        server.faults.add("charge", DropAfterExecution())
        assert await call_once(server.url, "charge", ORDER) == "UnknownEffectError"
        assert await call_once(server.url, "charge", ORDER) == "RepeatRefusedError"  # its own guard
        assert await call_once(server.url, "search", {"query": "q"}) == "completed"
    assert server.counters.executions("charge") == 1
    errors = plugin_errors(caplog)
    assert len(errors) == 1 and ev.OTEL_PYTHON_MCP_REPLAY_REPEAT_GUARD_STORE in errors[0]  # said once
    assert "(AuthenticationError)" in errors[0] and "failure=refused" in errors[0]
    store = instrumentor.runtime.guard.shared.store
    assert store.operations == 3  # asked each time (a credential set right is taken), refused each time
    fallbacks = telemetry.metrics()[t.METRIC_GUARD_STORE_FALLBACKS]
    assert {attrs[t.GUARD_STORE_FAILURE] for attrs, _ in fallbacks} == {"refused"}
    assert sum(value for _, value in fallbacks) == 3
    told = _logged(caplog) + _exported(telemetry)
    assert wrong not in told and PASSWORD not in told


@pytest.mark.anyio
async def test_the_credential_in_the_url_is_never_logged_or_recorded(
    server: ServerHandle,
    redis_with_password: RedisServer,
    telemetry: Telemetry,
    instrument: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.DEBUG):
        instrument(**with_store(server, redis_with_password.url, OUTAGE_BOUND_MS))
        server.faults.add("charge", DropAfterExecution())
        assert await call_once(server.url, "charge", ORDER) == "UnknownEffectError"
        assert await call_once(server.url, "charge", ORDER) == "RepeatRefusedError"
        redis_with_password.pause()
        try:  # fell back: told at WARNING
            assert await call_once(server.url, "charge", ORDER) == "RepeatRefusedError"
        finally:
            redis_with_password.resume()
    assert guard_keys(redis_with_password) == 1  # the store was used, with the credential
    warnings = [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and ev.OTEL_PYTHON_MCP_REPLAY_REPEAT_GUARD_STORE in r.getMessage()
    ]
    assert len(warnings) == 1  # the store's fallback, said once
    told = _logged(caplog) + _exported(telemetry)
    assert telemetry.spans() and PASSWORD not in told and SECRET not in told


def test_the_store_url_and_the_secret_are_never_in_a_repr(redis_with_password: RedisServer) -> None:
    from otel_mcp_replay.guard_store import RedisStore
    from otel_mcp_replay.settings import Settings
    from otel_mcp_replay.store_url import address_of

    settings = Settings(repeat_guard_store=redis_with_password.url, repeat_guard_secret=SECRET)
    assert settings.repeat_guard_store == redis_with_password.url  # held, as given
    shown = repr(settings) + repr(RedisStore(address_of(redis_with_password.url), 0.05))
    assert PASSWORD not in shown and SECRET not in shown and str(redis_with_password.port) not in shown


@pytest.mark.anyio
async def test_without_the_redis_client_the_store_is_an_error_and_the_guard_stays_in_process(
    server: ServerHandle,
    redis: RedisServer,
    instrument: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setitem(sys.modules, "redis", None)  # `import redis` raises ImportError
    with caplog.at_level(logging.ERROR, "otel_mcp_replay"):
        instrumentor = instrument(
            servers=declared(server), repeat_guard_store=redis.url, repeat_guard_secret=SECRET
        )
    errors = plugin_errors(caplog)
    assert (
        len(errors) == 1
        and ev.OTEL_PYTHON_MCP_REPLAY_REPEAT_GUARD_STORE in errors[0]
        and "[redis]" in errors[0]
    )
    guard = instrumentor.runtime.guard
    assert guard is not None and guard.shared is None
    server.faults.add("charge", DropAfterExecution())
    assert await call_once(server.url, "charge", ORDER) == "UnknownEffectError"
    assert await call_once(server.url, "charge", ORDER) == "RepeatRefusedError"  # in-process
    assert server.counters.executions("charge") == 1 and guard_keys(redis) == 0
