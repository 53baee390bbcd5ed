"""The repeat guard's shared store: Redis (or Valkey), through the `redis` client (extra `[redis]`).

The rule: the store never hurts the host. It holds only keyed hashes under a prefix, each with the
guard's window as its TTL, and its URL (which may carry a credential) is never logged, recorded or
echoed; every error it raises is told by its kind alone. A key says "armed" (`1`, written by
`SET key 1 EX s GET`, which hands back what it replaced) or "cleared" (a random token, written by
`SET key cleared:TOKEN EX s` when an identical call completed): a fresh token is positive evidence
of a completion after an arm, and a missing key is evidence of nothing (Redis 6.2 or later). Each
operation is bounded by the guard (guard.py); here a client's own socket timeouts are the same
bound, so nothing it starts outlives it by much. Under asyncio the asyncio client runs on the
caller's loop (one client per loop); under trio the sync client runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import secrets
import weakref
from typing import Any, Final, Protocol

import anyio.to_thread

PREFIX: Final = "otel-mcp-replay:guard:"
ARMED: Final = "1"
CLEARED: Final = "cleared:"  # then the token of one completion


class StoreCredentialRefused(Exception):
    """The store refused the credential (a wrong password, none where one is required): a
    configuration error, which no later call will undo."""


class StoreTimeout(Exception):
    """The store's client gave up waiting within the bound."""


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


def is_cleared(value: str | None) -> bool:
    """A value a completed call wrote; anything else held (ARMED, or what an unknown writer left) is
    armed, and None is neither."""
    return value is not None and value.startswith(CLEARED)


class RedisStore:
    """The store on a Redis server; the client is imported here, when a store is configured."""

    __slots__ = ("_async_clients", "_asyncio", "_sync_client", "_timeout_s", "_url", "errors", "operations")

    def __init__(self, url: str, timeout_s: float) -> None:
        import redis  # the extra: imported only when a store is configured
        import redis.asyncio

        self._url = url
        self._timeout_s = timeout_s
        self._asyncio = redis.asyncio
        self._async_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = (
            weakref.WeakKeyDictionary()
        )
        self._sync_client: Any = None
        self.errors = redis.exceptions
        self.operations = 0  # store operations begun: what the calls that touch the store cost

    def _client_options(self, retry: Any) -> dict[str, Any]:
        # One retry, at once, on a fresh connection: a pooled connection the server dropped (it
        # restarted) fails once; the guard's bound still caps the whole operation.
        return {
            "socket_timeout": self._timeout_s,
            "socket_connect_timeout": self._timeout_s,
            "retry": retry,
            "health_check_interval": 0,
        }

    def _async_client(self, loop: asyncio.AbstractEventLoop) -> Any:
        client = self._async_clients.get(loop)
        if client is None:
            from redis.asyncio.retry import Retry
            from redis.backoff import NoBackoff

            client = self._asyncio.Redis.from_url(self._url, **self._client_options(Retry(NoBackoff(), 1)))
            self._async_clients[loop] = client
        return client

    def _sync(self) -> Any:
        if self._sync_client is None:
            import redis
            from redis.backoff import NoBackoff
            from redis.retry import Retry

            self._sync_client = redis.Redis.from_url(self._url, **self._client_options(Retry(NoBackoff(), 1)))
        return self._sync_client

    async def _execute(self, command: str, *args: object, **options: object) -> Any:
        self.operations += 1
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not asyncio (trio): the sync client, in a worker thread
            client = self._sync()
            return await anyio.to_thread.run_sync(
                lambda: client.execute_command(command, *args, **options), abandon_on_cancel=True
            )
        return await self._async_client(loop).execute_command(command, *args, **options)

    async def _command(self, command: str, *args: object, **options: object) -> Any:
        """Its reply (`options` tell the client how to read it); a refused credential or a client
        timeout raised as the guard tells them."""
        try:
            return await self._execute(command, *args, **options)
        except self.errors.AuthenticationError:
            raise StoreCredentialRefused from None
        except self.errors.ResponseError as exc:
            if "NOAUTH" in str(exc) or "WRONGPASS" in str(exc):
                raise StoreCredentialRefused from None
            raise
        except self.errors.TimeoutError:
            raise StoreTimeout from None

    async def arm(self, key: str, ttl_s: int) -> str | None:
        # get=True: the client hands back the value replaced, not its usual True/False for SET.
        return _text(await self._command("SET", PREFIX + key, ARMED, "EX", ttl_s, "GET", get=True))

    async def read(self, key: str) -> str | None:
        return _text(await self._command("GET", PREFIX + key))

    async def clear(self, key: str, ttl_s: int) -> None:
        await self._command("SET", PREFIX + key, CLEARED + secrets.token_hex(16), "EX", ttl_s)

    def __repr__(self) -> str:  # never the URL: it may carry a credential
        return "RedisStore(<url withheld>)"


def _text(reply: object) -> str | None:
    """A string reply as text (the clients hand back bytes); None stays None."""
    if reply is None:
        return None
    if isinstance(reply, bytes):
        return reply.decode("utf-8", "replace")
    if isinstance(reply, str):
        return reply
    raise TypeError("the store's reply is not a string")  # never read as a value: a failed operation
