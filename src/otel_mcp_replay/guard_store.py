"""The repeat guard's shared store: Redis (or Valkey), through the `redis` client (extra `[redis]`).

The rule: the store never hurts the host. It holds only keyed hashes under a prefix, each with the
guard's window as its TTL, and its URL (which may carry a credential) is never logged, recorded or
echoed; a failure is told by its cause and its class alone (failure_of), never its text. A key
says "armed" (`1`, written by `SET key 1 EX s GET`, which hands back what it replaced) or
"cleared" (a random token, written by `SET key cleared:TOKEN EX s` when an identical call
completed): a fresh token is positive evidence of a completion after an arm, and a missing key is
evidence of nothing (Redis 6.2 or later). Each operation is bounded by the guard (guard.py); here
a client's own socket timeouts are the same bound, so nothing it starts outlives it by much. Under
asyncio the asyncio client runs on the caller's loop (one client per loop); under trio the sync
client runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import secrets
import ssl
import weakref
from typing import Any, Final, Protocol

import anyio.to_thread

from otel_mcp_replay.store_url import StoreAddress
from otel_mcp_replay.telemetry import GuardStoreFailure as StoreFailure

PREFIX: Final = "otel-mcp-replay:guard:"
ARMED: Final = "1"
CLEARED: Final = "cleared:"  # then the token of one completion


class GuardStore(Protocol):
    """Where every process sharing the secret remembers the calls that may have run. Each method
    may raise anything: the guard bounds, catches and falls back."""

    async def arm(self, key: str, ttl_s: int) -> str | None:
        """Mark `key` armed; what it held before (None: nothing)."""
        ...

    async def read(self, key: str) -> str | None:
        """What `key` holds: ARMED, a CLEARED token, or None (never written, expired, or lost)."""
        ...

    async def clear(self, key: str, ttl_s: int) -> None:
        """Mark `key` cleared with a token no clear wrote before."""
        ...

    def failure_of(self, exc: BaseException) -> tuple[StoreFailure, str]:
        """Why an operation raised `exc`, and the name of the class that says it."""
        ...


def is_cleared(value: str | None) -> bool:
    """A value a completed call wrote; anything else held (ARMED, or what an unknown writer left) is
    armed, and None is neither."""
    return value is not None and value.startswith(CLEARED)


class RedisStore:
    """The store on Redis or Valkey, as the URL names it (store_url.py): a standalone server, a
    cluster (any node named: the first redirect it answers with says so, and from then on redis-py's
    cluster client routes each key to its slot's master), or the master Sentinels name (redis-py's
    Sentinel client, which asks them again when the master it held turns replica). The client is
    imported here, when a store is configured."""

    __slots__ = (
        "_address",
        "_async_clients",
        "_cluster",
        "_sync_client",
        "_timeout_s",
        "errors",
        "operations",
    )

    def __init__(self, address: StoreAddress, timeout_s: float) -> None:
        import redis  # the extra: imported only when a store is configured

        self._address = address
        self._timeout_s = timeout_s
        self._cluster = False  # a node's URL: whether that node answered as a cluster's
        # Per event loop: the client, and whether it is the cluster's (one client per loop).
        self._async_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[bool, Any]] = (
            weakref.WeakKeyDictionary()
        )
        self._sync_client: tuple[bool, Any] | None = None
        self.errors = redis.exceptions
        self.operations = 0  # store operations begun: what the calls that touch the store cost

    def _timeouts(self) -> dict[str, Any]:
        return {"socket_timeout": self._timeout_s, "socket_connect_timeout": self._timeout_s}

    def _client(self, sync: bool) -> Any:
        """A new client for the deployment as now known: redis-py's own for each."""
        import redis.asyncio.cluster
        import redis.asyncio.retry
        import redis.backoff
        import redis.cluster
        import redis.retry

        # One retry, at once, on a fresh connection: a pooled connection the server dropped (it
        # restarted, or was demoted by a failover) fails once; the guard's bound caps the whole.
        retry = (redis.retry.Retry if sync else redis.asyncio.retry.Retry)(redis.backoff.NoBackoff(), 1)
        if self._address.sentinels:
            return self._sentinel_master(sync, retry)
        if self._cluster:
            cluster = redis.cluster.RedisCluster if sync else redis.asyncio.cluster.RedisCluster
            return cluster.from_url(self._address.node_url, retry=retry, **self._timeouts())
        standalone = redis.Redis if sync else redis.asyncio.Redis
        return standalone.from_url(
            self._address.node_url, retry=retry, health_check_interval=0, **self._timeouts()
        )

    def _sentinel_master(self, sync: bool, retry: Any) -> Any:
        import redis.asyncio.connection
        import redis.asyncio.sentinel
        import redis.connection
        import redis.sentinel

        # The client's own reading of the URL's credential, database and options (the master's).
        parse_url = redis.connection.parse_url if sync else redis.asyncio.connection.parse_url
        options: dict[str, Any] = {**self._timeouts(), **parse_url(self._address.node_url)}
        del options["host"], options["port"]
        if options.pop("connection_class", None) is not None:  # rediss+sentinel: TLS to all
            options["ssl"] = True
        sentinel_options = {k: v for k, v in options.items() if k.startswith(("socket_", "ssl"))}
        sentinel = (redis.sentinel.Sentinel if sync else redis.asyncio.sentinel.Sentinel)(
            list(self._address.sentinels), sentinel_kwargs=sentinel_options, retry=retry, **options
        )
        return sentinel.master_for(self._address.service)

    async def _async_client(self, loop: asyncio.AbstractEventLoop) -> Any:
        held = self._async_clients.get(loop)
        if held is not None and held[0] == self._cluster:
            return held[1]
        client = self._client(sync=False)
        self._async_clients[loop] = (self._cluster, client)
        if held is not None:  # the standalone client a cluster's node redirected
            await held[1].aclose()
        return client

    def _sync(self) -> Any:
        held = self._sync_client
        if held is not None and held[0] == self._cluster:
            return held[1]
        self._sync_client = (self._cluster, self._client(sync=True))
        if held is not None:
            held[1].close()
        return self._sync_client[1]

    async def _run(self, command: str, *args: object, **options: object) -> Any:
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is None:  # not asyncio (trio): the sync client, in a worker thread
            return await anyio.to_thread.run_sync(
                lambda: self._sync_run(command, args, options), abandon_on_cancel=True
            )
        client = await self._async_client(loop)
        return await client.execute_command(command, *args, **options)

    def _sync_run(self, command: str, args: tuple[object, ...], options: dict[str, object]) -> Any:
        try:
            return self._sync().execute_command(command, *args, **options)
        except Exception as exc:
            # Raised again in the caller's thread, perhaps inside a handler of its own, it would
            # lose what it was raised during (a TLS failure the client wrapped): kept as its cause.
            if exc.__cause__ is None:
                exc.__cause__ = exc.__context__
            raise

    async def _command(self, command: str, *args: object, **options: object) -> Any:
        """Its reply (`options` tell the client how to read it). A node's URL that redirects (MOVED
        or ASK) names a cluster's node: the operation goes again through the cluster client."""
        self.operations += 1
        try:
            return await self._run(command, *args, **options)
        except self.errors.AskError:  # MovedError too
            if self._address.sentinels or self._cluster:
                raise  # a redirect redis-py's own client did not follow: refused
            self._cluster = True
        return await self._run(command, *args, **options)

    async def arm(self, key: str, ttl_s: int) -> str | None:
        # get=True: the client hands back the value replaced, not its usual True/False for SET.
        return _text(await self._command("SET", PREFIX + key, ARMED, "EX", ttl_s, "GET", get=True))

    async def read(self, key: str) -> str | None:
        return _text(await self._command("GET", PREFIX + key))

    async def clear(self, key: str, ttl_s: int) -> None:
        await self._command("SET", PREFIX + key, CLEARED + secrets.token_hex(16), "EX", ttl_s)

    def failure_of(self, exc: BaseException) -> tuple[StoreFailure, str]:
        """Why an operation failed, and the class that says it (never its text, which may quote the
        URL): `refused` when the store (or the TLS check of it) answered with what it will answer
        again, `timeout` when it did not answer in time, else `unreachable`."""
        e = self.errors
        for cause in _chain(exc):
            if isinstance(cause, ssl.SSLError) and not isinstance(cause, ssl.SSLEOFError):
                return "refused", type(cause).__name__  # a certificate or protocol it will refuse again
            if isinstance(cause, (e.AuthenticationError, e.AuthorizationError)) or (
                isinstance(cause, e.ResponseError)
                and not isinstance(cause, (e.ClusterDownError, e.TryAgainError))  # it is mending
            ):
                return "refused", type(cause).__name__
        name = type(exc).__name__
        if isinstance(exc, (e.TimeoutError, TimeoutError)):
            return "timeout", name
        if isinstance(exc, (e.ConnectionError, e.ClusterError, e.RedisClusterException, OSError)):
            return "unreachable", name  # refused connections, no master known, a cluster mending
        if isinstance(exc, (e.ClusterDownError, e.TryAgainError)):
            return "unreachable", name
        return "refused", name

    def __repr__(self) -> str:  # never the URL: it may carry a credential
        return "RedisStore(<url withheld>)"


def _chain(exc: BaseException) -> list[BaseException]:
    """`exc` and what it was raised from or during (a client wraps a TLS failure in its own)."""
    chain: list[BaseException] = []
    cause: BaseException | None = exc
    while cause is not None and len(chain) < 8 and cause not in chain:
        chain.append(cause)
        cause = cause.__cause__ or cause.__context__
    return chain


def _text(reply: object) -> str | None:
    """A string reply as text (the clients hand back bytes); None stays None."""
    if reply is None:
        return None
    if isinstance(reply, bytes):
        return reply.decode("utf-8", "replace")
    if isinstance(reply, str):
        return reply
    raise TypeError("the store's reply is not a string")  # never read as a value: a failed operation
