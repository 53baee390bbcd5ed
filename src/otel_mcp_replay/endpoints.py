"""Endpoints: which declaration a request's URL falls under, and the origin a record names.

The rule: a URL selects a declaration; it never refuses a request. The endpoint keys the app
declared are checked once, by servers_of (an invalid key is refused naming its ordinal, never its
URL: it may carry credentials). The URL of a request is read by origin_of and Servers.declaration_for,
which never raise on any text: a URL they cannot parse (an IPv6 zone, port 0, a host no origin can
spell) matches no declaration, so it is compatibility, and its record names it UNKNOWN_ENDPOINT.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final, NamedTuple
from urllib.parse import urlsplit

from otel_mcp_replay.declaration import COMPATIBILITY, Declaration, declaration_of
from otel_mcp_replay.fields import type_error, value_error

_HOST: Final = re.compile(r"[a-z0-9_.-]{1,253}", re.ASCII)
_IPV6: Final = re.compile(r"[0-9a-f:.]{2,45}", re.ASCII)
# What origin_of writes, and all a record's endpoint may be when it is not a label.
ORIGIN: Final = re.compile(r"https?://(?:[a-z0-9_.-]{1,253}|\[[0-9a-f:.]{2,45}\]):([0-9]{1,5})", re.ASCII)
# The record's endpoint for a URL with no origin the plugin can spell (a label's form, so a record
# holding it passes the allow-list; it names nothing of the URL).
UNKNOWN_ENDPOINT: Final = "unknown"
LOCAL_ENDPOINT: Final = "local"  # a call that went another way than HTTP (stdio, in-process)
_DEFAULT_PORTS: Final = MappingProxyType({"http": 80, "https": 443})


def _endpoint_of(url: str) -> tuple[str, str] | None:
    """(origin, path) of an http(s) URL, or None; never raises. Userinfo, query and fragment are
    dropped. The path loses its trailing slashes: `/mcp/` and `/mcp` are one endpoint (servers
    redirect one to the other), and `/` is the origin itself."""
    try:
        parts = urlsplit(url)
        port = parts.port  # raises ValueError for a port that is not a number in range
        scheme = parts.scheme  # urlsplit lower-cases the scheme
        host = parts.hostname  # lower-cased, without brackets or userinfo
        path = parts.path
    except ValueError:  # also what urlsplit raises for a bracket it cannot close
        return None
    if scheme not in _DEFAULT_PORTS or not host:
        return None
    if port is None:
        port = _DEFAULT_PORTS[scheme]
    if not 1 <= port <= 65535:
        return None
    if ":" in host:
        if not _IPV6.fullmatch(host):
            return None  # a zone (`fe80::1%eth0`) or anything else no origin spells
        host = f"[{host}]"
    else:
        if not host.isascii():
            try:
                host = host.encode("idna").decode("ascii")
            except UnicodeError:
                return None
        if not _HOST.fullmatch(host):
            return None
    return f"{scheme}://{host}:{port}", path.rstrip("/")


def origin_of(url: object) -> str:
    """The endpoint a record names for `url`, whatever it is given; never raises.

    `scheme://host:port` (lower-case host, explicit port, nothing else: never a path, query or
    credential) for an http(s) URL with a host the plugin can spell and a port from 1 to 65535;
    UNKNOWN_ENDPOINT for anything else, including what is not a str.
    """
    endpoint = _endpoint_of(url) if isinstance(url, str) else None
    return UNKNOWN_ENDPOINT if endpoint is None else endpoint[0]


class SpanEndpoint(NamedTuple):
    """Where a request went, as the HTTP and MCP conventions' span attributes say it: host, port,
    scheme, and `url.full` with its path and query REDACTED (they may carry credentials: a path
    secret, a session id) and no userinfo."""

    address: str
    port: int
    scheme: str
    url_full: str


def span_endpoint_of(url: object) -> SpanEndpoint | None:
    """The span endpoint of an http(s) URL, or None; never raises (read as origin_of reads)."""
    endpoint = _endpoint_of(url) if isinstance(url, str) else None
    if endpoint is None:
        return None
    origin, path = endpoint
    scheme, _, authority = origin.partition("://")
    host, _, port = authority.rpartition(":")
    query = "?" in url.partition("#")[0] if isinstance(url, str) else False
    url_full = origin + ("/" + URL_REDACTED if path else "/") + ("?" + URL_REDACTED if query else "")
    return SpanEndpoint(host.strip("[]"), int(port), scheme, url_full)


URL_REDACTED: Final = "REDACTED"  # the word opentelemetry-util-http writes into URLs

_DECLARATION_CACHE_SIZE: Final = 1024


@dataclass(frozen=True)
class Servers:
    """The declarations by endpoint. Build with servers_of; `declaration_for` is called per HTTP request."""

    by_origin: Mapping[str, Declaration] = field(default_factory=dict, repr=False, hash=False)
    by_path: Mapping[tuple[str, str], Declaration] = field(default_factory=dict, repr=False, hash=False)
    # The declaration of a URL string (see _declaration_for), its answers cached in C: one looked up per HTTP
    # request costs no Python frame. The cache changes no answer, so it takes no part in equality.
    declaration_for: Callable[[str], Declaration] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_origin", MappingProxyType(dict(self.by_origin)))
        object.__setattr__(self, "by_path", MappingProxyType(dict(self.by_path)))
        # Bounded: endpoints are few; a flood of distinct URLs only costs parsing.
        cached = functools.lru_cache(maxsize=_DECLARATION_CACHE_SIZE)(self._declaration_for)
        object.__setattr__(self, "declaration_for", cached)

    def __repr__(self) -> str:  # never the URLs: a path or userinfo may carry credentials
        return f"Servers({len(self)} endpoints)"

    def __len__(self) -> int:
        return len(self.by_origin) + len(self.by_path)

    def _declaration_for(self, url: str) -> Declaration:
        """The declaration of `url`'s endpoint: its exact path, else its origin, else COMPATIBILITY.

        Never raises for a str, whatever its text: a URL that cannot be parsed is COMPATIBILITY.
        Raises TypeError for anything else (a caller's mistake, not a URL).
        """
        if not isinstance(url, str):
            raise TypeError("Servers.declaration_for needs the URL as a str")
        if not self.by_origin and not self.by_path:
            return COMPATIBILITY
        return self._lookup(url)

    def _lookup(self, url: str) -> Declaration:
        endpoint = _endpoint_of(url)
        if endpoint is None:
            return COMPATIBILITY
        origin, path = endpoint
        if path:
            exact = self.by_path.get(endpoint)
            if exact is not None:
                return exact
        return self.by_origin.get(origin, COMPATIBILITY)

    def strictest_on_origin(self, url: str) -> Declaration:
        """For a connection whose own URL cannot be told (a legacy-SSE stream opened before
        instrument()): `url`'s declaration, unless any endpoint on its origin is declared
        app-authorized, then that one (fail closed: its calls are refused, never repeated)."""
        found = self.declaration_for(url)
        endpoint = _endpoint_of(url)
        if found.policy == "app-authorized" or endpoint is None:
            return found
        origin = endpoint[0]
        candidates = [self.by_origin.get(origin, COMPATIBILITY)]
        candidates += [declared for (o, _), declared in self.by_path.items() if o == origin]
        return next((d for d in candidates if d.policy == "app-authorized"), found)


NO_SERVERS: Final = Servers()


def servers_of(raw: object, where: str = "servers") -> Servers:
    """A mapping of endpoint URL to declaration (a mapping, or a Declaration already built).

    None is no servers; a Servers is returned as it is. Each endpoint is named in a refusal by its
    ordinal from 0, `servers[1]`, never by its URL.
    """
    if raw is None:
        return NO_SERVERS
    if isinstance(raw, Servers):
        return raw
    if not isinstance(raw, Mapping):
        type_error(where, "must be a mapping of endpoint URL to declaration")
    by_origin: dict[str, Declaration] = {}
    by_path: dict[tuple[str, str], Declaration] = {}
    ordinal_of: dict[tuple[str, str], int] = {}
    for i, (url, raw_declaration) in enumerate(raw.items()):
        path = f"{where}[{i}]"
        if not isinstance(url, str):
            type_error(path, "the endpoint URL must be a string")
        endpoint = _endpoint_of(url)
        if endpoint is None:
            value_error(path, "the endpoint is not an http(s) URL with a host and a valid port")
        if endpoint in ordinal_of:
            value_error(path, f"names the same endpoint as {where}[{ordinal_of[endpoint]}]")
        ordinal_of[endpoint] = i
        declaration = declaration_of(raw_declaration, path)
        if endpoint[1]:
            by_path[endpoint] = declaration
        else:
            by_origin[endpoint[0]] = declaration
    return Servers(by_origin=by_origin, by_path=by_path)
