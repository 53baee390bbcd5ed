"""Redaction of every span on its way to an exporter.

The rule: a span reaches the wrapped processor or exporter only after every rule has looked at it
(a redacted copy, or the very same object when no rule changed anything); a span whose redaction
fails is dropped, never passed on raw. Every rule runs in time linear in the text it reads.

The layout follows the Collector's redaction processor:
- user_rules.py: the user's rules (OTEL_PYTHON_MCP_REPLAY_REDACT_KEYS / _REDACT_VALUES, RE2 syntax,
  comma lists where `\\,` is a literal comma; _SESSION_KEY; _REDACT_CONTENT), read and compiled once.
- keys.py: the built-in sensitive, session-id and URL keys, by their words.
- urls.py: URL masking.   text.py: the rules on free text, with their triggers.
- rules.py: RedactionRules, the engine, every rule in one order.
- spans.py: the redacted copies.   wrappers.py: RedactingSpanProcessor, RedactingSpanExporter.
- logs.py: RedactingLogRecordProcessor, RedactingLogRecordExporter: the same for log records.
- export_path.py: check_export_path, the one WARNING when exported spans skip redaction.
- log_export_path.py: redact_log_exporters, the same put-behind for a LoggerProvider's exporters.
- task_ids.py: the task ids this process saw (SEP-2663), masked wherever a text holds one.
"""

from otel_mcp_replay.redaction.export_path import check_export_path
from otel_mcp_replay.redaction.logs import RedactingLogRecordExporter, RedactingLogRecordProcessor
from otel_mcp_replay.redaction.rules import RedactionRules
from otel_mcp_replay.redaction.text import MASK
from otel_mcp_replay.redaction.urls import URL_MASK, mask_url
from otel_mcp_replay.redaction.user_rules import (
    ENV_REDACT_CONTENT,
    ENV_REDACT_KEYS,
    ENV_REDACT_VALUES,
    ENV_SESSION_KEY,
    split_patterns,
)
from otel_mcp_replay.redaction.wrappers import RedactingSpanExporter, RedactingSpanProcessor

__all__ = [
    "ENV_REDACT_CONTENT",
    "ENV_REDACT_KEYS",
    "ENV_REDACT_VALUES",
    "ENV_SESSION_KEY",
    "MASK",
    "URL_MASK",
    "RedactingLogRecordExporter",
    "RedactingLogRecordProcessor",
    "RedactingSpanExporter",
    "RedactingSpanProcessor",
    "RedactionRules",
    "check_export_path",
    "mask_url",
    "split_patterns",
]
