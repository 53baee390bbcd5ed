"""A port named free and taken before its server binds it (harness/ports.py): the Redis servers the
guard's tests start go to fresh ports at their first start, and never talk to the server that took
theirs (the Collector and Jaeger: tests/collector/test_collector_e2e.py). Real servers, real ports:
a port is taken by a listening socket, or by another real Redis server, as another suite's would."""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

import pytest

from harness import conformance, redis_deployments, redis_server
from harness.ports import (
    PORT_TRIES,
    PortTaken,
    free_port,
    held_port,
    holds,
    started_on_free_ports,
    taken_first,
)
from harness.redis_deployments import HOST, Node, Sentinels
from harness.redis_server import RedisServer

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(autouse=True)
def _redis_installed() -> None:
    if shutil.which("redis-server") is None:
        message = "no redis-server here (scripts/redis-server)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)  # in CI the project's own scripts must have installed it
        pytest.skip(message)


def test_a_start_is_tried_again_on_fresh_ports_only_while_a_port_was_taken() -> None:
    named: list[int] = []
    starts: list[int] = []

    def start() -> str:
        starts.append(len(named))
        if len(starts) < PORT_TRIES:
            raise PortTaken("taken")
        return "running"

    assert started_on_free_ports(start, lambda: named.append(1)) == "running"
    assert starts == list(range(PORT_TRIES))  # each start after ports were named afresh

    def never_binds() -> str:
        raise PortTaken("taken")

    with pytest.raises(PortTaken):
        started_on_free_ports(never_binds, lambda: named.append(1))

    def broken() -> str:
        raise RuntimeError("not a port")

    named.clear()
    with pytest.raises(RuntimeError, match="not a port"):
        started_on_free_ports(broken, lambda: named.append(1))
    assert named == []  # any other failure is the start's own: no second start


def test_a_redis_server_whose_port_another_redis_took_starts_on_its_own(tmp_path: Path) -> None:
    with RedisServer() as other:
        server = RedisServer()
        server.port = other.port  # named free, then taken by `other` before this one bound it
        with server:
            assert server.port != other.port
            assert server.process is not None and server.process.poll() is None
            assert server.command("SET", "mine", "1") == b"+OK"
            assert other.count("DBSIZE") == 0  # nothing of this server's reached the other
            assert server.count("DBSIZE") == 1


def test_a_redis_server_whose_port_a_socket_holds_starts_on_a_fresh_port() -> None:
    with held_port() as taken:
        server = RedisServer(password="secret")
        server.port = taken
        with server:
            assert server.port != taken
            assert server.count("DBSIZE") == 0
            assert server.url.endswith(f":{server.port}/0")


def test_a_redis_server_started_again_stays_on_its_port_or_fails() -> None:
    server = RedisServer().start()
    port = server.port
    try:
        server.stop()
        server.start()  # its clients name its port: it comes back there
        assert server.port == port
        server.stop()
        with socket.socket() as holder:
            holder.bind((HOST, port))
            holder.listen()
            with pytest.raises(PortTaken, match="Address already in use"):
                server.start()
        assert server.port == port
    finally:
        server.stop()


def test_a_port_taken_at_every_start_fails_after_the_bounded_tries(monkeypatch: pytest.MonkeyPatch) -> None:
    with held_port() as taken:
        named: list[int] = []

        def port() -> int:
            named.append(taken)
            return taken

        monkeypatch.setattr(redis_server, "free_port", port)
        server = RedisServer()
        with pytest.raises(PortTaken, match="Address already in use"):
            server.start()
        assert len(named) == PORT_TRIES  # named at its making, then once before each later start
        assert server.process is None


def test_a_cluster_node_whose_bus_port_was_taken_starts_on_fresh_ports(tmp_path: Path) -> None:
    binary = shutil.which("redis-server")
    assert binary is not None
    node = Node(binary, tmp_path, "--cluster-enabled", "yes", cluster_bus=True)
    assert node.bus_port is not None
    with held_port() as taken:
        node.bus_port = taken
        with redis_deployments.running(node):
            assert node.bus_port != taken
            assert node.client().info("server")["process_id"] == node.process.pid  # type: ignore[union-attr]
            assert node.client().info("cluster")["cluster_enabled"] == 1
        logs = [path.read_text(errors="replace") for path in tmp_path.glob("*.log")]
    assert any("Address already in use" in log for log in logs), logs


def test_a_node_whose_port_another_node_took_starts_on_its_own(tmp_path: Path) -> None:
    binary = shutil.which("redis-server")
    assert binary is not None
    other = Node(binary, tmp_path / "other")
    node = Node(binary, tmp_path / "node")
    with redis_deployments.running(other):
        node.port = other.port
        with redis_deployments.running(node):
            assert node.port != other.port
            node.client().set("mine", "1")
            assert other.client().dbsize() == 0


def test_a_replica_names_its_master_at_the_port_the_master_runs_on(tmp_path: Path) -> None:
    binary = shutil.which("redis-server")
    assert binary is not None
    master = Node(binary, tmp_path / "master")
    replica = Node(binary, tmp_path / "replica", replica_of=master)
    for _ in range(2):  # the master named its port again (a start on fresh ports): read as it starts
        master.port = free_port()
        argv = replica.argv()
        at = argv.index("--replicaof")
        assert argv[at + 1 : at + 3] == [HOST, str(master.port)]


def test_a_sentinel_whose_port_was_taken_starts_on_a_fresh_one(tmp_path: Path) -> None:
    if shutil.which("redis-sentinel") is None:
        pytest.skip("no redis-sentinel here (scripts/redis-server)")
    sentinels = Sentinels(tmp_path)
    with held_port() as taken:
        sentinels.sentinel_ports[1] = taken
        with sentinels.running():
            assert taken not in sentinels.sentinel_ports
            assert f":{taken}" not in sentinels.url
            for port in sentinels.sentinel_ports:
                assert sentinels.names_master(port, sentinels.master)
            assert len(sentinels.processes) == 3
        logs = [path.read_text(errors="replace") for path in tmp_path.glob("sentinel-*.log")]
    assert any("Address already in use" in log for log in logs), logs


def test_nginx_whose_port_was_taken_listens_on_a_fresh_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if shutil.which("nginx") is None and not Path("/usr/sbin/nginx").exists():
        message = "no nginx here (scripts/conformance-servers)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    with held_port() as taken:
        port, named = taken_first(taken)
        monkeypatch.setattr(conformance, "free_port", port)
        with conformance._nginx(free_port(), tmp_path) as listening:
            assert listening == named[1] != taken  # the second start's port
            with socket.create_connection((HOST, listening), timeout=5):
                pass
        said = (tmp_path / "nginx-error.log").read_text(errors="replace")
    assert f"{HOST}:{taken} failed (98: Address already in use)" in said, said
    assert len(named) == 2


def test_the_process_that_holds_a_listening_port_is_told_apart() -> None:
    with held_port() as mine:
        assert holds(os.getpid(), mine)
        with socket.socket() as bound:  # bound, not listening: nobody's listener
            bound.bind((HOST, free_port()))
            assert not holds(os.getpid(), int(bound.getsockname()[1]))
        with RedisServer() as other:  # another process's listener
            assert other.process is not None
            assert not holds(os.getpid(), other.port)
            assert holds(other.process.pid, other.port)
            assert not holds(other.process.pid, mine)
            pid = other.process.pid
        assert not holds(pid, other.port)  # stopped: it holds nothing
