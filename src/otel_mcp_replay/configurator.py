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

Before SDK 1.40 `_initialize_components` takes no factory: each exporter goes into the name
`BatchSpanProcessor` of `opentelemetry.sdk._configuration` (its `_init_tracing`), so for the one
call that name is the factory, then put back; an SDK that has neither seam gets nothing
configured and an ERROR, never an unwrapped exporter.

With `OTEL_CONFIG_FILE` the file configures the SDK, exactly as under opentelemetry-distro's
configurator (the SDK builds its providers and ignores the factory): the file's exporters are
redacted by naming the exporter plugin `mcp_replay_redacting` (file_exporters.py) around them.
An SDK that cannot read a file (no opentelemetry-configuration) gets one ERROR naming the extra to
install, and nothing configured.

Limits: only one configurator runs per process, so this replaces a vendor distro's configurator
(wrap programmatically there); processors the app adds to the provider itself are not covered
(wrap them in RedactingSpanProcessor). Redaction runs in the batch processor's export thread, off
the app's own threads.
"""

from __future__ import annotations

import inspect
import logging
import os
from collections.abc import Callable
from typing import Any, Final

from opentelemetry.sdk import _configuration as sdk_configuration
from opentelemetry.sdk._configuration import _OTelSDKConfigurator
from opentelemetry.sdk.trace import SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

from otel_mcp_replay.config_file import EXTRA, OTEL_CONFIG_FILE
from otel_mcp_replay.instrumentor import McpReplayInstrumentor
from otel_mcp_replay.redaction import RedactingSpanExporter

_logger = logging.getLogger(__name__)

CONFIGURATOR_NAME: Final = "mcp_replay"  # the value of OTEL_PYTHON_CONFIGURATOR that selects it
# The SDK's keyword for the exporter-processor factory, from 1.40 on.
_FACTORY: Final = "export_span_processor"


def _takes_factory() -> bool:
    initialize = getattr(sdk_configuration, "_initialize_components", None)
    return initialize is not None and _FACTORY in inspect.signature(initialize).parameters


class McpReplayConfigurator(_OTelSDKConfigurator):
    """opentelemetry-distro's configurator, each trace exporter wrapped in RedactingSpanExporter."""

    def _configure(self, **kwargs: Any) -> None:
        if os.environ.get(OTEL_CONFIG_FILE, "").strip():
            try:
                import opentelemetry.configuration  # noqa: F401 (the SDK imports it to read the file)
            except ImportError:
                _logger.error(
                    "%s is set but this SDK cannot read it: pip install '%s' (no telemetry SDK configured)",
                    OTEL_CONFIG_FILE,
                    EXTRA,
                )
                return
            # The loader's version goes into exporters built from the environment only: the SDK
            # would warn that it ignores it under a file.
            kwargs.pop("auto_instrumentation_version", None)
            super()._configure(**kwargs)  # type: ignore[no-untyped-call]
            return
        takes_factory = _takes_factory()
        if not takes_factory and not isinstance(getattr(sdk_configuration, "BatchSpanProcessor", None), type):
            _logger.error(
                "%s=%s cannot redact the exporters of this opentelemetry-sdk: no telemetry SDK configured",
                "OTEL_PYTHON_CONFIGURATOR",
                CONFIGURATOR_NAME,
            )
            return
        # The one instrumentor of the process (BaseInstrumentor's singleton), instrumented later or
        # not at all: the records its calls file are vouched for, the task ids they see are masked,
        # and a refused record is counted on its runtime's meter.
        instrumentor = McpReplayInstrumentor()
        inner_factory: Callable[..., SpanProcessor] = kwargs.pop(_FACTORY, None) or BatchSpanProcessor

        def export_span_processor(exporter: SpanExporter, *args: Any, **factory_kwargs: Any) -> SpanProcessor:
            # The rules in force (the environment's, never raising; those instrument() sets later).
            redacting = instrumentor.redacting(RedactingSpanExporter, exporter)
            return inner_factory(redacting, *args, **factory_kwargs)

        if takes_factory:
            super()._configure(**kwargs, **{_FACTORY: export_span_processor})  # type: ignore[no-untyped-call]
            return
        # SDK < 1.40: its _init_tracing builds each exporter's processor by this module-level name.
        original = getattr(sdk_configuration, "BatchSpanProcessor")  # noqa: B009 (not exported)
        setattr(sdk_configuration, "BatchSpanProcessor", export_span_processor)  # noqa: B010
        try:
            super()._configure(**kwargs)  # type: ignore[no-untyped-call]
        finally:
            setattr(sdk_configuration, "BatchSpanProcessor", original)  # noqa: B010
