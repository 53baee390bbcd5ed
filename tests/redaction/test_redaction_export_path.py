"""Exported spans pass redaction under auto-instrumentation whichever configurator ran; where they
still skip it, the plugin says so once, at WARNING, naming the fix (F2).

Unit tests call redaction.check_export_path and redact_exporters on SDK providers built here. End
to end, the app runs under `opentelemetry-instrument` WITHOUT OTEL_PYTHON_CONFIGURATOR: then the
first `opentelemetry_configurator` entry point found runs, and which is first depends on install
order. Both orders are made by a one-entry-point distribution put first on PYTHONPATH
(distributions are found in path order), naming either the distro's configurator or ours: either
way nothing planted reaches the OTLP receiver (with the distro's first, its exporter is put behind
redaction when the plugin is instrumented) and nothing is left for the WARNING to name. Both come
from `McpReplayInstrumentor._instrument()`, which calls redact_exporters, then check_export_path.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import SpanProcessor, SynchronousMultiSpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NoOpTracerProvider
from tests.support.autoinstrument import (
    Target,
    http_client_spans,
    leaked,
    needs_httpx2_spans,
    run_instrumented,
)

from harness.receiver import OtlpReceiver
from otel_mcp_replay.redaction import (
    RedactingSpanExporter,
    RedactingSpanProcessor,
    RedactionRules,
    check_export_path,
)
from otel_mcp_replay.redaction.export_path import redact_exporters, unredacted_exporters

LOGGER = "otel_mcp_replay"
FIX = "OTEL_PYTHON_CONFIGURATOR=mcp_replay"


def provider_with(*processors: SpanProcessor) -> TracerProvider:
    provider = TracerProvider()
    for processor in processors:
        provider.add_span_processor(processor)
    return provider


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING]


def test_bare_exporters_get_one_warning_naming_the_fix(caplog: pytest.LogCaptureFixture) -> None:
    provider = provider_with(
        BatchSpanProcessor(InMemorySpanExporter()),
        SimpleSpanProcessor(ConsoleSpanExporter()),
        RedactingSpanProcessor(SimpleSpanProcessor(InMemorySpanExporter()), RedactionRules()),
    )
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        check_export_path(provider)
    (warning,) = warnings_of(caplog)
    assert FIX in warning and "RedactingSpanExporter" in warning
    assert "ConsoleSpanExporter" in warning and "InMemorySpanExporter" in warning
    provider.shutdown()


def test_under_a_configuration_file_the_warning_names_the_files_fix(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_CONFIG_FILE", "otel.yaml")
    provider = provider_with(SimpleSpanProcessor(ConsoleSpanExporter()))
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        check_export_path(provider)
    (warning,) = warnings_of(caplog)
    assert "mcp_replay_redacting" in warning and "OTEL_CONFIG_FILE" in warning and FIX not in warning
    provider.shutdown()


def test_redacted_paths_say_nothing(caplog: pytest.LogCaptureFixture) -> None:
    providers = [
        provider_with(RedactingSpanProcessor(BatchSpanProcessor(InMemorySpanExporter()), RedactionRules())),
        provider_with(BatchSpanProcessor(RedactingSpanExporter(InMemorySpanExporter(), RedactionRules()))),
        provider_with(SimpleSpanProcessor(RedactingSpanExporter(ConsoleSpanExporter(), RedactionRules()))),
        provider_with(),  # nothing exported at all
    ]
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        for provider in providers:
            check_export_path(provider)
        check_export_path(NoOpTracerProvider())  # not the SDK's: exports nothing by itself
    assert warnings_of(caplog) == []
    for provider in providers:
        provider.shutdown()


def test_the_global_provider_is_checked_when_none_is_given(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider = provider_with(SimpleSpanProcessor(InMemorySpanExporter()))
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: provider)
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        check_export_path(None)
    assert len(warnings_of(caplog)) == 1


def test_it_never_raises(caplog: pytest.LogCaptureFixture) -> None:
    class Broken(TracerProvider):
        @property
        def _active_span_processor(self) -> Any:
            raise RuntimeError("broken-canary")

        @_active_span_processor.setter
        def _active_span_processor(self, value: Any) -> None:
            pass

    class Odd(SpanProcessor):
        @property
        def span_exporter(self) -> Any:
            raise RuntimeError("odd-canary")

    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        check_export_path(Broken(shutdown_on_exit=False))
        check_export_path(provider_with(Odd()))
        check_export_path(object())
    assert warnings_of(caplog) == []


def test_the_sdk_keeps_the_processors_where_the_check_reads_them() -> None:
    # The SDK has no public way to list a provider's processors: check_export_path reads the
    # private `_active_span_processor._span_processors`. This fails when an SDK release moves them.
    exporter = InMemorySpanExporter()
    simple, batch = SimpleSpanProcessor(exporter), BatchSpanProcessor(exporter)
    provider = provider_with(simple, batch)
    active = provider._active_span_processor
    assert isinstance(active, SynchronousMultiSpanProcessor)
    assert active._span_processors == (simple, batch)
    assert simple.span_exporter is exporter and batch.span_exporter is exporter  # public
    provider.shutdown()


def redacting(exporter: SpanExporter) -> RedactingSpanExporter:
    return RedactingSpanExporter(exporter, RedactionRules())


CANARY_URL = "http://127.0.0.1:9/mcp?token=tok-Canary91"


def test_both_sdk_processors_exporters_are_put_behind_redaction(caplog: pytest.LogCaptureFixture) -> None:
    # BatchSpanProcessor's exporter is replaced where its worker reads it on each export, a private
    # place (`_batch_processor._exporter`): exporting through it here fails when an SDK release moves it.
    simple_out, batch_out = InMemorySpanExporter(), InMemorySpanExporter()
    simple, batch = SimpleSpanProcessor(simple_out), BatchSpanProcessor(batch_out)
    provider = provider_with(simple, batch)
    queued = provider.get_tracer("app").start_span("queued before", attributes={"url.full": CANARY_URL})
    queued.end()  # simple: exported at once, as it was; batch: queued, redacted as it leaves
    redact_exporters(provider, redacting)
    assert isinstance(simple.span_exporter, RedactingSpanExporter)
    assert isinstance(batch.span_exporter, RedactingSpanExporter)
    assert unredacted_exporters(provider) == []
    with provider.get_tracer("app").start_as_current_span("after", attributes={"url.full": CANARY_URL}):
        pass
    provider.force_flush()
    simple_spans, batch_spans = simple_out.get_finished_spans(), batch_out.get_finished_spans()
    assert len(simple_spans) == 2 and len(batch_spans) == 2
    for span in [simple_spans[1], *batch_spans]:
        assert "Canary91" not in str((span.attributes or {}).get("url.full")), span.name
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        check_export_path(provider)
    assert warnings_of(caplog) == []
    provider.shutdown()


def test_an_exporter_out_of_reach_keeps_the_warning(caplog: pytest.LogCaptureFixture) -> None:
    class Held(SpanProcessor):
        """A processor of another kind that shows its exporter and keeps it where it keeps it."""

        def __init__(self, exporter: SpanExporter) -> None:
            self._held = exporter

        @property
        def span_exporter(self) -> SpanExporter:
            return self._held

    held = Held(InMemorySpanExporter())
    provider = provider_with(held)
    redact_exporters(provider, redacting)
    assert not isinstance(held.span_exporter, RedactingSpanExporter)
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        check_export_path(provider)
    (warning,) = warnings_of(caplog)
    assert FIX in warning and "InMemorySpanExporter" in warning
    redact_exporters(object(), redacting)  # not the SDK's: nothing to do, never a raise


# -- end to end: both install orders, no OTEL_PYTHON_CONFIGURATOR ------------------------------------------

CONFIGURATORS = {
    "plugin": ("mcp_replay", "otel_mcp_replay.configurator:McpReplayConfigurator"),
    "distro": ("configurator", "opentelemetry.distro:OpenTelemetryConfigurator"),
}


def installed_first(tmp_path: Path, which: str) -> Path:
    """A directory holding one distribution whose only entry point is `which` configurator."""
    name, value = CONFIGURATORS[which]
    folder = tmp_path / f"first-{which}"
    info = folder / "zz_installed_first-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: zz-installed-first\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[opentelemetry_configurator]\n{name} = {value}\n")
    return folder


def warned(stderr: str) -> int:
    return stderr.count(f"set {FIX}")


@needs_httpx2_spans
def test_plugin_installed_first_every_exported_span_is_redacted(
    tmp_path: Path, target: Target, receiver: OtlpReceiver
) -> None:
    stderr = run_instrumented(tmp_path, target, receiver, None, path=[installed_first(tmp_path, "plugin")])
    assert receiver.wait_for(lambda spans: len(http_client_spans(spans)) >= 2, timeout=20)
    assert leaked(receiver.raw_bytes()) == []
    assert warned(stderr) == 0


@needs_httpx2_spans
def test_distro_installed_first_every_exported_span_is_redacted_too(
    tmp_path: Path, target: Target, receiver: OtlpReceiver
) -> None:
    stderr = run_instrumented(tmp_path, target, receiver, None, path=[installed_first(tmp_path, "distro")])
    assert receiver.wait_for(lambda spans: len(http_client_spans(spans)) >= 2, timeout=20)
    assert leaked(receiver.raw_bytes()) == []  # the requests carried them (run_instrumented checks)
    assert warned(stderr) == 0, stderr[-3000:]


@needs_httpx2_spans
def test_whatever_the_install_order_secrets_stay_home_or_the_plugin_says_so(
    tmp_path: Path, target: Target, receiver: OtlpReceiver
) -> None:
    stderr = run_instrumented(tmp_path, target, receiver, None)  # this environment's own order
    assert receiver.wait_for(lambda spans: len(http_client_spans(spans)) >= 2, timeout=20)
    assert leaked(receiver.raw_bytes()) == [] or warned(stderr) == 1
