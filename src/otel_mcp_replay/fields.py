"""Refusals that name a field: the one home of the helpers every declaration-wing module checks with.

The rule: a value the plugin will not take is refused with the path of its field and why, never
the value itself (a declaration or a setting may hold a credential). The declaration, the settings,
the `servers` mapping and the config files all refuse through these, so every refusal reads alike.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import Any, Final, NoReturn, TypeGuard, TypeVar

# A name shown in a field path. Dotted ones are shown quoted, `tools["web.fetch"]`, so no dot of
# theirs reads as a step of the path.
_PLAIN_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}", re.ASCII)
_DOTTED_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}", re.ASCII)


class DeclarationTypeError(TypeError):
    """A field of the wrong type, or one nobody declared. `field` is its path; no value is kept."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(f"{field}: {why}")
        self.field = field


class DeclarationValueError(ValueError):
    """A field whose value the rule cannot mean. `field` is its path; no value is kept."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(f"{field}: {why}")
        self.field = field


def type_error(path: str, why: str) -> NoReturn:
    raise DeclarationTypeError(path, why)


def value_error(path: str, why: str) -> NoReturn:
    raise DeclarationValueError(path, why)


def field_path(where: str, name: str) -> str:
    """`where.name`: the path of a field the plugin knows (its names are all plain)."""
    return f"{where}.{name}" if where else name


def name_path(where: str, name: str, ordinal: int) -> str:
    """The path of an entry the app named (a tool): its name when plain, else its ordinal in the
    mapping (a tool name may hold anything: what is not a name may be a secret)."""
    if _PLAIN_NAME.fullmatch(name):
        return field_path(where, name)
    if _DOTTED_NAME.fullmatch(name):
        return f'{where}["{name}"]'
    return f"{where}[{ordinal}]"


def fields_of(raw: object, where: str, known: frozenset[str]) -> Mapping[str, object]:
    """`raw` as a mapping holding only `known` fields, or a refusal naming the first stranger."""
    if not isinstance(raw, Mapping):
        type_error(where or "declaration", "must be a mapping")
    for position, key in enumerate(raw):
        if not isinstance(key, str):
            type_error(where or "declaration", "has a field name that is not a string")
        if key not in known:
            # A plain name is shown (a misspelt `chnages`); anything else could be a value written
            # where a field belongs (an endpoint URL with its credentials), so it is only counted.
            if _PLAIN_NAME.fullmatch(plain(key)):
                type_error(field_path(where, plain(key)), "unknown field")
            type_error(where or "declaration", f"has an unknown field (field {position} of the mapping)")
    return raw


def plain(value: str) -> str:
    """An exact str of `value`'s characters: a subclass's __str__, __eq__ or __hash__ never reaches
    the declaration, whose names are compared on every request."""
    return str.__str__(value)


def is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


_Frozen = TypeVar("_Frozen")


def checked_builder(cls: type[_Frozen]) -> Callable[..., _Frozen]:
    """A builder of `cls`, a frozen dataclass, from values each already checked by its one checker:
    the constructor's own check (for a direct build) is not run a second time. Its field names are
    read once, here, and held by the builder (made as its module loads): no cache its calls fill."""
    names = tuple(each.name for each in fields(cls))  # type: ignore[arg-type]

    def build(**values: Any) -> _Frozen:
        instance: _Frozen = object.__new__(cls)
        for name in names:
            object.__setattr__(instance, name, values[name])
        return instance

    return build
