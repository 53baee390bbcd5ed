"""The exporter plugin `mcp_replay_redacting` of a configuration file: redaction around the file's exporter.

The rule: everything the exporter a file names inside `mcp_replay_redacting` exports has passed the
plugin's redaction first, with the rules in force (the file's `redact_*` options, set when the
instrumentor reads its section, after the SDK built this exporter). Python builds no custom span
processor from a file (only `batch` and `simple`), so an exporter that wraps another is the one seam:

    exporter:
      mcp_replay_redacting:
        otlp_http: {endpoint: http://127.0.0.1:4318/v1/traces}

Its one key is the inner exporter in the file's own syntax, built by opentelemetry-configuration's
own code for that syntax (never read again here). It loads from the entry-point groups
`opentelemetry_traces_exporter` and `opentelemetry_logs_exporter` with the file's mapping as
keyword arguments.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from opentelemetry.sdk._logs.export import LogRecordExporter
from opentelemetry.sdk.trace.export import SpanExporter

from otel_mcp_replay.instrumentor import McpReplayInstrumentor
from otel_mcp_replay.redaction import RedactingLogRecordExporter, RedactingSpanExporter

NAME = "mcp_replay_redacting"  # its name in the entry-point groups and in a file


def redacting_span_exporter(**inner: Any) -> SpanExporter:
    """The span exporter `inner` names (`{otlp_http: {...}}`), behind RedactingSpanExporter."""
    # Only here: the configuration package is there whenever a file names this exporter.
    from opentelemetry.configuration._tracer_provider import _create_span_exporter
    from opentelemetry.configuration.models import SpanExporter as SpanExporterModel

    made: SpanExporter = _redacting(RedactingSpanExporter, _create_span_exporter, SpanExporterModel, inner)
    return made


def redacting_log_record_exporter(**inner: Any) -> LogRecordExporter:
    """The log record exporter `inner` names (`{otlp_http: {...}}`), behind RedactingLogRecordExporter."""
    from opentelemetry.configuration._logger_provider import _create_log_record_exporter
    from opentelemetry.configuration.models import LogRecordExporter as LogRecordExporterModel

    made: LogRecordExporter = _redacting(
        RedactingLogRecordExporter, _create_log_record_exporter, LogRecordExporterModel, inner
    )
    return made


def _redacting(
    wrapper: Callable[..., Any], build: Callable[[Any], Any], model: type, inner: dict[str, Any]
) -> Any:
    """`wrapper` around what the package's own `build` makes of `inner` read as its `model`, with
    the instrumentor's rules in force, vouches, task ids and count (`McpReplayInstrumentor.redacting`)."""
    from opentelemetry.configuration import ConfigurationError
    from opentelemetry.configuration._conversion import _dict_to_dataclass

    if len(inner) != 1:
        raise ConfigurationError(f"{NAME} takes one key: the exporter it wraps (e.g. otlp_http)")
    return McpReplayInstrumentor().redacting(wrapper, build(_dict_to_dataclass(inner, model)))
