"""Forward TCP from 127.0.0.1 to a server and cut connections on command.

`TcpProxy` runs an asyncio TCP proxy in a background thread. It stands between an MCP client and
the demo server to lose a connection the way a network does: before the request reaches the server
(the tool does not run), or after the server started answering (the tool ran, the answer is lost).
The cut is armed from the test's thread and lands on the next request that crosses the proxy.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

_HOST = "127.0.0.1"
_CHUNK = 64 * 1024
_CONNECT_TIMEOUT_S = 5.0
# After the client side is cut the proxy keeps reading the server's answer, so the server
# completes as if nothing happened; this bounds how long it keeps reading.
_DRAIN_LIMIT_S = 60.0
# A match is looked for in at most this many bytes of a connection's request data.
_MATCH_WINDOW = 256 * 1024


@dataclass(frozen=True)
class CutSpec:
    """How to cut the connection that carries the next request.

    - `forward_request=False`: the request's bytes are not forwarded; the client's connection is
      closed when they arrive (the server never sees the request: the tool does not run).
    - otherwise the request is forwarded, and once the server's answer starts, the first
      `after_response_bytes` bytes of it (None: none) reach the client before its connection is
      cut; the rest of the answer is read and discarded so the server finishes normally.
    - `match`: only a request whose bytes contain this (e.g. `b'"tools/call"'`) is cut.
    - `reset`: cut with a TCP RST instead of a FIN.
    - `answer`: with `forward_request=False`, these bytes (an HTTP response in the server's place:
      a 429, say) reach the client before its connection closes; the server never sees the request.
    """

    after_response_bytes: int | None = None
    forward_request: bool = True
    match: bytes | None = None
    reset: bool = False
    answer: bytes | None = None


class _Conn:
    """One proxied connection: the client's writer, the server's writer, and its cut state."""

    def __init__(self, client: asyncio.StreamWriter, upstream: asyncio.StreamWriter) -> None:
        self.client = client
        self.upstream = upstream
        self.cut: CutSpec | None = None
        self.client_cut = False
        self.seen = bytearray()  # request bytes since the cut was armed, for `match`


class TcpProxy:
    """A TCP proxy on 127.0.0.1 (port 0: ephemeral) to `target_host:target_port`.

    Controls are thread-safe: `cut_next`, `refuse`, `cut_active`. Counters: `accepted`, `refused`,
    `cuts`, `active`. Use as a context manager (`with TcpProxy(port) as proxy:`) or start()/stop().
    """

    def __init__(self, target_port: int, target_host: str = _HOST, listen_port: int = 0) -> None:
        self.target_host = target_host
        self.target_port = target_port
        self._listen_port = listen_port
        self.port = 0
        self._lock = threading.Lock()
        self._armed: list[CutSpec] = []
        self._refuse = False
        self._refuse_reset = False
        self._accepted = 0
        self._refused = 0
        self._cuts = 0
        self._conns: set[_Conn] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    # --- lifecycle ---

    def start(self, timeout: float = 5.0) -> TcpProxy:
        if self._thread is not None:
            raise RuntimeError("the proxy is already started")
        ready = threading.Event()
        failure: list[BaseException] = []
        loop = asyncio.new_event_loop()
        self._loop = loop

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                self._server = loop.run_until_complete(
                    asyncio.start_server(self._handle, _HOST, self._listen_port, reuse_address=True)
                )
                self.port = self._server.sockets[0].getsockname()[1]
            except BaseException as exc:  # reported to start()'s caller
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.close()

        self._thread = threading.Thread(target=run, name="mcp-demo-proxy", daemon=True)
        self._thread.start()
        if not ready.wait(timeout):
            raise TimeoutError("the proxy did not start in time")
        if failure:
            self._thread.join(timeout)
            raise failure[0]
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Close the listener and every connection, then end the thread."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or not thread.is_alive():
            return
        fut = asyncio.run_coroutine_threadsafe(self._shutdown(), loop)
        with contextlib.suppress(Exception):
            fut.result(timeout)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout)
        if thread.is_alive():
            raise RuntimeError("the proxy thread did not stop")

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- controls (any thread) ---

    def url_for(self, url: str) -> str:
        """`url` with its host and port replaced by this proxy's."""
        parts = urlsplit(url)
        return urlunsplit(parts._replace(netloc=f"{_HOST}:{self.port}"))

    def cut_next(
        self,
        after_response_bytes: int | None = None,
        *,
        forward_request: bool = True,
        match: bytes | None = None,
        reset: bool = False,
        answer: bytes | None = None,
    ) -> None:
        """Arm a cut for the next request crossing the proxy (see `CutSpec`). Cuts queue up."""
        spec = CutSpec(after_response_bytes, forward_request, match, reset, answer)
        with self._lock:
            self._armed.append(spec)

    def refuse(self, enabled: bool = True, *, reset: bool = False) -> None:
        """While enabled, close every new connection at once (with RST if `reset`)."""
        with self._lock:
            self._refuse = enabled
            self._refuse_reset = reset

    def cut_active(self, *, reset: bool = False) -> int:
        """Cut every open connection now (both sides); return how many."""
        loop = self._loop
        if loop is None:
            return 0
        fut = asyncio.run_coroutine_threadsafe(self._cut_all(reset), loop)
        return fut.result(5.0)

    @property
    def armed(self) -> int:
        with self._lock:
            return len(self._armed)

    @property
    def accepted(self) -> int:
        with self._lock:
            return self._accepted

    @property
    def refused(self) -> int:
        with self._lock:
            return self._refused

    @property
    def cuts(self) -> int:
        with self._lock:
            return self._cuts

    @property
    def active(self) -> int:
        with self._lock:
            return len(self._conns)

    # --- the loop's side ---

    async def _handle(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await self._serve(creader, cwriter)
        finally:
            if task is not None:
                self._tasks.discard(task)

    async def _serve(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        with self._lock:
            self._accepted += 1
            refuse, refuse_reset = self._refuse, self._refuse_reset
            if refuse:
                self._refused += 1
        if refuse:
            _close(cwriter, reset=refuse_reset)
            return
        try:
            ureader, uwriter = await asyncio.wait_for(
                asyncio.open_connection(self.target_host, self.target_port), _CONNECT_TIMEOUT_S
            )
        except (OSError, asyncio.TimeoutError):
            _close(cwriter, reset=True)
            return
        conn = _Conn(cwriter, uwriter)
        with self._lock:
            self._conns.add(conn)
        down = asyncio.create_task(self._pump_down(conn, ureader))
        try:
            await self._pump_up(conn, creader)
            await down
        finally:
            down.cancel()
            with self._lock:
                self._conns.discard(conn)
            _close(uwriter)
            if not conn.client_cut:
                _close(cwriter)

    async def _pump_up(self, conn: _Conn, creader: asyncio.StreamReader) -> None:
        """Client to server, deciding at each chunk whether an armed cut takes this connection."""
        while True:
            try:
                data = await creader.read(_CHUNK)
            except (ConnectionError, OSError):
                data = b""
            if not data:
                if not conn.client_cut:
                    # The client left: the server's side goes too (HTTP has no use for half-close).
                    _close(conn.upstream)
                return
            if conn.client_cut:
                continue
            if conn.cut is None:
                spec = self._claim(conn, data)
                if spec is not None and not spec.forward_request:
                    if spec.answer is not None:
                        await _write(conn.client, spec.answer)
                    self._cut_client(conn, spec.reset)
                    _close(conn.upstream)
                    return
            try:
                conn.upstream.write(data)
                await conn.upstream.drain()
            except (ConnectionError, OSError):
                return

    async def _pump_down(self, conn: _Conn, ureader: asyncio.StreamReader) -> None:
        """Server to client, cutting the client after the allowed bytes of a cut connection."""
        sent_since_cut = 0
        loop = asyncio.get_running_loop()
        drain_deadline: float | None = None
        while True:
            try:
                if drain_deadline is not None:
                    data = await asyncio.wait_for(
                        ureader.read(_CHUNK), max(0.0, drain_deadline - loop.time())
                    )
                else:
                    data = await ureader.read(_CHUNK)
            except (ConnectionError, OSError, asyncio.TimeoutError):
                data = b""
            if not data:
                if not conn.client_cut:
                    _close(conn.client)
                return
            if conn.client_cut:
                continue  # draining: the answer is read and dropped
            spec = conn.cut
            if spec is not None:
                allowed = max(0, (spec.after_response_bytes or 0) - sent_since_cut)
                head, data = data[:allowed], data[allowed:]
                sent_since_cut += len(head)
                if head and not await _write(conn.client, head):
                    return
                if data or sent_since_cut >= (spec.after_response_bytes or 0):
                    self._cut_client(conn, spec.reset)
                    drain_deadline = loop.time() + _DRAIN_LIMIT_S
                continue
            if not await _write(conn.client, data):
                return

    def _claim(self, conn: _Conn, data: bytes) -> CutSpec | None:
        """Give the first armed cut whose match this connection's request bytes satisfy to it."""
        with self._lock:
            if not self._armed:
                return None
            if len(conn.seen) < _MATCH_WINDOW:
                conn.seen += data[: _MATCH_WINDOW - len(conn.seen)]
            for i, spec in enumerate(self._armed):
                if spec.match is None or spec.match in conn.seen or spec.match in data:
                    del self._armed[i]
                    conn.cut = spec
                    conn.seen.clear()
                    return spec
            return None

    def _cut_client(self, conn: _Conn, reset: bool) -> None:
        conn.client_cut = True
        with self._lock:
            self._cuts += 1
        _close(conn.client, reset=reset)

    async def _cut_all(self, reset: bool) -> int:
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            if not conn.client_cut:
                self._cut_client(conn, reset)
            _close(conn.upstream, reset=reset)
        return len(conns)

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            _close(conn.client, reset=True)
            _close(conn.upstream, reset=True)
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=2.0)
        if self._server is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)


async def _write(writer: asyncio.StreamWriter, data: bytes) -> bool:
    try:
        writer.write(data)
        await writer.drain()
    except (ConnectionError, OSError):
        return False
    return True


def _close(writer: asyncio.StreamWriter, *, reset: bool = False) -> None:
    """Close a connection: FIN after what was written, or (reset) an RST at once."""
    transport = writer.transport
    if transport.is_closing():
        return
    if reset:
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()
    else:
        transport.close()
