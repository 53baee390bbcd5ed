"""A real Redis server on 127.0.0.1, for the repeat guard's shared store: started, paused, stopped.

The rule: the tests start every server they use and stop it after. `RedisServer` runs the
`redis-server` binary (scripts/redis-server installs it) on a free loopback port, persisting
nothing, optionally behind a password; `pause()` freezes it (SIGSTOP: a store that accepts and
never answers), `stop()` ends it (a store refusing connections), and `start()` brings it back on
the same port. Readiness is a bounded poll of PING over a raw socket, never a sleep, and the port
held by the server's own process: a port taken before the server bound it is answered by another
process, or by none. Its first start then goes to a fresh port (harness/ports.py).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from types import TracebackType
from typing import BinaryIO

from harness.ports import free_port, started_on_free_ports, wait_serving

_HOST = "127.0.0.1"
_START_TIMEOUT_S = 10.0


def redis_binary() -> str | None:
    """The `redis-server` binary on PATH, or None."""
    return shutil.which("redis-server")


class RedisServer:
    """One `redis-server` process on a loopback port, owned by the test that made it."""

    def __init__(self, password: str | None = None) -> None:
        binary = redis_binary()
        if binary is None:
            raise FileNotFoundError("redis-server is not installed: run scripts/redis-server")
        self.binary = binary
        self.password = password
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.started = False  # once started, it comes back on its own port, which its clients name

    @property
    def url(self) -> str:
        """The URL an app names it by (with the password as the credential, when it has one)."""
        credential = f":{self.password}@" if self.password is not None else ""
        return f"redis://{credential}{_HOST}:{self.port}/0"

    def start(self) -> RedisServer:
        """Running and answering on its port: its first start on a fresh port when the one named
        was taken meanwhile; started again, on its own port or not at all."""
        if self.started:
            self._start_on_its_port()
        else:
            started_on_free_ports(self._start_on_its_port, self._name_port)
            self.started = True
        return self

    def _name_port(self) -> None:
        self.port = free_port()

    def _start_on_its_port(self) -> None:
        argv = [self.binary, "--port", str(self.port), "--bind", _HOST, "--save", "", "--appendonly", "no"]
        if self.password is not None:
            argv += ["--requirepass", self.password]
        with tempfile.TemporaryFile() as log:  # what it said, read if it exits at start

            def said() -> str:
                log.seek(0)
                return log.read().decode(errors="replace")

            self.process = process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
            try:
                # Its own process holds the port (another's may answer on it), and answers.
                wait_serving(
                    process,
                    self.port,
                    self._answers,
                    what="redis-server",
                    said=said,
                    timeout=_START_TIMEOUT_S,
                )
            except BaseException:
                self.stop()
                raise

    def _answers(self) -> bool:
        try:
            return self.command("PING") in (b"+PONG", b"-NOAUTH Authentication required.")
        except OSError:
            return False

    @contextlib.contextmanager
    def _connection(self) -> Iterator[tuple[socket.socket, BinaryIO]]:
        """A connection (authenticated when the server has a password) and its reader."""
        with socket.create_connection((_HOST, self.port), timeout=2) as conn:
            reader = conn.makefile("rb")
            if self.password is not None:
                conn.sendall(_encoded("AUTH", self.password))
                reader.readline()
            yield conn, reader

    def command(self, *words: str) -> bytes:
        """One command: its first reply line (for an integer reply, `:N`; for a bulk one, its body)."""
        if words == ("PING",):  # readiness: answered (or refused for want of AUTH) before any AUTH
            with socket.create_connection((_HOST, self.port), timeout=2) as conn:
                conn.sendall(_encoded("PING"))
                return conn.makefile("rb").readline().rstrip(b"\r\n")
        with self._connection() as (conn, reader):
            conn.sendall(_encoded(*words))
            line = reader.readline().rstrip(b"\r\n")
            if line.startswith(b"$") and line != b"$-1":  # a bulk reply: its body
                line = reader.readline().rstrip(b"\r\n")
            return line

    def count(self, *words: str) -> int:
        """An integer reply (`DBSIZE`, `EXISTS key`)."""
        reply = self.command(*words)
        if not reply.startswith(b":"):
            raise ValueError(f"not an integer reply: {reply!r}")
        return int(reply[1:])

    def keys(self) -> list[str]:
        """Every key the server holds (`KEYS *`: a test's few)."""
        with self._connection() as (conn, reader):
            conn.sendall(_encoded("KEYS", "*"))
            count = int(reader.readline().rstrip(b"\r\n")[1:])
            found = []
            for _ in range(count):
                reader.readline()  # $length
                found.append(reader.readline().rstrip(b"\r\n").decode())
            return found

    def command_calls(self) -> dict[str, int]:
        """Commands the server ran since it started (or since CONFIG RESETSTAT), by name."""
        with self._connection() as (conn, reader):
            conn.sendall(_encoded("INFO", "commandstats"))
            size = int(reader.readline().rstrip(b"\r\n")[1:])
            body = reader.read(size + 2).decode()
        calls: dict[str, int] = {}
        for line in body.splitlines():
            if line.startswith("cmdstat_"):
                name, _, stats = line[len("cmdstat_") :].partition(":")
                fields = dict(part.split("=", 1) for part in stats.split(","))
                calls[name] = int(fields["calls"])
        return calls

    def pause(self) -> None:
        """Frozen: connections are accepted by the kernel, nothing is answered."""
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGCONT)

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        os.kill(process.pid, signal.SIGCONT)  # a paused server cannot act on SIGTERM
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def _encoded(*words: str) -> bytes:
    parts = [f"*{len(words)}\r\n".encode()]
    for word in words:
        data = word.encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)
