"""The servers of the conformance matrix: MCP servers on SDKs this project did not write, run for real.

The rule kept here: every process started is stopped on exit (terminated, then killed), each listens
only on 127.0.0.1, and every wait is a bounded poll that guards a hang and decides nothing. The
server programs are ours (conformance/servers/), built on the TypeScript SDK (1.x and v2), the Go
SDK, rmcp, fastmcp and the Java SDK by scripts/conformance-servers into the user's cache; each
serves the same five tools at `/mcp` and counts their executions, read at `/count` without a tool
call: the ground truth. A mode may put nginx in front, gzipping event streams and JSON as a
deployment does; the faults are injected in front of all of it, on the TCP connection
(harness/proxy.py's `TcpProxy`).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from harness.ports import free_port, started_on_free_ports, wait_serving
from harness.proxy import TcpProxy

REPO: Final = Path(__file__).resolve().parents[1]
BUILD_SCRIPT: Final = REPO / "scripts" / "conformance-servers"
HOST: Final = "127.0.0.1"
LEGACY: Final = "legacy"
MODERN: Final = "2026-07-28"
START_TIMEOUT_S: Final = 60.0  # a cold start on a busy 2-core machine; a guard, never a verdict
_READY = re.compile(rb"READY (\d+)")

# What nginx does in front of a server in a "+gzip" mode: what a deployment's proxy does when its
# gzip_types name event streams (the SDKs' `no-transform` does not stop nginx). Buffering is off so
# an event stream passes as it comes, each chunk compressed as it goes.
_NGINX_CONF: Final = """daemon off;
worker_processes 1;
pid {work}/nginx.pid;
error_log {work}/nginx-error.log warn;
events {{ worker_connections 256; }}
http {{
  access_log off;
  client_body_temp_path {work}/body;
  proxy_temp_path {work}/proxy;
  fastcgi_temp_path {work}/fastcgi;
  uwsgi_temp_path {work}/uwsgi;
  scgi_temp_path {work}/scgi;
  gzip on;
  gzip_types text/event-stream application/json;
  gzip_proxied any;
  gzip_min_length 0;
  server {{
    listen {host}:{port};
    location / {{
      proxy_pass http://{host}:{upstream};
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host $http_host;
      proxy_buffering off;
      proxy_read_timeout 300s;
    }}
  }}
}}
"""


class BuildsMissing(RuntimeError):
    """A server of the matrix is not built: run scripts/conformance-servers."""


@dataclass(frozen=True)
class ServerMode:
    """One server in one of its modes: the SDK, its version, the mode argument our program takes,
    the protocol eras it speaks there (measured: a mode that refuses 2026-07-28 lists legacy only),
    and whether nginx gzips in front of it."""

    server: str
    version: str
    mode: str
    eras: tuple[str, ...]
    gzip: bool = False

    @property
    def name(self) -> str:
        return f"{self.server}-{self.mode}" + ("+gzip" if self.gzip else "")


TYPESCRIPT: Final = "typescript"
TYPESCRIPT_V2: Final = "typescript-v2"
GO: Final = "go"
RUST: Final = "rust"
FASTMCP: Final = "fastmcp"
JAVA: Final = "java"
VERSIONS: Final = {
    TYPESCRIPT: "1.32.2",
    TYPESCRIPT_V2: "2.4.0",
    GO: "v1.8.0",
    RUST: "3.11.0",
    FASTMCP: "4.2.3",
    JAVA: "2.2.0",
}
BOTH: Final = (LEGACY, MODERN)


def _modes() -> tuple[ServerMode, ...]:
    def m(server: str, mode: str, eras: tuple[str, ...] = (LEGACY,), gzip: bool = False) -> ServerMode:
        return ServerMode(server, VERSIONS[server], mode, eras, gzip)

    return (
        # The TypeScript SDK speaks the legacy era only (2026-07-28: "Unsupported protocol version").
        m(TYPESCRIPT, "sse"),  # stateless, SSE answers (the SDK's default)
        m(TYPESCRIPT, "json"),  # stateless, enableJsonResponse
        m(TYPESCRIPT, "stateful"),  # session ids
        m(TYPESCRIPT, "resumable"),  # session ids and an EventStore
        # The TypeScript SDK v2 (@modelcontextprotocol/server) speaks both eras in each mode.
        m(TYPESCRIPT_V2, "handler", BOTH),  # createMcpHandler: JSON answers; the 2025 era stateless, SSE
        m(TYPESCRIPT_V2, "sse", BOTH),  # the same, every 2026-07-28 answer an event stream
        m(TYPESCRIPT_V2, "stateful", BOTH),  # the 2025 era routed by isLegacyRequest: session ids
        # The Go SDK speaks 2026-07-28 in its stateless mode only.
        m(GO, "sse"),
        m(GO, "json"),
        m(GO, "stateless", BOTH),
        m(GO, "resumable"),  # MemoryEventStore
        m(RUST, "session", BOTH),  # rmcp's default: a priming event opens each stream
        m(RUST, "stateless", BOTH),
        m(RUST, "json", BOTH),
        m(FASTMCP, "sse", BOTH),
        m(FASTMCP, "stateless", BOTH),
        m(FASTMCP, "json", BOTH),
        # The Java SDK's servlet transports in Tomcat. Its legacy ones speak the legacy era only (on
        # 2026-07-28 the tool runs and the client refuses the answer); its 2026-07-28 server
        # (io.modelcontextprotocol.modern) refuses initialize (-32022): 2026-07-28 only.
        m(JAVA, "stateful"),  # HttpServletStreamableServerTransportProvider: session ids, SSE answers
        m(JAVA, "stateless"),  # HttpServletStatelessServerTransport: JSON answers
        m(JAVA, "modern", (MODERN,)),  # HttpServletMcpTransport: JSON answers
        m(JAVA, "modern-streaming", (MODERN,)),  # each tool answers with McpSyncResponse.streaming: SSE
        m(TYPESCRIPT, "stateful", gzip=True),
        m(TYPESCRIPT_V2, "sse", BOTH, gzip=True),
        m(GO, "json", gzip=True),
        m(RUST, "session", BOTH, gzip=True),
        m(FASTMCP, "sse", BOTH, gzip=True),
        m(JAVA, "stateful", gzip=True),
        m(JAVA, "modern-streaming", (MODERN,), gzip=True),
    )


MATRIX: Final = _modes()

# rmcp running each tool as a task (SEP-2663) for a client that declares the tasks extension: the
# foreign task server of tests/tasks/test_foreign_tasks.py, not a cell of the matrix (its clients
# declare no extension, and get what `session` gives them).
RUST_TASKS: Final = ServerMode(RUST, VERSIONS[RUST], "tasks", BOTH)
RUST_TASKS_GZIP: Final = ServerMode(RUST, VERSIONS[RUST], "tasks", BOTH, gzip=True)  # nginx's gzip in front


def builds() -> dict[str, str]:
    """Where scripts/conformance-servers put the builds (it is asked, so the two never disagree)."""
    done = subprocess.run(
        [str(BUILD_SCRIPT), "--print"], capture_output=True, text=True, timeout=60, check=False
    )
    found = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    if done.returncode != 0:
        raise BuildsMissing(
            "the conformance servers are not built: run scripts/conformance-servers "
            f"(it printed: {done.stdout.strip()!r})"
        )
    return found


def command(mode: ServerMode, built: dict[str, str]) -> list[str]:
    if mode.server == TYPESCRIPT:
        return [shutil.which("node") or "node", built["TYPESCRIPT_SERVER"], mode.mode]
    if mode.server == TYPESCRIPT_V2:
        return [shutil.which("node") or "node", built["TYPESCRIPT_V2_SERVER"], mode.mode]
    if mode.server == GO:
        return [built["GO_SERVER"], "-mode", mode.mode]
    if mode.server == RUST:
        return [built["RUST_SERVER"], mode.mode]
    if mode.server == JAVA:
        # A small heap and the quick compiler: a server of a few calls, on a shared 2-core machine.
        java = shutil.which("java") or "java"
        return [
            java,
            "-Xmx256m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-jar",
            built["JAVA_SERVER"],
            mode.mode,
        ]
    return [built["FASTMCP_PYTHON"], built["FASTMCP_SERVER"], mode.mode]


@dataclass
class RunningServer:
    """A server of the matrix, running: `url` is its MCP endpoint through the fault proxy (and nginx
    in a gzip mode); `executions()` reads its counts straight from it."""

    mode: ServerMode
    url: str
    proxy: TcpProxy
    count_url: str

    def executions(self) -> dict[str, int]:
        with urllib.request.urlopen(self.count_url, timeout=10) as response:
            counted: dict[str, int] = json.loads(response.read() or b"{}")
        return counted


@contextlib.contextmanager
def running(mode: ServerMode, built: dict[str, str], work: Path) -> Iterator[RunningServer]:
    """Start the server (and nginx in a gzip mode) and the fault proxy in front; stop all on exit."""
    with contextlib.ExitStack() as stack:
        port = stack.enter_context(_process(command(mode, built), work / f"{mode.server}.log"))
        front = port
        if mode.gzip:
            front = stack.enter_context(_nginx(port, work))
        proxy = stack.enter_context(TcpProxy(front))
        yield RunningServer(mode, f"http://{HOST}:{proxy.port}/mcp", proxy, f"http://{HOST}:{port}/count")


@contextlib.contextmanager
def _nginx(upstream: int, work: Path) -> Iterator[int]:
    """nginx in front of `upstream`, on a free port (named again when another process took it
    before nginx bound it: harness/ports.py); its port is yielded once nginx itself holds it."""
    with contextlib.ExitStack() as stack:
        yield started_on_free_ports(functools.partial(_start_nginx, upstream, work, stack))


def _start_nginx(upstream: int, work: Path, stack: contextlib.ExitStack) -> int:
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    port = free_port()
    conf, errors = work / "nginx.conf", work / "nginx-error.log"
    conf.write_text(_NGINX_CONF.format(work=work, host=HOST, port=port, upstream=upstream))
    argv = [nginx, "-p", str(work), "-e", str(errors), "-c", str(conf)]
    with (work / "nginx.log").open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    stack.callback(_stop, proc)
    # Its master holds its port once bound: whatever accepts on the port before that is another's.
    wait_serving(
        proc,
        port,
        lambda: _accepts(port),
        what="nginx",
        said=lambda: errors.read_text(errors="replace") if errors.exists() else "",
        timeout=START_TIMEOUT_S,
    )
    return port


@contextlib.contextmanager
def _process(argv: list[str], log: Path) -> Iterator[int]:
    """Run `argv`, its output to `log`; yield the port its "READY <port>" line names, once it accepts
    connections there (it bound port 0: the port the kernel gave it is no other process's)."""
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield _wait_listening(proc, log)
    finally:
        _stop(proc)


def _wait_listening(proc: subprocess.Popen[bytes], log: Path) -> int:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"{proc.args!r} exited with {proc.returncode}: {log.read_text(errors='replace')[-2000:]}"
            )
        found = _READY.search(log.read_bytes())
        if found is not None and _accepts(port := int(found.group(1))):
            return port
        time.sleep(0.05)
    raise TimeoutError(f"{proc.args!r} did not start listening: {log.read_text(errors='replace')[-2000:]}")


def _accepts(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex((HOST, port)) == 0


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)
