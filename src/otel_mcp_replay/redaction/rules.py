"""The rule engine: one pass over a span, every rule in one visible order.

The rule: each attribute value (span, event and link attributes) gets its key's action, decided
once per key by the first of these that applies:
  1. the user's OTEL_PYTHON_MCP_REPLAY_REDACT_KEYS pattern matches the key, or the
     key is another instrumentation's GenAI content (keys.CONTENT_KEYS: tool
     arguments, results, messages) and redact_content is on (the default)       -> masked
  2. the key is ours (`mcp.replay.*`) or a known safe semantic-convention key   -> text rules only
  3. a built-in sensitive key (keys.py: authorization, token, api key, x-auth, a
     captured Mcp-Param-* header: a tool argument the SDK mirrors)               -> masked
  4. a session id key (`mcp.session.id`, `...session_id`, `sessionId`)            -> keyed hash
  5. a URL key (`url.full`, `http.url`, `...url/uri/referer/location`)           -> mask_url
  6. `url.query` / `url.fragment`                                               -> their values masked
  7. anything else                                                              -> text rules only
and on a span of a task's request (`tasks/*`), the task id it holds (fastmcp's component key, a
captured `Mcp-Name` header) is masked, as is a captured `Mcp-Name` header on any span that does not
say (by `mcp.method.name` or a captured `Mcp-Method`) that its request names a tool or a prompt
(fail closed: there it may be a task id or a resource's URI; request_names.py), and a task id the
plugin's calls saw (the `TaskIds` redact is given, task_ids.py) wherever a text holds one: a server
may use task ids as bearer tokens (SEP-2663);
then every string that is not masked or hashed goes through the text rules (text.py), as does the
span's status description. The `mcp.tool.request_attempts` record passes the allow-list (record.py)
or is refused whole; a record value a key or text rule would change is replaced whole by "REDACTED",
which keeps the record valid, and a user key rule on a record key that holds a count or a contract
word refuses the record whole. A value no rule changes is passed on as the very same object; the
only "nothing to change" tests are the ones each text rule states for itself (text.py), made for all
of a span's values in one pass when every key of it is already known as plain (2. or 7.).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from operator import itemgetter
from typing import Any, Final

from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.trace import Link, Status
from opentelemetry.util.types import Attributes

from otel_mcp_replay import telemetry as t
from otel_mcp_replay.record import Vouches, validate_record
from otel_mcp_replay.redaction import keys, request_names
from otel_mcp_replay.redaction.spans import RedactedEvent, RedactedLink, RedactedSpan, plain_dict
from otel_mcp_replay.redaction.task_ids import TaskIds
from otel_mcp_replay.redaction.text import MASK, TextRules, masked_whole
from otel_mcp_replay.redaction.urls import URL_MASK, mask_params, mask_url
from otel_mcp_replay.redaction.user_rules import UserRules

_logger = logging.getLogger(__name__)

SESSION_HASH_PREFIX: Final = "h:"
SESSION_HASH_HEX_DIGITS: Final = 16
# Per-rules caches (key -> action, session id -> hash) stop growing here; beyond it, work is redone.
CACHE_MAX: Final = 4096

# What a key's value gets (see the order above).
PLAIN, MASKED, HASHED, URL, PARAMS = range(5)

_OWN_PREFIX: Final = "mcp.replay."
# Semantic-convention keys that hold a sensitive word but no secret.
_NOT_SENSITIVE: Final = frozenset({"gen_ai.token.type"})
# The record's free-text values (the others are counts, bools and contract words).
_RECORD_TEXT_KEYS: Final = (t.ENDPOINT, t.GEN_AI_TOOL_NAME, t.JSONRPC_REQUEST_ID)
_record_texts: Final = itemgetter(*_RECORD_TEXT_KEYS)  # a record's free-text values, read in C


class RedactionRules:
    """Built-in rules plus the user's key and value patterns and the session-hash key.

    `redact_keys` and `redact_values` are RE2 patterns (user_rules.py); `redact_content=False` keeps
    other instrumentations' GenAI content attributes (keys.CONTENT_KEYS); `session_key` is the HMAC key
    for session ids (None: this process's random key). A bad rule raises ValueError naming the
    argument and the entry's position, never its text.
    """

    def __init__(
        self,
        *,
        redact_keys: Iterable[str] = (),
        redact_values: Iterable[str] = (),
        session_key: bytes | str | None = None,
        redact_content: bool = True,
    ) -> None:
        self._use(UserRules.given(redact_keys, redact_values, session_key, redact_content))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> RedactionRules:
        """The rules the environment declares; ValueError naming the first bad variable and entry."""
        user_rules, errors = UserRules.read(os.environ if environ is None else environ)
        if errors:
            raise errors[0]
        return cls._of(user_rules)

    @classmethod
    def from_env_or_builtin(cls, environ: Mapping[str, str] | None = None) -> RedactionRules:
        """The same, never raising: each bad entry is logged at ERROR and dropped, the rest apply.

        For auto-instrumentation, where an exception would stop the app or the other instrumentors.
        The built-in rules always stay in force; a bad session key leaves the per-process random key.
        """
        user_rules, errors = UserRules.read(os.environ if environ is None else environ)
        for error in errors:
            _logger.error("otel-mcp-replay redaction: %s; ignored, the other rules apply", error)
        return cls._of(user_rules)

    @classmethod
    def of(cls, user_rules: UserRules) -> RedactionRules:
        """The built-in rules and `user_rules`, already checked (config.py read them)."""
        return cls._of(user_rules)

    @classmethod
    def _of(cls, user_rules: UserRules) -> RedactionRules:
        rules = cls.__new__(cls)
        rules._use(user_rules)
        return rules

    def _use(self, user_rules: UserRules) -> None:
        self._key_patterns = user_rules.key_patterns
        self._texts = TextRules(user_rules.value_patterns)
        self._session_key = user_rules.session_key
        self._mask_content = user_rules.mask_content
        self._actions: dict[str, int] = {}
        self._plain_keys: set[str] = set()  # the keys in _actions whose action is PLAIN
        self._hashes: dict[str, str] = {}
        self._method_headers: set[str] = set()  # the keys seen spelling a captured Mcp-Method header
        self._names_captured = False  # a captured Mcp-Name header seen (spans are looked at for one)
        # The user's key rules reach the record's keys too (its keys are fixed: decided once).
        every_key = t.RECORD_KEYS + t.RECORD_TASK_KEYS
        matched = [key for key in every_key if any(p.search(key) for p in self._key_patterns)]
        self._record_masked = frozenset(key for key in matched if key in _RECORD_TEXT_KEYS)
        self._record_refused = len(matched) > len(self._record_masked)

    # -- keys ------------------------------------------------------------------------------------

    def _action(self, key: str) -> int:
        action = self._actions.get(key)
        if action is None:
            action = self._classify(key)
            if len(self._actions) < CACHE_MAX:
                self._actions[key] = action
                if action == PLAIN:
                    self._plain_keys.add(key)
        return action

    def _classify(self, key: str) -> int:
        if request_names.header_of(key, "method") and len(self._method_headers) < CACHE_MAX:
            self._method_headers.add(key)  # a captured Mcp-Method header: says what the request is
        if request_names.header_of(key, "name"):
            self._names_captured = True  # from now on each span's Mcp-Name header is looked for
        if any(pattern.search(key) for pattern in self._key_patterns):
            return MASKED
        if self._mask_content and key in keys.CONTENT_KEYS:
            return MASKED
        if key.startswith(_OWN_PREFIX) or key in _NOT_SENSITIVE:
            return PLAIN
        words = keys.key_words(key)
        if keys.is_sensitive(words):
            return MASKED
        if keys.is_session_id(words):
            return HASHED
        if keys.is_url(key, words):
            return URL
        if key in keys.PARAM_KEYS:
            return PARAMS
        return PLAIN

    # -- values ----------------------------------------------------------------------------------

    def _hash(self, session_id: str) -> str:
        hashed = self._hashes.get(session_id)
        if hashed is None:
            digest = hmac.new(self._session_key, session_id.encode("utf-8", "surrogatepass"), hashlib.sha256)
            hashed = SESSION_HASH_PREFIX + digest.hexdigest()[:SESSION_HASH_HEX_DIGITS]
            if len(self._hashes) >= CACHE_MAX:
                self._hashes.clear()
            self._hashes[session_id] = hashed
        return hashed

    def _value(self, action: int, value: Any, hash_sessions: bool) -> Any:
        """The redacted value, or `value` itself (the same object) when nothing changed."""
        kind = type(value)
        if kind is not str and isinstance(value, str):
            # A str subclass (an enum.StrEnum member): exported as its text, so read as exact str
            # (str.__str__ copies it in C; no method of the subclass runs).
            value, kind = str.__str__(value), str
        if kind is str:
            if action == PLAIN:
                return self._texts.apply(value)
            if action == MASKED:
                return value if value == MASK else MASK
            if action == HASHED:
                return self._hash(value) if hash_sessions else value
            masked = mask_url(value) if action == URL else mask_params(value)
            out = self._texts.apply(masked)
            return value if out == value else out
        if kind is tuple or kind is list:
            return self._sequence(action, value, hash_sessions)
        # A number or a bool: masked under a sensitive key (a PIN is a secret), hashed as a session id.
        if action == MASKED:
            return MASK
        if action == HASHED and hash_sessions:
            return self._hash(str(value))
        return value

    def _sequence(self, action: int, value: Any, hash_sessions: bool) -> Any:
        if not value:
            return value
        if action == MASKED:
            return masked_whole(value)
        if action == PLAIN:
            try:
                joined = "\x00".join(value)  # triggers hold no NUL: one test for every item
            except TypeError:
                joined = None  # not all strings: item by item (numbers have no text to change)
            if joined is not None and not self._texts.may_change(joined):
                return value
        items = tuple(self._value(action, item, hash_sessions) for item in value)
        if all(new is old for new, old in zip(items, value, strict=True)):
            return value
        return items

    def attributes(self, attributes: Attributes, hash_sessions: bool = True) -> dict[str, Any] | None:
        """A redacted copy of `attributes`, or None when no rule changed any of them."""
        copied = plain_dict(attributes)
        # The common span: every key known plain and no value a text rule could change, in one test.
        if self._plain_keys.issuperset(copied) and not self._texts.may_change_any(copied.values()):
            return None
        changed = False
        actions = self._actions
        text_rules = self._texts.apply
        for key, value in copied.items():
            action = actions.get(key)
            if action is None:
                action = self._action(key)
            # The commonest value, a string under a plain key, straight to the text rules (as _value does).
            if action == PLAIN and type(value) is str:
                new = text_rules(value)
            else:
                new = self._value(action, value, hash_sessions)
            if new is not value:
                copied[key] = new
                changed = True
        return copied if changed else None

    def text(self, value: str) -> str:
        """`value`, free text (a log record's body), through the text rules: itself when unchanged."""
        return self._texts.apply(value)

    # -- events and the record -------------------------------------------------------------------

    def record(
        self, attributes: Attributes, vouched: Callable[[object], dict[str, Any] | None] | None
    ) -> tuple[dict[str, Any], bool] | None:
        """The record `attributes` holds, allow-listed, a free-text value a key or text rule would
        change replaced whole, and whether that differs from `attributes`; None: refused whole.
        `vouched` reads back a record the plugin filed (record.Vouches), not checked again."""
        if self._record_refused:
            return None
        # A record this library filed was checked at build and cannot have changed since.
        accepted = vouched(attributes) if vouched is not None else None
        changed = False
        if accepted is None:
            accepted = validate_record(attributes)
            if accepted is None:
                return None
            # Equal by value (identity short-cuts the columns) means the original says the same.
            changed = accepted != plain_dict(attributes)
        if not self._record_masked and not self._texts.may_change_any(_record_texts(accepted)):
            return accepted, changed
        for key in _RECORD_TEXT_KEYS:
            value = accepted[key]
            if value == URL_MASK or type(value) is not str:
                continue
            # Inside a record a masked value is replaced whole, by a word the allow-list accepts.
            if key in self._record_masked or self._texts.apply(value) is not value:
                accepted[key] = URL_MASK
                changed = True
        return accepted, changed

    def _event(self, event: Event, hash_sessions: bool, vouches: Vouches | None) -> tuple[Event, int]:
        name = event.name
        if name == t.RECORD_EVENT:
            found = self.record(event.attributes, None if vouches is None else vouches.record)
            if found is None:
                return _refused(event)
            return (_same_record(event, found[0]), 0) if found[1] else (event, 0)
        if name == t.RECORD_REFUSED_EVENT:
            # Carries no values, whoever wrote it.
            if not event.attributes:
                return event, 0
            return RedactedEvent(name, {}, event.timestamp, 0), 0
        new = self.attributes(event.attributes, hash_sessions)
        if new is None:
            return event, 0
        return RedactedEvent(name, new, event.timestamp, getattr(event, "dropped_attributes", 0)), 0

    # -- the span --------------------------------------------------------------------------------

    def redact(
        self, span: ReadableSpan, vouches: Vouches | None = None, task_ids: TaskIds | None = None
    ) -> tuple[ReadableSpan, int]:
        """`span` redacted, and how many records were refused in it. A record `vouches` vouches for
        (the plugin filed it) is read back without its cell-by-cell check; any other is checked whole.
        A task id of `task_ids` (the ids the plugin's calls saw) is masked wherever a text holds it.

        Returns `span` itself when no rule changed anything (the checks, the record allow-list
        included, still ran). A span that already went through redaction keeps its session hashes
        as they are (hashing twice would break correlation).
        """
        hash_sessions = not isinstance(span, RedactedSpan)
        attributes = self.attributes(span.attributes, hash_sessions)
        # A request's name where it may be a secret: a task id, a resource's URI (request_names.py).
        if self._names_captured or request_names.of_a_task(span.attributes, self._method_headers):
            attributes = request_names.masked(span.attributes, attributes, self._method_headers) or attributes

        refused = 0
        events: list[Event] | None = None
        original_events = span.events
        if original_events:  # most spans have none: no loop set up for them
            for index, event in enumerate(original_events):
                new_event, count = self._event(event, hash_sessions, vouches)
                refused += count
                if new_event is not event:
                    if events is None:
                        events = list(original_events)
                    events[index] = new_event

        links: list[Link] | None = None
        original_links = span.links
        if original_links:
            for index, link in enumerate(original_links):
                new_attributes = self.attributes(link.attributes, hash_sessions)
                if new_attributes is not None:
                    if links is None:
                        links = list(original_links)
                    links[index] = RedactedLink(link, new_attributes)

        original_status = status = span.status
        description = status.description
        if description:
            new_description = self._texts.apply(description)
            if new_description is not description:
                status = Status(status.status_code, new_description)

        if task_ids:  # a task id this process saw, wherever a text holds it (task_ids.py)
            attributes, events, status = _task_ids_masked(task_ids, span, attributes, events, status)
        if attributes is None and events is None and links is None and status is original_status:
            return span, 0
        return (
            RedactedSpan(
                span,
                attributes=span.attributes if attributes is None else attributes,
                events=original_events if events is None else events,
                links=original_links if links is None else links,
                status=status,
            ),
            refused,
        )


def _task_ids_masked(
    task_ids: TaskIds,
    span: ReadableSpan,
    attributes: dict[str, Any] | None,
    events: list[Event] | None,
    status: Status,
) -> tuple[dict[str, Any] | None, list[Event] | None, Status]:
    """The span's redacted parts (None: unchanged) with every task id seen masked in their texts."""
    attributes = (
        without_task_ids(task_ids, span.attributes if attributes is None else attributes) or attributes
    )
    for index, event in enumerate(span.events if events is None else events):
        if event.name == t.RECORD_EVENT:
            continue  # allow-listed: its own words, a count, a hash, a name
        new = without_task_ids(task_ids, event.attributes)
        if new is not None:
            if events is None:
                events = list(span.events)
            events[index] = RedactedEvent(event.name, new, event.timestamp, 0)
    if status.description:
        description = task_ids.masked(status.description)
        if description is not status.description:
            status = Status(status.status_code, description)
    return attributes, events, status


def without_task_ids(task_ids: TaskIds, attributes: Attributes) -> dict[str, Any] | None:
    """A copy of `attributes` with every task id seen masked, or None when none holds one."""
    copied = plain_dict(attributes)
    if not task_ids.held_in(copied.values()):
        return None
    changed = False
    for key, value in copied.items():
        if type(value) is str:
            new: Any = task_ids.masked(value)
        elif type(value) is tuple or type(value) is list:
            items = tuple(task_ids.masked(item) if type(item) is str else item for item in value)
            new = value if all(a is b for a, b in zip(items, value, strict=True)) else items
        else:
            continue
        if new is not value:
            copied[key], changed = new, True
    return copied if changed else None


def _same_record(record: Event, accepted: dict[str, Any]) -> Event:
    """`record`'s event holding `accepted` instead."""
    return RedactedEvent(record.name, accepted, record.timestamp, getattr(record, "dropped_attributes", 0))


def _refused(record: Event) -> tuple[Event, int]:
    """What stands in for a refused record: an event with no values at all, counted once."""
    return RedactedEvent(t.RECORD_REFUSED_EVENT, {}, record.timestamp, 0), 1
