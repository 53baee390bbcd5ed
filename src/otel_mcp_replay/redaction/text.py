"""The text rules: what is masked inside a string value, whatever its key.

The rule: every text rule is a linear-time pass (RE2, or mask_url's string methods) that states
which texts it may change: its triggers (substrings one of which every such text holds) and, where
that is too wide, a finer test of its own (linear too). A rule runs on a text only when both admit
it; a rule without triggers runs on every text. That is the one "nothing to change" shortcut there
is (made for many values in one pass by may_change_any), and each rule states its own, next to it. In order:
1. URLs quoted in text (`scheme://...`): userinfo, query and fragment values masked (urls.py).
2. Secrets written as `key=value` / `key: value` (token, secret, password, api key, authorization,
   cookie, signature, ...): the value masked, `token=[REDACTED]`; an already masked value is kept.
3. Authorization schemes: `Bearer <token>` (any case) and `Basic <base64>`: the token masked.
4. The user's OTEL_PYTHON_MCP_REPLAY_REDACT_VALUES patterns: each match masked.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any, Final

from otel_mcp_replay.redaction.urls import URL_MASK, mask_urls_in_text
from otel_mcp_replay.redaction.user_rules import Pattern, compile_re2

MASK: Final = "[REDACTED]"


def masked_whole(value: Any) -> Any:
    """`value` masked whole (a sequence item by item, keeping its length), or `value` itself when it
    already is."""
    if type(value) is tuple or type(value) is list:
        return value if all(item == MASK for item in value) else (MASK,) * len(value)
    return value if value == MASK else MASK


_SECRET_VALUE: Final = compile_re2(
    r"((?:token|secret|password|passwd|pwd|passphrase|api[_\-]?key|access[_\-]?key|private[_\-]?key"
    r"|credentials?|authorization|auth|cookie|signature)[\"']?[ \t]*[=:][ \t]*(?:(?:bearer|basic)[ \t]+)?)"
    r"(\"[^\"]*\"|'[^']*'|[^\s&,;\"'<>]+)",
    ignore_case=True,
)
# A Basic credential is base64 holding a capital, digit, + or /: "Basic validation" stays.
_AUTH_SCHEME: Final = compile_re2(
    r"\b((?i:bearer)[ \t]+)[A-Za-z0-9._~+/\-]+=*"
    r"|\b(Basic[ \t]+)[A-Za-z0-9+/]{2,}[A-Z0-9+/][A-Za-z0-9+/]*={0,2}"
)
_ALREADY_MASKED: Final = (MASK, URL_MASK)
_SEQUENCES: Final = frozenset({tuple, list})
_is_str: Final = str.__instancecheck__  # isinstance(value, str), as filter's C callable


def _mask_secret_value(match: Any) -> str:
    value: str = match.group(2)
    quote = value[0] if value[0] in "\"'" else ""
    inner = value[1:-1] if quote else value
    if not inner or inner.startswith(_ALREADY_MASKED):  # masked before (a URL's `token=REDACTED#...`)
        return str(match.group())
    return f"{match.group(1)}{quote}{MASK}{quote}"


def _mask_auth_scheme(match: Any) -> str:
    return f"{match.group(1) or match.group(2)}{MASK}"


def _holds_url_parts(text: str) -> bool:
    """mask_url changes only a URL with userinfo, a query or a fragment."""
    return "@" in text or "?" in text or "#" in text


# Every key _SECRET_VALUE knows holds one of these, in lower case.
_SECRET_WORDS: Final = ("token", "secret", "pass", "pwd", "key", "credential", "auth", "cookie", "signature")
# One pass each, whatever the text holds (a search per word was ten passes, and slow on text that
# repeats a word's letters); RE2 folds case as _SECRET_VALUE does (the Kelvin sign K is a k).
_SECRET_WORD: Final = compile_re2("|".join(_SECRET_WORDS), ignore_case=True)
# Up to this length an ASCII text is searched word by word: cheaper than one call into RE2 (a URL:
# 0.3 us against 1 us), and bounded whatever the text repeats.
_WORD_BY_WORD_MAX: Final = 256
_SCHEME_WORD: Final = compile_re2(r"Basic|(?i:bearer)")


def _names_a_secret(text: str) -> bool:
    if len(text) <= _WORD_BY_WORD_MAX and text.isascii():  # ASCII folds case as lower() does
        lowered = text.lower()
        for word in _SECRET_WORDS:  # noqa: SIM110 (a loop: no generator for a short text)
            if word in lowered:
                return True
        return False
    return _SECRET_WORD.search(text) is not None


def _names_a_scheme(text: str) -> bool:
    return _SCHEME_WORD.search(text) is not None


class TextRule:
    """One linear-time rewrite of a text; its triggers (None: it may change any text) and its own
    finer test of the texts it may change (None: the triggers say it all)."""

    __slots__ = ("apply", "finer", "name", "triggers")

    def __init__(
        self,
        name: str,
        apply: Callable[[str], str],
        triggers: tuple[str, ...] | None,
        finer: Callable[[str], bool] | None = None,
    ) -> None:
        self.name = name
        self.apply = apply
        self.triggers = triggers
        self.finer = finer

    def may_change(self, text: str) -> bool:
        triggers = self.triggers
        if triggers is not None:
            for trigger in triggers:  # a loop, not any(): no generator for one or two triggers
                if trigger in text:
                    break
            else:
                return False
        return self.finer is None or self.finer(text)


def _user_value_rule(position: int, pattern: Pattern) -> TextRule:
    return TextRule(f"REDACT_VALUES entry {position}", lambda text: pattern.sub(MASK, text), None)


BUILT_IN: Final = (
    TextRule("URLs quoted in text", mask_urls_in_text, ("://",), _holds_url_parts),
    TextRule(
        "key=value secrets",
        lambda text: _SECRET_VALUE.sub(_mask_secret_value, text),
        (":", "="),
        _names_a_secret,
    ),
    TextRule(
        "authorization schemes",
        lambda text: _AUTH_SCHEME.sub(_mask_auth_scheme, text),
        (" ", "\t"),
        _names_a_scheme,
    ),
)


class TextRules:
    """The text rules in their order: the built-in ones, then the user's value patterns."""

    __slots__ = ("_triggers", "rules")

    def __init__(self, value_patterns: Sequence[Pattern]) -> None:
        self.rules: tuple[TextRule, ...] = (
            *BUILT_IN,
            *(_user_value_rule(position, p) for position, p in enumerate(value_patterns, start=1)),
        )
        # Any rule's trigger (a trigger holding another one is implied by it); None: every text.
        self._triggers: tuple[str, ...] | None = None
        if all(rule.triggers is not None for rule in self.rules):
            unique = {trigger for rule in self.rules for trigger in rule.triggers or ()}
            self._triggers = tuple(sorted(t for t in unique if not any(o != t and o in t for o in unique)))

    def may_change(self, text: str) -> bool:
        """False only when no rule can change `text` (the same test each rule makes, all at once)."""
        triggers = self._triggers
        if triggers is None:
            return True
        for trigger in triggers:  # noqa: SIM110 (a loop: no generator for the common short text)
            if trigger in text:
                return True
        return False

    def may_change_any(self, values: Collection[Any]) -> bool:
        """False only when no rule can change any of `values` read as attribute values. Their strings
        are tested at once, joined by NUL (no trigger holds one, so none spans two strings); a value
        no rule reads (a number, a bool) is passed over; a list or tuple is left to be read item by
        item (True)."""
        if self._triggers is None or not _SEQUENCES.isdisjoint(map(type, values)):
            return True
        return self.may_change("\x00".join(filter(_is_str, values)))  # in C: no loop per value

    def apply(self, text: str) -> str:
        """`text` with every rule applied, or `text` itself (the same object) when none changed it."""
        triggers = self._triggers
        if triggers is not None:
            for trigger in triggers:  # may_change, inlined: this runs for every string value
                if trigger in text:
                    break
            else:
                return text
        try:
            out = self._run(text)
        except UnicodeEncodeError:
            # A lone surrogate (no exporter can encode it either): read as U+FFFD, then the rules.
            out = self._run(text.encode("utf-8", "surrogatepass").decode("utf-8", "replace"))
        return text if out == text else out

    def _run(self, text: str) -> str:
        for rule in self.rules:
            if rule.may_change(text):
                text = rule.apply(text)
        return text
