"""The plugin's settings: each has one check, applied once, whatever form it came in.

The rule: a setting holds only a value its meaning allows. A keyword's value (settings_of, or a
Settings built directly) and an environment variable's text (setting_from_text: ASCII digits,
`true`/`false`, `TOKENS,RATIO`) go through the same check of that setting, and a refusal names
the field or the variable, never the value. The retry budget's bounds live here alone.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Final

from otel_mcp_replay.fields import checked_builder, is_int, type_error, value_error
from otel_mcp_replay.store_url import SCHEMES_SPOKEN, StoreUrlProblem, address_of, client_problem

# The retry budget counts in thousandths of a token (as gRPC's retryThrottling): a smaller ratio
# would return nothing.
MIN_RATIO: Final = 0.001
MIN_TOKENS: Final = 1
# The shared secret keys the hashes every process stores: as long as an HMAC key should be.
MIN_SECRET_BYTES: Final = 16

_ASCII_SPACE: Final = " \t\n\r\x0b\x0c"
_DIGITS: Final = re.compile(r"[0-9]{1,18}", re.ASCII)
_DECIMAL: Final = re.compile(r"[0-9]{1,18}(?:\.[0-9]{1,18})?|\.[0-9]{1,18}", re.ASCII)
_TRUE: Final = frozenset(("true", "1", "yes", "on"))
_FALSE: Final = frozenset(("false", "0", "no", "off"))


def _check_int(value: object, path: str, minimum: int) -> int:
    if not is_int(value):
        type_error(path, "must be an integer")
    number = int(value)
    if number < minimum:
        value_error(path, f"must be at least {minimum}")
    return number


def _check_bool(value: object, path: str) -> bool:
    if not isinstance(value, bool):
        type_error(path, "must be True or False")
    return value


def _ratio_fits(ratio: float, tokens: int) -> bool:
    """The retry budget's bounds: a ratio from MIN_RATIO up to the tokens (tokens >= MIN_TOKENS)."""
    return math.isfinite(ratio) and MIN_RATIO <= ratio <= tokens


def check_retry_budget(value: object, path: str = "retry_budget") -> tuple[int, float] | None:
    """`(tokens, ratio)` checked: tokens an int of at least 1, ratio a number from 0.001 to tokens
    (a list of two is read as the pair); None is off. A refusal names `path[0]` or `path[1]`."""
    if value is None:
        return None
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        type_error(path, "must be (tokens, ratio) or None")
    tokens, ratio = value
    count = _check_int(tokens, f"{path}[0]", MIN_TOKENS)
    if not (is_int(ratio) or isinstance(ratio, float)):
        type_error(f"{path}[1]", "must be a number")
    share = float(ratio)
    if not _ratio_fits(share, count):
        value_error(f"{path}[1]", "must be at least 0.001 and at most the tokens")
    return count, share


def _check_max_attempts(value: object, path: str) -> int:
    return _check_int(value, path, 1)


def _check_max_wait_ms(value: object, path: str) -> int:
    return _check_int(value, path, 0)


def _check_repeat_guard_s(value: object, path: str) -> int:
    return _check_int(value, path, 0)


def _check_repeat_guard_secret(value: object, path: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        type_error(path, "must be a string")
    if len(value.encode("utf-8", "surrogatepass")) < MIN_SECRET_BYTES:
        value_error(path, f"must be at least {MIN_SECRET_BYTES} bytes")
    return value


def check_store_url(value: object, path: str) -> str | None:
    """`value` as the store's URL: None (no store), or a URL store_url.py reads (a node's or
    Sentinels'), whose options the redis client takes. A refusal names `path`, never the URL (it
    may hold a password)."""
    if value is None:
        return None
    if not isinstance(value, str):
        type_error(path, f"must be {SCHEMES_SPOKEN} (a string)")
    text = value.strip()
    try:
        problem = client_problem(address_of(text))
    except StoreUrlProblem as refused:
        problem = str(refused)
    if problem is not None:  # outside the handler: no parser error (which may quote it) is chained
        value_error(path, problem)
    return text


def _check_store_timeout_ms(value: object, path: str) -> int:
    return _check_int(value, path, 1)


# Where a call's record goes: the span event (the default: what Jaeger and Tempo show on the span), a
# log-based event, or both.
SPAN_EVENT: Final = "span_event"
LOG: Final = "log"
BOTH: Final = "both"
RECORD_PLACES: Final = (SPAN_EVENT, LOG, BOTH)


def _check_record(value: object, path: str) -> str:
    if not isinstance(value, str):
        type_error(path, "must be a string: span_event, log or both")
    if value not in RECORD_PLACES:
        value_error(path, "must be span_event, log or both")
    return value


# The one check of each setting, by field name.
_CHECKS: Final[Mapping[str, Callable[[object, str], object]]] = {
    "max_attempts": _check_max_attempts,
    "max_wait_ms": _check_max_wait_ms,
    "retry_on_throttle": _check_bool,
    "retry_budget": check_retry_budget,
    "repeat_guard_s": _check_repeat_guard_s,
    "repeat_guard_store": check_store_url,
    "repeat_guard_secret": _check_repeat_guard_secret,
    "repeat_guard_store_timeout_ms": _check_store_timeout_ms,
    "record": _check_record,
}


@dataclass(frozen=True)
class Settings:
    """The plugin's settings. Built directly, each is checked; settings_of checks each once too."""

    max_attempts: int = 3  # attempts including the first
    max_wait_ms: int = 10000  # cap on total waiting in one call
    retry_on_throttle: bool = True  # False turns off the compatibility rule for 429
    retry_budget: tuple[int, float] | None = (100, 0.1)  # (tokens, ratio) per endpoint, or None: off
    repeat_guard_s: int = 600  # how long the repeat guard remembers a call that may have run; 0: off
    # The store the repeat guard shares with every process naming it (None: in-process), and the
    # secret they share: never in a repr (the URL may carry a credential).
    repeat_guard_store: str | None = field(default=None, repr=False)
    repeat_guard_secret: str | None = field(default=None, repr=False)
    repeat_guard_store_timeout_ms: int = 50  # the bound on each store operation
    record: str = SPAN_EVENT  # where a call's record goes: RECORD_PLACES

    def __post_init__(self) -> None:
        for name, check in _CHECKS.items():
            object.__setattr__(self, name, check(getattr(self, name), name))
        if self.repeat_guard_store is not None and self.repeat_guard_secret is None:
            value_error("repeat_guard_secret", "is required with repeat_guard_store")


DEFAULTS: Final = Settings()
_settings_of_checked: Final = checked_builder(Settings)
SETTING_NAMES: Final = tuple(f.name for f in fields(Settings))


def setting_of(name: str, value: object, where: str) -> object:
    """`value` checked as the setting `name`; a refusal names `where`. An unknown name is a TypeError."""
    check = _CHECKS.get(name)
    if check is None:
        type_error(name, "unknown setting")
    return check(value, where)


def settings_of(**kw: object) -> Settings:
    """Settings from keyword arguments, each checked once; an unknown one is a TypeError naming it."""
    return settings_from_checked({name: setting_of(name, value, name) for name, value in kw.items()})


def settings_from_checked(checked: Mapping[str, object]) -> Settings:
    """Settings holding `checked` (values returned by setting_of or setting_from_text), the
    defaults for the rest; nothing is checked again."""
    return _settings_of_checked(
        **{name: checked.get(name, getattr(DEFAULTS, name)) for name in SETTING_NAMES}
    )


# --- the environment's text forms ----------------------------------------------------------------


def _whole_number(text: str, where: str) -> int:
    if not _DIGITS.fullmatch(text):  # ASCII digits only: int() would take full-width and others
        value_error(where, "must be a whole number (ASCII digits)")
    return int(text)


def _yes_or_no(text: str, where: str) -> bool:
    spoken = text.lower() if text.isascii() else ""
    if spoken in _TRUE:
        return True
    if spoken in _FALSE:
        return False
    value_error(where, "must be true or false")


def retry_budget_of(text: str, where: str) -> tuple[int, float] | None:
    """The environment's form of `retry_budget`: `TOKENS,RATIO` (e.g. `100,0.1`) or `off`."""
    if not isinstance(text, str):
        type_error(where, "must be a string")
    spoken = text.strip(_ASCII_SPACE)
    if spoken.isascii() and spoken.lower() == "off":
        return None
    tokens, comma, ratio = spoken.partition(",")
    tokens, ratio = tokens.strip(_ASCII_SPACE), ratio.strip(_ASCII_SPACE)
    if not comma or not _DIGITS.fullmatch(tokens) or not _DECIMAL.fullmatch(ratio):
        value_error(where, "must be TOKENS,RATIO (e.g. 100,0.1) or off")
    count, share = int(tokens), float(ratio)
    if count < MIN_TOKENS or not _ratio_fits(share, count):
        value_error(where, "needs TOKENS at least 1 and RATIO from 0.001 to TOKENS")
    return count, share


_TEXT_FORMS: Final[Mapping[str, Callable[[str, str], object]]] = {
    "max_attempts": _whole_number,
    "max_wait_ms": _whole_number,
    "retry_on_throttle": _yes_or_no,
    "retry_budget": retry_budget_of,
    "repeat_guard_s": _whole_number,
    "repeat_guard_store": lambda text, where: text,
    "repeat_guard_secret": lambda text, where: text,
    "repeat_guard_store_timeout_ms": _whole_number,
    "record": lambda text, where: text.lower() if text.isascii() else text,
}


def setting_from_text(name: str, text: str, where: str) -> object:
    """The setting `name` from an environment variable's text (surrounding ASCII blanks ignored),
    checked once; a refusal names `where` (the variable), never the text."""
    form = _TEXT_FORMS.get(name)
    if form is None:
        type_error(name, "unknown setting")
    if not isinstance(text, str):
        type_error(where, "must be a string")
    value = form(text.strip(_ASCII_SPACE), where)
    if name == "retry_budget":
        return value  # its text form already held it to the budget's bounds
    return setting_of(name, value, where)
