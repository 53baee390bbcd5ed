"""otel-mcp-replay: an app-declared replay policy for MCP tool calls, and the record of every attempt.

The public names load on first use, so the pure law (`otel_mcp_replay.law`, ...) imports neither
mcp nor httpx2 when it is imported alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from otel_mcp_replay.version import __version__

if TYPE_CHECKING:
    from otel_mcp_replay.errors import RepeatRefusedError, ReplayUnavailableError, UnknownEffectError
    from otel_mcp_replay.guard import repeat_confirmed
    from otel_mcp_replay.instrumentor import McpReplayInstrumentor
    from otel_mcp_replay.redaction import (
        RedactingLogRecordExporter,
        RedactingLogRecordProcessor,
        RedactingSpanExporter,
        RedactingSpanProcessor,
    )

__all__ = [
    "McpReplayInstrumentor",
    "RedactingLogRecordExporter",
    "RedactingLogRecordProcessor",
    "RedactingSpanExporter",
    "RedactingSpanProcessor",
    "RepeatRefusedError",
    "ReplayUnavailableError",
    "UnknownEffectError",
    "__version__",
    "repeat_confirmed",
]

_WHERE = {
    "McpReplayInstrumentor": "otel_mcp_replay.instrumentor",
    "UnknownEffectError": "otel_mcp_replay.errors",
    "ReplayUnavailableError": "otel_mcp_replay.errors",
    "RepeatRefusedError": "otel_mcp_replay.errors",
    "repeat_confirmed": "otel_mcp_replay.guard",
    "RedactingSpanProcessor": "otel_mcp_replay.redaction",
    "RedactingSpanExporter": "otel_mcp_replay.redaction",
    "RedactingLogRecordProcessor": "otel_mcp_replay.redaction",
    "RedactingLogRecordExporter": "otel_mcp_replay.redaction",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(name)
    import importlib

    return getattr(importlib.import_module(module), name)
