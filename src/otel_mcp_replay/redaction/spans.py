"""The redacted copies of an ended span, its events and links.

The rule: an ended span is frozen (the SDK raises on a write), so redaction builds a copy that reads
like the original in everything but the redacted values: same context, parent, kind, times, resource,
scope, and the same dropped counts. Only public constructors and properties are used; the deprecated
`instrumentation_info` (superseded by `instrumentation_scope` since SDK 1.11.1; the SDK's OTLP and
console exporters read the scope) is not carried: reading it meant the private `_instrumentation_info`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.trace import Link, Status
from opentelemetry.util.types import Attributes


class RedactedEvent(Event):
    def __init__(self, name: str, attributes: Attributes, timestamp: int, dropped: int) -> None:
        super().__init__(name, attributes, timestamp)
        self._dropped = dropped

    @property
    def dropped_attributes(self) -> int:
        return self._dropped


class RedactedLink(Link):
    def __init__(self, original: Link, attributes: Attributes) -> None:
        super().__init__(original.context, attributes)
        self._dropped = original.dropped_attributes

    @property
    def dropped_attributes(self) -> int:
        return self._dropped


class RedactedSpan(ReadableSpan):
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


def plain_dict(attributes: Attributes) -> dict[str, Any]:
    """A private plain-dict copy of `attributes` (empty for None)."""
    if attributes is None:
        return {}
    # BoundedAttributes and MappingProxyType over it copy their dict in C; anything else is read.
    copied = attributes.copy() if hasattr(attributes, "copy") else None
    return copied if type(copied) is dict else dict(attributes)
