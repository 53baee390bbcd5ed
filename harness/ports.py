"""Free 127.0.0.1 ports for the servers the tests start as processes told their port (Redis and its
Sentinels, the Collector, Jaeger, nginx, an app's demo server).

The rule: a port named before its server binds it comes from below the kernel's ephemeral range
(ip_local_port_range), the range every `bind((host, 0))` and every outgoing connection draws from.
A port drawn there and let go could be taken, before its server binds it, by any server of the run
that binds port 0 (the demo servers, the other SDKs' servers: most of them, in three suites side
by side); below it, only another caller of `free_port` could, picking at random among thousands.
A port is free when a bind to it succeeds (a bound, listening or lingering socket fails it). It is
not held: a server that finds it taken all the same at its first start (`PortTaken`) is started
again on fresh ports (`started_on_free_ports`: the Collector and Jaeger, harness/otel_stack.py; Redis,
harness/redis_server.py and harness/redis_deployments.py; nginx, harness/conformance.py; the
README's demo server, tests/packaging/test_readme.py; the distro runs' app, tests/support/distros.py;
the end-to-end run's rotel, tests/end_to_end/test_end_to_end.py).
A port taken may still accept: a server is ready once its own process holds the port (`holds`) and
it answers (`wait_serving`), or once it says so after binding it.
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final, TypeVar

HOST: Final = "127.0.0.1"
LOWEST: Final = 10_000  # below it: the ports services are known by
TRIES: Final = 200  # a bound on the probes (nearly all pass at the first)
_RANGE: Final = Path("/proc/sys/net/ipv4/ip_local_port_range")
_TCP: Final = Path("/proc/net/tcp")  # the IPv4 sockets: local address, state, inode
_LISTEN: Final = "0A"
_pick = random.Random()  # seeded from the OS: each process draws its own sequence
# The starts a server gets, each on ports named afresh, before a port taken is its failure.
PORT_TRIES: Final = 3
T = TypeVar("T")


class PortTaken(RuntimeError):
    """A server could not bind a port it was named: another process of the run took it meanwhile."""


def start_failure(
    what: str, returncode: int | None, said: str, taken: str = "Address already in use"
) -> RuntimeError:
    """Why a server exited at start, from what it said: PortTaken when that names a port `taken`."""
    return (PortTaken if taken in said else RuntimeError)(f"{what} exited with {returncode}: {said[-2000:]}")


def started_on_free_ports(start: Callable[[], T], name_ports: Callable[[], None] | None = None) -> T:
    """`start()`, begun again after `name_ports()` named its ports afresh (None: each start names
    its own) each time it raised PortTaken: at most PORT_TRIES starts; any other failure is the
    start's own."""
    for _ in range(PORT_TRIES - 1):
        try:
            return start()
        except PortTaken:
            if name_ports is not None:
                name_ports()
    return start()


def free_port() -> int:
    """A port no socket holds now, outside the ephemeral range where the machine has one below it
    of 4,096 ports or more; else one the kernel picks (`bind` to port 0)."""
    highest = _ephemeral_low() - 1
    if highest - LOWEST >= 4096:
        for _ in range(TRIES):
            port = _pick.randint(LOWEST, highest)
            if _binds(port):
                return port
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


def _binds(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind((HOST, port))
        except OSError:
            return False
        return True


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux's default: 32768; 0 where unknown)."""
    try:
        return int(_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def holds(pid: int, port: int) -> bool:
    """Whether process `pid` holds the socket listening on 127.0.0.1:`port` (a port taken before
    its server bound it is another process's, which may answer all the same). Read from /proc; where
    there is none, not asked (True)."""
    if not _TCP.exists():
        return True
    local = f"0100007F:{port:04X}"  # 127.0.0.1 as the kernel writes it, then the port
    listening = {
        f"socket:[{fields[9]}]"
        for fields in map(str.split, _TCP.read_text().splitlines()[1:])
        if fields[1] == local and fields[3] == _LISTEN
    }
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:  # it is gone
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") in listening:
                return True
        except OSError:  # closed meanwhile
            continue
    return False


def wait_serving(
    process: subprocess.Popen[Any],
    port: int,
    answers: Callable[[], bool],
    *,
    what: str,
    said: Callable[[], str],
    timeout: float,
    taken: str = "Address already in use",
    not_yet: tuple[type[Exception], ...] = (OSError,),
    pause: float = 0.05,
) -> None:
    """Poll until `process` itself holds `port` and `answers` (raising one of `not_yet`: not yet).
    A process that exited first fails with what it `said` (`start_failure`: PortTaken when that
    names its port `taken`); `timeout` guards a hang only (TimeoutError)."""
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise start_failure(what, process.returncode, said(), taken)
        try:
            if holds(process.pid, port) and answers():
                return
        except not_yet:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not serving on {port} within {timeout:.0f} s: {said()[-2000:]}")
        time.sleep(pause)


def taken_first(taken: int) -> tuple[Callable[[], int], list[int]]:
    """A stand-in for `free_port` that names `taken` first, then free ports, and the list of the
    ports it named (for the tests of the starts above)."""
    named: list[int] = []

    def port() -> int:
        named.append(taken if not named else free_port())
        return named[-1]

    return port, named


@contextlib.contextmanager
def held_port() -> Iterator[int]:
    """A free port, then held: a socket listens on it, as another process of the run would (for
    the tests of the starts above)."""
    with socket.socket() as holder:
        holder.bind((HOST, free_port()))
        holder.listen()
        yield int(holder.getsockname()[1])
