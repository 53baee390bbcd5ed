"""The `mcp_replay` OpenTelemetry configurator: the SDK's own set-up, with redaction before export.

The rule: under `opentelemetry-instrument` with `OTEL_PYTHON_CONFIGURATOR=mcp_replay`, every span
exporter the SDK builds from `OTEL_TRACES_EXPORTER` sits behind a RedactingSpanExporter, and every
log exporter from `OTEL_LOGS_EXPORTER` behind a RedactingLogRecordExporter, so no span or log record
the SDK exports skips redaction; if that cannot be guaranteed, nothing is exported.

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
call that name is the factory, then put back; the same for log exporters, whose factory
(`export_log_record_processor`) has its own release, and whose name is `BatchLogRecordProcessor`
(`_init_logging`). An SDK that has neither seam for either gets nothing configured and an ERROR,
never an unwrapped exporter.

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

import contextlib
import inspect
import logging
import os
from collections.abc import Callable, Iterator
from typing import Any, Final

from opentelemetry.sdk import _configuration as sdk_configuration
from opentelemetry.sdk._configuration import _OTelSDKConfigurator
from opentelemetry.sdk._logs import LogRecordProcessor
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor, LogRecordExporter
from opentelemetry.sdk.trace import SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

from otel_mcp_replay.config_file import EXTRA, OTEL_CONFIG_FILE
from otel_mcp_replay.instrumentor import McpReplayInstrumentor
from otel_mcp_replay.redaction import RedactingLogRecordExporter, RedactingSpanExporter

_logger = logging.getLogger(__name__)

CONFIGURATOR_NAME: Final = "mcp_replay"  # the value of OTEL_PYTHON_CONFIGURATOR that selects it
# The SDK's keyword for the exporter-processor factory, from 1.40 on; and its twin for log exporters.
_FACTORY: Final = "export_span_processor"
_LOG_FACTORY: Final = "export_log_record_processor"


def _takes_factory(name: str = _FACTORY) -> bool:
    initialize = getattr(sdk_configuration, "_initialize_components", None)
    return initialize is not None and name in inspect.signature(initialize).parameters


class McpReplayConfigurator(_OTelSDKConfigurator):
    """opentelemetry-distro's configurator, each trace exporter wrapped in RedactingSpanExporter, each
    log exporter in RedactingLogRecordExporter."""

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
        takes_factory, takes_log_factory = _takes_factory(), _takes_factory(_LOG_FACTORY)
        span_seam = takes_factory or _names("BatchSpanProcessor")
        if not (span_seam and (takes_log_factory or _names(_LOG_NAME))):
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

        log_factory = _log_factory(instrumentor, kwargs.pop(_LOG_FACTORY, None))
        if takes_log_factory:
            kwargs[_LOG_FACTORY] = log_factory
        if takes_factory:
            with _named(_LOG_NAME, None if takes_log_factory else log_factory):
                super()._configure(**kwargs, **{_FACTORY: export_span_processor})  # type: ignore[no-untyped-call]
            return
        # SDK < 1.40: its _init_tracing builds each exporter's processor by this module-level name.
        with _named("BatchSpanProcessor", export_span_processor), _named(_LOG_NAME, log_factory):
            super()._configure(**kwargs)  # type: ignore[no-untyped-call]


# Before the SDK took a log factory, its _init_logging put each exporter into this module-level name.
_LOG_NAME: Final = "BatchLogRecordProcessor"


def _names(name: str) -> bool:
    """The SDK's configuration module builds exporters' processors by the class `name`."""
    return isinstance(getattr(sdk_configuration, name, None), type)


@contextlib.contextmanager
def _named(name: str, factory: Callable[..., Any] | None) -> Iterator[None]:
    """While configuring, the SDK's configuration module's `name` is `factory` (None: left as is)."""
    if factory is None:
        yield
        return
    original = getattr(sdk_configuration, name)
    setattr(sdk_configuration, name, factory)
    try:
        yield
    finally:
        setattr(sdk_configuration, name, original)


def _log_factory(
    instrumentor: McpReplayInstrumentor,
    inner: Callable[..., LogRecordProcessor] | None,
) -> Callable[..., LogRecordProcessor]:
    """The processor factory of every log exporter OTEL_LOGS_EXPORTER names: each behind a
    RedactingLogRecordExporter, then in `inner` (the SDK's BatchLogRecordProcessor by default)."""
    inner_factory = inner or BatchLogRecordProcessor

    def export_log_record_processor(
        exporter: LogRecordExporter, *args: Any, **kwargs: Any
    ) -> LogRecordProcessor:
        # The rules in force, as for spans.
        return inner_factory(instrumentor.redacting(RedactingLogRecordExporter, exporter), *args, **kwargs)

    return export_log_record_processor
