"""Redaction of every span on its way to an exporter.

The rule: a span reaches the wrapped processor or exporter only after every rule below has looked
at it: as a redacted copy, or as the very same object when no rule changed anything in it. A span
whose redaction fails is dropped, never passed on raw.

The rules, on every span, event and link attribute (and the span's status description):
- any event named `mcp.tool.request_attempts`, whoever wrote it, must pass record.validate_record
  (the allow-list), or be the very record this library built, checked and vouched for (record.vouch);
  a record it refuses is replaced, whole, by an `mcp.tool.request_attempts.refused`
  event with no attributes, and counted (`on_refused`). Never trimmed.
- a key matching OTEL_PYTHON_MCP_REPLAY_REDACT_KEYS or the built-in sensitive words (authorization,
  cookie, token, secret, password, passwd, pwd, passphrase, api key, private key, access key,
  credential(s), jwt, bearer, idempotency key, connection string; compared word by word, so
  `gen_ai.usage.input_tokens` or `http.request.resend_count` are left alone) has its value masked
  as "[REDACTED]"; a sequence keeps its length, each item masked; a number or bool under such a key
  becomes the string "[REDACTED]" too (a numeric PIN is still a secret).
- session ids (`mcp.session.id`, and any key whose words read "session id", e.g. a captured
  `mcp-session-id` header) are replaced by "h:" + the first 16 hex digits of
  HMAC-SHA256(session key, id): one session keeps one hash, a raw id never leaves. The key is
  OTEL_PYTHON_MCP_REPLAY_SESSION_KEY (at least 16 bytes) when set, else 32 random bytes drawn once
  per process: then hashes correlate within one process (and its forks) only; set the same key in
  every process whose spans must correlate across processes or restarts.
- URL attributes (`url.full`, `http.url`, `url.original`, `http.target`, keys ending in url/uri,
  referer or location) keep scheme, host, port and path; userinfo becomes REDACTED[:REDACTED], each
  query and fragment value REDACTED (keys kept). `url.query` and `url.fragment` get the value rule.
  Any other string holding `scheme://` has the URLs inside it treated the same way (an exception
  message or stack trace that quotes a request URL).
- substrings matching OTEL_PYTHON_MCP_REPLAY_REDACT_VALUES become "[REDACTED]" (inside a record, a
  matching value is replaced whole by "REDACTED", which keeps the record valid).
Resource and instrumentation-scope attributes, span and event names are configuration, not request
data, and are passed unchanged.

User patterns: comma lists (a comma inside `{m,n}`, `[...]` or after a backslash is part of the
pattern). Key patterns are searched case-insensitively, value patterns as written. Each list holds
at most 32 patterns of at most 256 characters. A pattern that matches the empty string, or that
nests an unbounded repetition inside another repetition (`(a+)+`, `(\\w*)*`: exponential
backtracking), is refused; write the inner one possessive (`a++`) or atomic (`(?>a+)`). Other
super-linear shapes (overlapping alternatives under a repetition, `(a|a)+`; many adjacent `.*`) are
not detected: treat these patterns as code. An error names the variable and the entry's position,
never the pattern or a value.
"""

from __future__ import annotations

import hashlib
import hmac
import importlib
import logging
import os
import re
import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import pairwise
from typing import Any, Final

from opentelemetry.context import Context
from opentelemetry.sdk.trace import Event, ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import Link, Status
from opentelemetry.util.types import Attributes

from otel_mcp_replay import environment_variables as ev
from otel_mcp_replay import telemetry as t
from otel_mcp_replay.record import start_vouching, validate_record, vouched_record
from otel_mcp_replay.runtime import count_refused

_logger = logging.getLogger(__name__)

ENV_REDACT_KEYS: Final = ev.OTEL_PYTHON_MCP_REPLAY_REDACT_KEYS
ENV_REDACT_VALUES: Final = ev.OTEL_PYTHON_MCP_REPLAY_REDACT_VALUES
ENV_SESSION_KEY: Final = ev.OTEL_PYTHON_MCP_REPLAY_SESSION_KEY

MASK: Final = "[REDACTED]"
URL_MASK: Final = "REDACTED"  # the word opentelemetry-util-http already writes into URLs
SESSION_HASH_PREFIX: Final = "h:"
SESSION_HASH_HEX_DIGITS: Final = 16

MAX_PATTERNS: Final = 32
MAX_PATTERN_LEN: Final = 256
MIN_SESSION_KEY_BYTES: Final = 16

# Drawn once per process, so that every processor and exporter of the process hashes alike.
_PROCESS_SESSION_KEY: Final = secrets.token_bytes(32)
# Per-rules caches (key -> action, session id -> hash) stop growing here; beyond it, work is redone.
_CACHE_MAX: Final = 4096

# Actions a key's value gets; decided once per key and cached.
_PLAIN, _MASK, _HASH, _URL, _PARAMS = range(5)

_SENSITIVE_WORD_ENDINGS: Final = (
    "authorization",
    "cookie",
    "cookies",
    "token",
    "secret",
    "secrets",
    "password",
    "passwords",
    "passwd",
    "pwd",
    "passphrase",
    "apikey",
    "apikeys",
    "privatekey",
    "accesskey",
    "credential",
    "credentials",
    "jwt",
    "bearer",
)
_SENSITIVE_WORD_PAIRS: Final = frozenset(
    {
        ("api", "key"),
        ("private", "key"),
        ("access", "key"),
        ("secret", "key"),
        ("auth", "key"),
        ("idempotency", "key"),
        ("connection", "string"),
    }
)
# Semantic-convention keys that hold a sensitive word but no secret.
_NOT_SENSITIVE: Final = frozenset({"gen_ai.token.type"})
_URL_KEYS: Final = frozenset({"url.full", "http.url", "url.original", "http.target"})
_URL_LAST_WORDS: Final = frozenset({"url", "uri", "referer", "referrer", "location"})
_PARAM_KEYS: Final = frozenset({"url.query", "url.fragment"})
# Our own namespace: counts and contract words, never a built-in match (user key rules still apply).
_OWN_PREFIX: Final = "mcp.replay."
# Free-text scalars of a record (the rest are counts, bools and contract words).
_RECORD_TEXT_KEYS: Final = (t.ENDPOINT, t.GEN_AI_TOOL_NAME, t.JSONRPC_REQUEST_ID)

_WORD: Final = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_SCHEME: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
_URL_IN_TEXT: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>`]+")
_PARAM_SEP: Final = re.compile(r"([&;])")
_PORT: Final = re.compile(r"[0-9]*")


class _RuleError(ValueError):
    """A bad rule, named by its field and the entry's position; never its text."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


# ---------------------------------------------------------------------------------------------
# User patterns


def split_patterns(text: str) -> list[str]:
    """A comma list of regexes; commas inside `{}`, `[]` or after a backslash belong to the pattern."""
    entries: list[str] = []
    current: list[str] = []
    escaped = in_class = False
    braces = 0
    for char in text:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
        elif char == "{":
            braces += 1
        elif char == "}" and braces:
            braces -= 1
        elif char == "," and not braces:
            entries.append("".join(current).strip())
            current = []
            continue
        current.append(char)
    entries.append("".join(current).strip())
    return [entry for entry in entries if entry]


def _sre_parser() -> Any:
    # The stdlib's own regex parser: re._parser since 3.11, sre_parse before. It is the only way to
    # see a pattern's structure; if a future Python moves it, the cost check is skipped, not the rule.
    for name in ("re._parser", "sre_parse"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    return None


_PARSER: Final = _sre_parser()


def _nests_unbounded_repeat(pattern: str) -> bool:
    """True when a backtracking unbounded repetition sits inside another repetition."""
    if _PARSER is None:
        return False
    backtracking = {getattr(_PARSER, "MAX_REPEAT", None), getattr(_PARSER, "MIN_REPEAT", None)} - {None}
    # Possessive repeats and atomic groups never backtrack into their body: a fresh start inside.
    resets = {getattr(_PARSER, "POSSESSIVE_REPEAT", None), getattr(_PARSER, "ATOMIC_GROUP", None)} - {None}
    unbounded = getattr(_PARSER, "MAXREPEAT", None)
    subpattern_type = getattr(_PARSER, "SubPattern", None)

    def children(argument: Any) -> Iterable[Any]:
        if subpattern_type is not None and isinstance(argument, subpattern_type):
            yield argument
        elif isinstance(argument, (list, tuple)):
            for item in argument:
                yield from children(item)

    def walk(sub: Any, inside_repeat: bool) -> bool:
        for op, argument in sub:
            if op in backtracking:
                _low, high, body = argument
                if inside_repeat and high == unbounded:
                    return True
                if walk(body, inside_repeat or high == unbounded or high > 1):
                    return True
            elif any(walk(child, inside_repeat and op not in resets) for child in children(argument)):
                return True
        return False

    try:
        return walk(_PARSER.parse(pattern), False)
    except Exception:  # the parser refused it: re.compile has already said so
        return False


def _compile_all(field: str, entries: Iterable[str], flags: int) -> tuple[re.Pattern[str], ...]:
    listed = list(entries)
    if len(listed) > MAX_PATTERNS:
        raise _RuleError(field, f"more than {MAX_PATTERNS} patterns")
    compiled: list[re.Pattern[str]] = []
    for position, entry in enumerate(listed, start=1):
        if not isinstance(entry, str):
            raise _RuleError(field, f"entry {position} is not a string")
        if len(entry) > MAX_PATTERN_LEN:
            raise _RuleError(field, f"entry {position} is longer than {MAX_PATTERN_LEN} characters")
        try:
            pattern = re.compile(entry, flags)
        except (re.error, ValueError, TypeError, OverflowError, RecursionError):
            # `from None`: re.error's own text quotes positions and, in places, the pattern.
            raise _RuleError(field, f"entry {position} is not a valid regular expression") from None
        if pattern.match("") is not None:
            raise _RuleError(field, f"entry {position} matches the empty string")
        if _nests_unbounded_repeat(entry):
            raise _RuleError(
                field,
                f"entry {position} nests an unbounded repetition inside another repetition "
                "(exponential time); make the inner one possessive or atomic",
            )
        compiled.append(pattern)
    return tuple(compiled)


def _session_key_bytes(field: str, key: bytes | str | None) -> bytes:
    if key is None:
        return _PROCESS_SESSION_KEY
    raw = key.encode("utf-8") if isinstance(key, str) else bytes(key)
    if len(raw) < MIN_SESSION_KEY_BYTES:
        raise _RuleError(field, f"shorter than {MIN_SESSION_KEY_BYTES} bytes")
    return raw


# ---------------------------------------------------------------------------------------------
# URLs


def _mask_params(text: str) -> str:
    """Each `k=v` keeps k and loses v; an item without `=` is masked whole; empty values stay empty."""
    if not text:
        return text
    parts = _PARAM_SEP.split(text)
    for index in range(0, len(parts), 2):
        part = parts[index]
        if not part:
            continue
        name, equals, value = part.partition("=")
        if not equals:
            parts[index] = URL_MASK
        elif value:
            parts[index] = f"{name}={URL_MASK}"
    return "".join(parts)


def mask_url(url: str) -> str:
    """Scheme, host, port and path kept; userinfo, query values and fragment values REDACTED.

    Never raises: a string that is not a URL is read as `authority/path?query#fragment` as far as
    it goes. Userinfo holding an unescaped `/` is not a URL by RFC 3986 and is read as a path.
    """
    start = -1
    scheme = _SCHEME.match(url)
    if scheme:
        start = scheme.end()
    elif url.startswith("//"):
        start = 2
    elif not url.startswith("/"):
        start = 0  # no scheme: a bare `user:pass@host/...` is still read as having an authority
    if start >= 0:
        end = len(url)
        for stop in "/?#":
            found = url.find(stop, start, end)
            if found >= 0:
                end = found
        at = url.rfind("@", start, end)
        if at < 0:
            # `user:pa?ss@host`: an unescaped ? or # inside a password ends the RFC authority
            # early. A colon followed by something that is not a port means userinfo: reach on
            # to the last @ before the path.
            colon = url.find(":", start, end)
            if colon >= 0 and not _PORT.fullmatch(url, colon + 1, end):
                slash = url.find("/", start)
                at = url.rfind("@", start, len(url) if slash < 0 else slash)
                if at >= 0:
                    end = at
        if at >= 0:
            userinfo = url[start:at]
            masked = f"{URL_MASK}:{URL_MASK}" if ":" in userinfo else URL_MASK
            url = url[:start] + masked + url[at:]
    rest, hash_sign, fragment = url.partition("#")
    head, question, query = rest.partition("?")
    out = head
    if question:
        out += "?" + _mask_params(query)
    if hash_sign:
        out += "#" + _mask_params(fragment)
    return out


def _mask_urls_in_text(text: str) -> str:
    return _URL_IN_TEXT.sub(lambda match: mask_url(match.group()), text)


# ---------------------------------------------------------------------------------------------
# Keys


def _key_words(key: str) -> list[str]:
    return [word.lower() for word in _WORD.findall(key)]


def _is_sensitive(words: Sequence[str]) -> bool:
    if any(word.endswith(_SENSITIVE_WORD_ENDINGS) for word in words):
        return True
    return any(pair in _SENSITIVE_WORD_PAIRS for pair in pairwise(words))


def _is_session_id(words: Sequence[str]) -> bool:
    if any(word.endswith("sessionid") for word in words):
        return True
    return ("session", "id") in set(pairwise(words))


# ---------------------------------------------------------------------------------------------
# The rebuilt span, event and link: frozen like the originals, dropped counts carried over.


class _RedactedEvent(Event):
    def __init__(self, name: str, attributes: Attributes, timestamp: int, dropped: int) -> None:
        super().__init__(name, attributes, timestamp)
        self._dropped = dropped

    @property
    def dropped_attributes(self) -> int:
        return self._dropped


class _RedactedLink(Link):
    def __init__(self, original: Link, attributes: Attributes) -> None:
        super().__init__(original.context, attributes)
        self._dropped = original.dropped_attributes

    @property
    def dropped_attributes(self) -> int:
        return self._dropped


class _RedactedSpan(ReadableSpan):
    """A copy of an ended span with redacted attributes, events, links and status."""

    def __init__(
        self,
        original: ReadableSpan,
        attributes: Attributes,
        events: Sequence[Event],
        links: Sequence[Link],
        status: Status,
    ) -> None:
        super().__init__(
            name=original.name,
            context=original.context,
            parent=original.parent,
            resource=original.resource,
            attributes=attributes,
            events=events,
            links=links,
            kind=original.kind,
            # The deprecated property warns on read; the field is carried as it is.
            instrumentation_info=getattr(original, "_instrumentation_info", None),
            status=status,
            start_time=original.start_time,
            end_time=original.end_time,
            instrumentation_scope=original.instrumentation_scope,
        )
        self._dropped = (original.dropped_attributes, original.dropped_events, original.dropped_links)

    @property
    def dropped_attributes(self) -> int:
        return self._dropped[0]

    @property
    def dropped_events(self) -> int:
        return self._dropped[1]

    @property
    def dropped_links(self) -> int:
        return self._dropped[2]


def _plain_dict(attributes: Attributes) -> dict[str, Any]:
    if not attributes:
        return {}
    # BoundedAttributes and MappingProxyType over it copy their dict in C; anything else is read.
    copied = attributes.copy() if hasattr(attributes, "copy") else None
    return copied if type(copied) is dict else dict(attributes)


# ---------------------------------------------------------------------------------------------
# The rules


class RedactionRules:
    """Built-in rules plus the user's key and value patterns and the session-hash key.

    `redact_keys` and `redact_values` are regexes (see the module docstring for their limits);
    `session_key` is the HMAC key for session ids (None: this process's random key). A bad rule
    raises ValueError naming the argument and the entry's position, never its text.
    """

    def __init__(
        self,
        *,
        redact_keys: Iterable[str] = (),
        redact_values: Iterable[str] = (),
        session_key: bytes | str | None = None,
    ) -> None:
        self._key_patterns = _compile_all("redact_keys", redact_keys, re.IGNORECASE)
        self._value_patterns = _compile_all("redact_values", redact_values, 0)
        self._session_key = _session_key_bytes("session_key", session_key)
        self._actions: dict[str, int] = {}
        self._hashes: dict[str, str] = {}

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> RedactionRules:
        """The rules the environment declares; ValueError naming the first bad variable."""
        settings, errors = _read_env(os.environ if environ is None else environ)
        if errors:
            raise errors[0]
        return cls(**settings)

    @classmethod
    def from_env_or_builtin(cls, environ: Mapping[str, str] | None = None) -> RedactionRules:
        """The same, never raising: a bad variable is logged at ERROR and ignored, the others apply.

        For auto-instrumentation, where an exception would stop the app or the other instrumentors.
        A bad key or value list leaves the built-in rules in force; a bad session key leaves the
        per-process random key.
        """
        settings, errors = _read_env(os.environ if environ is None else environ)
        for error in errors:
            _logger.error("otel-mcp-replay redaction: %s; that variable is ignored", error)
        return cls(**settings)

    # -- values ----------------------------------------------------------------------------

    def _action(self, key: str) -> int:
        action = self._actions.get(key)
        if action is None:
            action = self._classify(key)
            if len(self._actions) < _CACHE_MAX:
                self._actions[key] = action
        return action

    def _classify(self, key: str) -> int:
        if any(pattern.search(key) for pattern in self._key_patterns):
            return _MASK
        if key.startswith(_OWN_PREFIX) or key in _NOT_SENSITIVE:
            return _PLAIN
        words = _key_words(key)
        if _is_sensitive(words):
            return _MASK
        if _is_session_id(words):
            return _HASH
        if key in _URL_KEYS or (words and words[-1] in _URL_LAST_WORDS):
            return _URL
        if key in _PARAM_KEYS:
            return _PARAMS
        return _PLAIN

    def _text(self, text: str) -> str:
        """Built-in URL masking inside free text, then the user's value patterns."""
        out = _mask_urls_in_text(text) if "://" in text else text
        for pattern in self._value_patterns:
            out = pattern.sub(MASK, out)
        return text if out == text else out

    def _hash(self, session_id: str) -> str:
        hashed = self._hashes.get(session_id)
        if hashed is None:
            digest = hmac.new(self._session_key, session_id.encode("utf-8", "surrogatepass"), hashlib.sha256)
            hashed = SESSION_HASH_PREFIX + digest.hexdigest()[:SESSION_HASH_HEX_DIGITS]
            if len(self._hashes) >= _CACHE_MAX:
                self._hashes.clear()
            self._hashes[session_id] = hashed
        return hashed

    def _scalar(self, action: int, value: Any, hash_sessions: bool) -> Any:
        if action == _PLAIN:
            return self._text(value) if type(value) is str else value
        if action == _MASK:
            return MASK
        if action == _HASH:
            if not hash_sessions:
                return value
            return self._hash(value if type(value) is str else str(value))
        if type(value) is not str:
            return value
        if action == _URL and "@" not in value and "?" not in value and "#" not in value:
            masked = value  # no userinfo, query or fragment: mask_url would return it as it is
        else:
            masked = mask_url(value) if action == _URL else _mask_params(value)
        masked = self._text(masked) if self._value_patterns else masked
        return value if masked == value else masked

    def _value(self, action: int, value: Any, hash_sessions: bool) -> Any:
        """The redacted value, or `value` itself (the same object) when nothing changed."""
        if type(value) is not tuple and type(value) is not list:
            new = self._scalar(action, value, hash_sessions)
            return value if new == value and type(new) is type(value) else new
        if not value:
            return value
        if action == _PLAIN and not self._value_patterns:
            if type(value[0]) is not str:
                return value
            # One C-level scan instead of one per item; exact, "://" cannot span the separator.
            if "://" not in "\x00".join(value):
                return value
        if action == _MASK:
            return value if all(item == MASK for item in value) else (MASK,) * len(value)
        items = tuple(self._scalar(action, item, hash_sessions) for item in value)
        return value if items == tuple(value) else items

    def _attributes(self, attributes: Attributes, hash_sessions: bool) -> dict[str, Any] | None:
        """A redacted copy of `attributes`, or None when no rule changed any of them."""
        if not attributes:
            return None
        copied = _plain_dict(attributes)
        changed = False
        actions = self._actions
        plain_is_builtin_only = not self._value_patterns
        for key, value in copied.items():
            action = actions.get(key)
            if action is None:
                action = self._action(key)
            # The common case inline: a plain scalar that holds no URL has nothing to change.
            if action == _PLAIN and plain_is_builtin_only:
                kind = type(value)
                if kind is str:
                    if "://" not in value:
                        continue
                elif kind is not tuple and kind is not list:
                    continue
            new = self._value(action, value, hash_sessions)
            if new is not value:
                copied[key] = new
                changed = True
        return copied if changed else None

    # -- events and the record ---------------------------------------------------------------

    def _record(self, event: Event) -> tuple[Event, int]:
        attributes = event.attributes
        # A record this library filed was checked at build and cannot have changed since.
        accepted = vouched_record(attributes)
        changed = False
        if accepted is None:
            accepted = validate_record(attributes)
            if accepted is None:
                return _RedactedEvent(t.RECORD_REFUSED_EVENT, {}, event.timestamp, 0), 1
            # Equal by value (identity short-cuts the columns) means the original event says the same.
            changed = accepted != _plain_dict(attributes)
        for key in _RECORD_TEXT_KEYS:
            value = accepted[key]
            # Inside a record a match replaces the value whole, with a word the allow-list accepts.
            if type(value) is str and self._text(value) is not value:
                accepted[key] = URL_MASK
                changed = True
        if not changed:
            return event, 0
        dropped = getattr(event, "dropped_attributes", 0)
        return _RedactedEvent(event.name, accepted, event.timestamp, dropped), 0

    def _event(self, event: Event, hash_sessions: bool) -> tuple[Event, int]:
        name = event.name
        if name == t.RECORD_EVENT:
            return self._record(event)
        if name == t.RECORD_REFUSED_EVENT:
            # Carries no values, whoever wrote it.
            if not event.attributes:
                return event, 0
            return _RedactedEvent(name, {}, event.timestamp, 0), 0
        new = self._attributes(event.attributes, hash_sessions)
        if new is None:
            return event, 0
        return _RedactedEvent(name, new, event.timestamp, getattr(event, "dropped_attributes", 0)), 0

    # -- the span ------------------------------------------------------------------------------

    def redact(self, span: ReadableSpan) -> tuple[ReadableSpan, int]:
        """`span` redacted, and how many records were refused in it.

        Returns `span` itself when no rule changed anything (the checks, the record allow-list
        included, still ran). A span that already went through redaction keeps its session hashes
        as they are (hashing twice would break correlation).
        """
        hash_sessions = not isinstance(span, _RedactedSpan)
        attributes = self._attributes(span.attributes, hash_sessions)

        refused = 0
        events: list[Event] | None = None
        original_events = span.events
        for index, event in enumerate(original_events):
            new_event, count = self._event(event, hash_sessions)
            refused += count
            if new_event is not event:
                if events is None:
                    events = list(original_events)
                events[index] = new_event

        links: list[Link] | None = None
        original_links = span.links
        for index, link in enumerate(original_links):
            new_attributes = self._attributes(link.attributes, hash_sessions)
            if new_attributes is not None:
                if links is None:
                    links = list(original_links)
                links[index] = _RedactedLink(link, new_attributes)

        status = span.status
        description = status.description
        if description:
            new_description = self._text(description)
            if new_description is not description:
                status = Status(status.status_code, new_description)

        if attributes is None and events is None and links is None and status is span.status:
            return span, 0
        return (
            _RedactedSpan(
                span,
                attributes=span.attributes if attributes is None else attributes,
                events=original_events if events is None else events,
                links=original_links if links is None else links,
                status=status,
            ),
            refused,
        )


def _read_env(environ: Mapping[str, str]) -> tuple[dict[str, Any], list[ValueError]]:
    """RedactionRules keyword arguments from the environment, and one error per bad variable."""
    settings: dict[str, Any] = {}
    errors: list[ValueError] = []
    for variable, field in (
        (ENV_REDACT_KEYS, "redact_keys"),
        (ENV_REDACT_VALUES, "redact_values"),
        (ENV_SESSION_KEY, "session_key"),
    ):
        raw = environ.get(variable, "")
        if not raw.strip():
            continue
        try:
            if field == "session_key":
                value: Any = _session_key_bytes(variable, raw)
            else:
                value = tuple(split_patterns(raw))
                _compile_all(variable, value, 0)
        except _RuleError as error:
            errors.append(ValueError(f"{variable}: {error.problem}"))
            continue
        settings[field] = value
    return settings, errors


# ---------------------------------------------------------------------------------------------
# The wrappers


class _Wrapper:
    """What both wrappers share: the rules, the refused-record count and hook, and delegation."""

    def __init__(
        self,
        inner: SpanProcessor | SpanExporter,
        rules: RedactionRules | None,
        on_refused: Callable[[], None] | None,
    ) -> None:
        self._inner = inner
        start_vouching()  # from now on the records this library files are vouched for
        # None: the environment's rules, never raising (the wrappers are built under auto-instrumentation).
        self.rules = RedactionRules.from_env_or_builtin() if rules is None else rules
        # None: the mcp.client.replay.records.refused counter.
        self._on_refused = on_refused if on_refused is not None else count_refused
        self.refused_count = 0
        self._failure_logged = False

    def _redact(self, span: ReadableSpan) -> ReadableSpan | None:
        try:
            redacted, refused = self.rules.redact(span)
        except Exception as error:  # never export what could not be redacted
            level = logging.DEBUG if self._failure_logged else logging.ERROR
            self._failure_logged = True
            # The type only: a message could quote the very value being redacted.
            _logger.log(level, "otel-mcp-replay redaction failed (%s); span dropped", type(error).__name__)
            return None
        if refused:
            self.refused_count += refused
            if self._on_refused is not None:
                for _ in range(refused):
                    try:
                        self._on_refused()
                    except Exception:  # a broken counter must not stop spans
                        _logger.debug("otel-mcp-replay on_refused hook raised", exc_info=True)
        return redacted

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


class RedactingSpanProcessor(_Wrapper, SpanProcessor):
    """A SpanProcessor that hands `inner` a redacted copy of each ended span.

    Redaction runs in `on_end`, on the thread that ends the span: behind a BatchSpanProcessor,
    prefer `BatchSpanProcessor(RedactingSpanExporter(exporter))`, which redacts on the export thread.
    `on_refused` is called once per refused record (default: nothing); `refused_count` counts them.
    """

    def __init__(
        self,
        inner: SpanProcessor,
        rules: RedactionRules | None = None,
        *,
        on_refused: Callable[[], None] | None = None,
    ) -> None:
        _Wrapper.__init__(self, inner, rules, on_refused)
        self.inner = inner

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self.inner.on_start(span, parent_context=parent_context)

    def _on_ending(self, span: Span) -> None:
        self.inner._on_ending(span)

    def on_end(self, span: ReadableSpan) -> None:
        redacted = self._redact(span)
        if redacted is not None:
            self.inner.on_end(redacted)


class RedactingSpanExporter(_Wrapper, SpanExporter):
    """A SpanExporter that hands `inner` a redacted copy of each span it is given (same arguments)."""

    def __init__(
        self,
        inner: SpanExporter,
        rules: RedactionRules | None = None,
        *,
        on_refused: Callable[[], None] | None = None,
    ) -> None:
        _Wrapper.__init__(self, inner, rules, on_refused)
        self.inner = inner

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        redacted = [out for out in map(self._redact, spans) if out is not None]
        if not redacted and spans:
            return SpanExportResult.SUCCESS  # all dropped: nothing left to send
        return self.inner.export(redacted)


__all__ = [
    "ENV_REDACT_KEYS",
    "ENV_REDACT_VALUES",
    "ENV_SESSION_KEY",
    "MASK",
    "RedactingSpanExporter",
    "RedactingSpanProcessor",
    "RedactionRules",
    "mask_url",
    "split_patterns",
]
