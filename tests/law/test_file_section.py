"""The `mcp_replay` section of a configuration file, as opentelemetry-configuration hands it over.

The section goes through the package's own coercion (`_dict_to_dataclass` into the instrumentor's
`configuration`, what `configure_instrumentation` runs) and then the plugin's check: whatever YAML
gives, the coercion never fails, and the check decides (a bad option: ERROR naming the field, never
the value, fail-closed). YAML 1.1's bare `on`/`off` are read as the user meant. The redaction
keywords of instrument() set the rules of the wrappers the instrumentor built, later ones included.
"""

from __future__ import annotations

import logging
from dataclasses import fields
from typing import Any

import pytest
import yaml
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from tests.support.autoinstrument import needs_config_file

from otel_mcp_replay import McpReplayInstrumentor
from otel_mcp_replay import environment_variables as ev
from otel_mcp_replay.config import Configuration, configuration_of
from otel_mcp_replay.config_file import OPTION_NAMES, FileOptions
from otel_mcp_replay.redaction import MASK, RedactingSpanExporter

pytestmark = needs_config_file
CANARY = "Canary-file-91c2"
URL = "http://127.0.0.1:9/mcp"
# Under a file whose section came coerced: the file itself is never opened for it.
UNDER_FILE = {"OTEL_CONFIG_FILE": "/nonexistent/otel.yaml"}


def coerced(section_yaml: str) -> dict[str, Any]:
    """The keywords configure_instrumentation passes instrument() for this section, as it makes them."""
    from opentelemetry.configuration._conversion import _dict_to_dataclass

    options = dict(yaml.safe_load(section_yaml))
    options.pop("enabled", True)
    made = _dict_to_dataclass(options, McpReplayInstrumentor.configuration)
    return {f.name: value for f in fields(made) if (value := getattr(made, f.name)) is not None}


def configured(section_yaml: str, environ: dict[str, str] | None = None) -> Configuration:
    return configuration_of(coerced(section_yaml), {**UNDER_FILE, **(environ or {})})


def test_the_hook_is_a_dataclass_with_every_option() -> None:
    assert McpReplayInstrumentor.configuration is FileOptions
    assert set(OPTION_NAMES) <= {f.name for f in fields(FileOptions)}


def test_a_section_as_the_user_wrote_it(caplog: pytest.LogCaptureFixture) -> None:
    section = f"""
    servers:
      "{URL}":
        policy: app-authorized
        tools:
          search: {{on: [throttle, network]}}
          charge: {{changes: true, on: [throttle]}}
    max_attempts: 5
    retry_budget: off
    retry_on_throttle: off
    redact_keys: ["^app\\\\.secret"]
    redact_content: off
    record: both
    """
    with caplog.at_level(logging.WARNING):
        got = configured(section)
    assert caplog.records == [] and not got.fail_closed and got.enabled
    declaration = got.servers.strictest_on_origin(URL)
    assert declaration.policy == "app-authorized"
    assert declaration.tools["search"].on == {"throttle", "network"}
    assert declaration.tools["charge"].changes and declaration.tools["charge"].on == {"throttle"}
    settings = got.settings
    assert (settings.max_attempts, settings.retry_budget, settings.retry_on_throttle) == (5, None, False)
    assert settings.record == "both"
    assert got.redaction is not None and not got.redaction.mask_content
    assert [p.search("APP.secret.x") is not None for p in got.redaction.key_patterns] == [True]


@pytest.mark.parametrize(
    ("section", "field"),
    [
        (f"max_attempts: {CANARY}", "mcp_replay.max_attempts"),
        ("max_attempt: 3\nmax_wait_ms: 10", "mcp_replay.max_attempt"),  # a misspelt option
        ("retry_budget: on", "mcp_replay.retry_budget"),
        (f"retry_budget: [{CANARY}, 0.1]", "mcp_replay.retry_budget[0]"),
        (f'servers: {{"{URL}": {{policy: {CANARY}}}}}', "mcp_replay.servers"),
        (f"servers: {CANARY}", "mcp_replay.servers"),
        (f"record: {CANARY}", "mcp_replay.record"),
        (f"redact_values: {CANARY}", "mcp_replay.redact_values"),
        (f"redact_keys: ['({CANARY}']", "mcp_replay.redact_keys"),
        # `${VAR}` of an unset variable is null: a store without its secret.
        (
            "repeat_guard_store: redis://127.0.0.1:6379/0\nrepeat_guard_secret: null",
            "mcp_replay.repeat_guard_secret",
        ),
    ],
)
def test_a_bad_option_is_an_error_naming_the_field_and_fails_closed(
    section: str, field: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR):
        got = configured(section)
    assert got.fail_closed
    errors = [record.getMessage() for record in caplog.records if record.levelno == logging.ERROR]
    assert len(errors) == 1 and field in errors[0] and "fail-closed" in errors[0], errors
    assert CANARY not in caplog.text


def test_the_plugins_variables_are_ignored_under_a_file_and_named_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    environ = {ev.OTEL_PYTHON_MCP_REPLAY_MAX_ATTEMPTS: "1", ev.OTEL_PYTHON_MCP_REPLAY_REDACT_VALUES: CANARY}
    with caplog.at_level(logging.WARNING):
        got = configured("max_wait_ms: 50", environ)
    assert got.settings.max_attempts == 3 and got.settings.max_wait_ms == 50 and not got.fail_closed
    (warning,) = [record.getMessage() for record in caplog.records]
    assert (
        ev.OTEL_PYTHON_MCP_REPLAY_MAX_ATTEMPTS in warning
        and ev.OTEL_PYTHON_MCP_REPLAY_REDACT_VALUES in warning
    )
    assert CANARY not in warning


def test_the_section_read_from_the_file_when_none_came(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What opentelemetry-instrument's loop hands the plugin when the package skipped it: nothing.
    path = tmp_path / "otel.yaml"
    path.write_text(
        'file_format: "1.0"\ninstrumentation/development:\n  python:\n    mcp_replay:\n'
        "      enabled: false\n      max_attempts: ${TRIES}\n"
    )
    monkeypatch.setenv("TRIES", "2")  # the loader substitutes from the process's environment
    got = configuration_of({}, {"OTEL_CONFIG_FILE": str(path)})
    assert not got.enabled and got.settings.max_attempts == 2 and not got.fail_closed


def test_the_redaction_keywords_set_the_rules_of_the_wrappers_built_before() -> None:
    instrumentor = McpReplayInstrumentor()
    inner = InMemorySpanExporter()
    wrapper = instrumentor.redacting(RedactingSpanExporter, inner)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(wrapper))
    try:
        instrumentor.instrument(
            tracer_provider=provider, redact_keys=["^app\\.order$"], redact_values=[CANARY]
        )
        with provider.get_tracer("t").start_as_current_span("work") as span:
            span.set_attribute("app.order", "seven")
            span.set_attribute("app.note", f"for {CANARY}")
        (exported,) = inner.get_finished_spans()
        assert exported.attributes == {"app.order": MASK, "app.note": f"for {MASK}"}
    finally:
        instrumentor.uninstrument()
    with pytest.raises(ValueError, match="redact_keys: entry 1") as refused:
        instrumentor.instrument(tracer_provider=provider, redact_keys=[f"({CANARY}"])
    assert CANARY not in str(refused.value)
    # The built-in rules again, for what runs after in this process.
    instrumentor.instrument(tracer_provider=provider, redact_keys=[], redact_values=[])
    instrumentor.uninstrument()
    assert instrumentor.redaction_rules is wrapper.rules


def test_the_exporter_plugin_builds_the_inner_exporter_the_files_way() -> None:
    from opentelemetry.configuration import ConfigurationError
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter

    from otel_mcp_replay.file_exporters import redacting_span_exporter

    made = redacting_span_exporter(console=None)  # `console:` in a file: null, the package's way
    assert isinstance(made, RedactingSpanExporter) and isinstance(made.inner, ConsoleSpanExporter)
    assert made.rules is McpReplayInstrumentor().redaction_rules
    for wrong in ({}, {"console": None, "otlp_http": {}}):
        with pytest.raises(ConfigurationError, match="mcp_replay_redacting takes one key"):
            redacting_span_exporter(**wrong)


def test_the_logs_exporter_plugin_redacts_with_the_rules_set_later() -> None:
    from importlib.metadata import entry_points

    from opentelemetry.configuration import ConfigurationError
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import (
        ConsoleLogRecordExporter,
        InMemoryLogRecordExporter,
        SimpleLogRecordProcessor,
    )

    from otel_mcp_replay.file_exporters import redacting_log_record_exporter
    from otel_mcp_replay.redaction import RedactingLogRecordExporter

    # Both groups name the plugin, as a file names it.
    for group in ("opentelemetry_traces_exporter", "opentelemetry_logs_exporter"):
        assert [e.name for e in entry_points(group=group, name="mcp_replay_redacting")] == [
            "mcp_replay_redacting"
        ]
    made = redacting_log_record_exporter(console=None)
    assert isinstance(made, RedactingLogRecordExporter) and isinstance(made.inner, ConsoleLogRecordExporter)
    with pytest.raises(ConfigurationError, match="mcp_replay_redacting takes one key"):
        redacting_log_record_exporter()

    instrumentor = McpReplayInstrumentor()
    inner = InMemoryLogRecordExporter()
    wrapper = instrumentor.redacting(RedactingLogRecordExporter, inner)
    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(wrapper))
    try:
        instrumentor.instrument(tracer_provider=TracerProvider(), redact_values=[CANARY])
        provider.get_logger("t").emit(body=f"for {CANARY}", attributes={"note": f"and {CANARY}"})
        (exported,) = inner.get_finished_logs()
        assert exported.log_record.body == f"for {MASK}"
        assert dict(exported.log_record.attributes or {}) == {"note": f"and {MASK}"}
    finally:
        instrumentor.uninstrument()
        instrumentor.instrument(tracer_provider=TracerProvider(), redact_keys=[], redact_values=[])
        instrumentor.uninstrument()
