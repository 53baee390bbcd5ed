"""The `mcp_replay` OpenTelemetry configurator: the SDK's own set-up, with redaction before export.

The rule: under `opentelemetry-instrument` with `OTEL_PYTHON_CONFIGURATOR=mcp_replay`, every span
exporter the SDK builds from `OTEL_TRACES_EXPORTER` sits behind a RedactingSpanExporter, so no
span the SDK exports skips redaction; if that cannot be guaranteed, nothing is exported.

Why a configurator. Configurators run before instrumentors, so a processor an instrumentor adds
from `_instrument()` lands after the exporting processor and redacts nothing. The SDK's
`_initialize_components` takes an `export_span_processor` factory: the one place every exporter
named in `OTEL_TRACES_EXPORTER` is wrapped into its processor. Subclassing `_OTelSDKConfigurator`
(what opentelemetry-distro's `OpenTelemetryConfigurator` is, and what the SDK tells distros to do)
and passing that factory keeps everything else the SDK reads from the environment (resource,
sampler, id generator, metrics, logs, exporter names and protocols) exactly as it was, and
needs one variable. Rejected: our own `opentelemetry_traces_exporter` entry points (one wrapper per
inner exporter kind, and the user would have to rename every exporter they use); a processor
added from the instrumentor (too late, above); touching the provider's private processor list.

Limits: only one configurator runs per process, so this replaces a vendor distro's configurator
(wrap programmatically there); processors the app adds to the provider itself are not covered
(wrap them in RedactingSpanProcessor); with `OTEL_CONFIG_FILE` the SDK ignores the factory, so
this configurator then logs an ERROR and configures nothing rather than export unredacted.
Redaction runs in the batch processor's export thread, off the app's own threads.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any, Final

from opentelemetry.sdk._configuration import _OTelSDKConfigurator
from opentelemetry.sdk.environment_variables import OTEL_CONFIG_FILE
from opentelemetry.sdk.trace import SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

from otel_mcp_replay.redaction import RedactingSpanExporter, RedactionRules

_logger = logging.getLogger(__name__)

CONFIGURATOR_NAME: Final = "mcp_replay"  # the value of OTEL_PYTHON_CONFIGURATOR that selects it


class McpReplayConfigurator(_OTelSDKConfigurator):
    """opentelemetry-distro's configurator, each trace exporter wrapped in RedactingSpanExporter."""

    def _configure(self, **kwargs: Any) -> None:
        if os.environ.get(OTEL_CONFIG_FILE):
            _logger.error(
                "%s=%s cannot redact exporters declared by %s: no telemetry SDK configured",
                "OTEL_PYTHON_CONFIGURATOR",
                CONFIGURATOR_NAME,
                OTEL_CONFIG_FILE,
            )
            return
        # Never raises: a bad entry is logged and dropped, the other rules and the built-in ones stay.
        rules = RedactionRules.from_env_or_builtin()
        inner_factory: Callable[..., SpanProcessor] = (
            kwargs.get("export_span_processor") or BatchSpanProcessor
        )

        def export_span_processor(exporter: SpanExporter, *args: Any, **factory_kwargs: Any) -> SpanProcessor:
            # A refused record is counted on the refused-records counter (the wrapper's default).
            redacting = RedactingSpanExporter(exporter, rules)
            return inner_factory(redacting, *args, **factory_kwargs)

        kwargs["export_span_processor"] = export_span_processor
        super()._configure(**kwargs)  # type: ignore[no-untyped-call]
