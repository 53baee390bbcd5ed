"""The repeat guard's store URL: which deployment it names, read as the redis client reads it.

The rule: a URL is checked whole when `instrument()` runs, and a refusal names the field, never the
URL (it may carry a credential). `redis://`/`rediss://` name a node: a standalone server, or any
node of a Redis Cluster (the store finds out which when the node first answers).
`redis+sentinel://`/`rediss+sentinel://` name Sentinels: `[user:pass@]host:port[,host:port...]/
service[/db]`, the credential, database and options being the master's. The schemes are spelt in
lower case, as the redis client requires. The options (`?socket_timeout=...`, `ssl_ca_certs=...`)
are read by the client's own URL parser and tried on its own connection classes, so a misspelt
one is refused here, not at the first call.
"""

from __future__ import annotations

import inspect
import urllib.parse
from dataclasses import dataclass
from typing import Any, Final

NODE_SCHEMES: Final = ("redis", "rediss")
SENTINEL_SCHEMES: Final = ("redis+sentinel", "rediss+sentinel")
SCHEMES_SPOKEN: Final = "a redis://, rediss://, redis+sentinel:// or rediss+sentinel:// URL"


class StoreUrlProblem(ValueError):
    """What is wrong with a store URL, in words that never quote it."""


@dataclass(frozen=True)
class StoreAddress:
    """A store URL, read. `node_url`: the URL the redis client reads for a node, or, for Sentinels,
    one carrying the master's credential, database and options (its host is the first Sentinel's)."""

    node_url: str
    sentinels: tuple[tuple[str, int], ...] = ()  # empty: the URL names a node
    service: str = ""  # the master's name, for Sentinels

    @property
    def tls(self) -> bool:
        return self.node_url.startswith("rediss://")

    def __repr__(self) -> str:  # never the URL: it may carry a credential
        return "StoreAddress(<url withheld>)"


def address_of(text: str) -> StoreAddress:
    """`text` read as a store URL, or StoreUrlProblem saying what is wrong (never quoting it)."""
    if any(c.isspace() or ord(c) < 0x20 for c in text):
        raise StoreUrlProblem("must not hold blanks or control characters")
    scheme, colon, rest = text.partition("://")
    if not colon or scheme not in NODE_SCHEMES + SENTINEL_SCHEMES:
        raise StoreUrlProblem(f"must be {SCHEMES_SPOKEN} (the scheme in lower case)")
    if scheme in NODE_SCHEMES:
        _host_and_port(rest.partition("/")[0].rpartition("@")[2])
        _database(urllib.parse.urlsplit(text).path.lstrip("/"))
        return StoreAddress(text)
    netloc, _, path = rest.partition("/")
    path, question, query = path.partition("?")
    userinfo, at, hosts = netloc.rpartition("@")
    sentinels = tuple(_host_and_port(host, need_port=True) for host in hosts.split(","))
    service, _, database = path.partition("/")
    if not service:
        raise StoreUrlProblem("must name the master's service (redis+sentinel://host:port/service)")
    _database(database)
    first = hosts.split(",")[0]
    node_url = f"{scheme.partition('+')[0]}://{userinfo}{at}{first}/{database or '0'}{question}{query}"
    return StoreAddress(node_url, sentinels, urllib.parse.unquote(service))


def _host_and_port(text: str, *, need_port: bool = False) -> tuple[str, int]:
    try:
        parts = urllib.parse.urlsplit("//" + text)
        host, port = parts.hostname, parts.port  # the port raises ValueError unless a number in range
    except ValueError:
        raise StoreUrlProblem("is not a valid URL (a host or port)") from None
    if not host:
        raise StoreUrlProblem("must name a host")
    if port is None and need_port:
        raise StoreUrlProblem("must name each Sentinel as host:port")
    return host, port or 6379


def _database(text: str) -> None:
    if text and not (text.isascii() and text.isdigit()):
        raise StoreUrlProblem("must name the database as a number (redis://host:port/0)")


def client_problem(address: StoreAddress) -> str | None:
    """What the redis client refuses in the URL's options (its parser's, or an option none of its
    connection classes takes), or None; None too when the client is not installed (said apart)."""
    try:
        import redis.asyncio.connection
        import redis.connection
    except ImportError:
        return None
    for module in (redis.connection, redis.asyncio.connection):  # the trio and the asyncio client
        try:
            options: dict[str, Any] = module.parse_url(address.node_url)
        except ValueError:  # its text may quote the value: only that it failed is told
            return "has an option whose value the redis client cannot read"
        connection_class = options.pop("connection_class", module.Connection)
        try:
            connection_class(**options)  # made, not connected
        except TypeError:
            unknown = sorted(set(options) - _parameters(connection_class))
            named = ", ".join(name for name in unknown if name.isidentifier() and len(name) <= 64)
            return f"has an option the redis client does not take ({named or 'unnamed'})"
        except Exception:  # the client's own check of a value (its text may quote it)
            return "has an option whose value the redis client cannot use"
    return None


def _parameters(cls: type) -> set[str]:
    """The keyword parameters a connection class and its bases take."""
    names: set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is not None:
            names.update(
                name
                for name, parameter in inspect.signature(init).parameters.items()
                if parameter.kind in (parameter.KEYWORD_ONLY, parameter.POSITIONAL_OR_KEYWORD)
            )
    return names
