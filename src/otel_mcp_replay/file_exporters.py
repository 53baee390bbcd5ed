"""The exporter plugin `mcp_replay_redacting` of a configuration file: redaction around the file's exporter.

The rule: everything the exporter a file names inside `mcp_replay_redacting` exports has passed the
plugin's redaction first, with the rules in force (the file's `redact_*` options, set when the
instrumentor reads its section, after the SDK built this exporter). Python builds no custom span
processor from a file (only `batch` and `simple`), so an exporter that wraps another is the one seam:

    exporter:
      mcp_replay_redacting:
        otlp_http: {endpoint: http://127.0.0.1:4318/v1/traces}

Its one key is the inner exporter in the file's own syntax, built by opentelemetry-configuration's
own code for that syntax (never read again here). It loads from the entry-point group
`opentelemetry_traces_exporter` with the file's mapping as keyword arguments.
"""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace.export import SpanExporter

from otel_mcp_replay.instrumentor import McpReplayInstrumentor
from otel_mcp_replay.redaction import RedactingSpanExporter

NAME = "mcp_replay_redacting"  # its name in the entry-point groups and in a file


def redacting_span_exporter(**inner: Any) -> SpanExporter:
    """The span exporter `inner` names (`{otlp_http: {...}}`), behind RedactingSpanExporter."""
    # Only here: the configuration package is there whenever a file names this exporter.
    from opentelemetry.configuration._conversion import _dict_to_dataclass
    from opentelemetry.configuration._tracer_provider import _create_span_exporter
    from opentelemetry.configuration.models import SpanExporter as SpanExporterModel

    exporter = _create_span_exporter(_dict_to_dataclass(_one_inner(inner), SpanExporterModel))
    made: SpanExporter = McpReplayInstrumentor().redacting(RedactingSpanExporter, exporter)
    return made


def _one_inner(inner: dict[str, Any]) -> dict[str, Any]:
    from opentelemetry.configuration import ConfigurationError

    if len(inner) != 1:
        raise ConfigurationError(f"{NAME} takes one key: the exporter it wraps (e.g. otlp_http)")
    if next(iter(inner)) == NAME:
        raise ConfigurationError(f"{NAME} cannot wrap itself")
    return inner
