"""Configuration by file, for real: the demo's agent under `opentelemetry-instrument` with
`OTEL_CONFIG_FILE` set to examples/otel-config.yaml (its endpoints rewritten to the ports served), no
`OTEL_*` variable else, against the demo's two fault-injecting MCP servers, exporting OTLP/HTTP to a
receiver on 127.0.0.1 through the file's `mcp_replay_redacting` exporter.

Under both configurators (`mcp_replay`, and opentelemetry-distro's, named `configurator`) the file's
declaration is obeyed, counted on the servers: the throttled read is repeated (2 POSTs, run once),
the charge with its key repeated after its cut (run once: the server deduplicates), the e-mail with
no key never sent twice; every call exports one call span, one attempt span per POST and one
record. A bad option, a section the configuration package cannot coerce, and `enabled: false` each
leave the app running and nothing repeated. The plugin is instrumented once: no "already
instrumented" line in the app's log.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import pytest
from tests.support.autoinstrument import needs_config_file
from tests.support.config_files import TWICE, run_with_file

from harness.receiver import SpanDict
from harness.run import records_received
from otel_mcp_replay import telemetry as t

# What the agent sends that must never be exported: the charge's key, the e-mail's address and body.
SECRETS: Final = (b"order-7f3a9c", b"ada@example.com", b"Your receipt")

pytestmark = [pytest.mark.timeout(300), needs_config_file]


def call_spans(spans: list[SpanDict]) -> list[SpanDict]:
    return [span for span in spans if span["name"].startswith(f"{t.CALL_SPAN_PREFIX} ")]


# Under the distro's configurator the budget is written `off`, bare: YAML 1.1 reads it as false, the
# plugin as the user meant (were it refused, nothing would be repeated).
@pytest.mark.parametrize(
    ("configurator", "edit"),
    [("mcp_replay", {}), ("configurator", {"retry_budget: [100, 0.1]  # or off": "retry_budget: off"})],
)
def test_the_files_declaration_is_obeyed_and_every_span_redacted(
    tmp_path: Path, configurator: str, edit: dict[str, str]
) -> None:
    run = run_with_file(tmp_path, configurator, edit)
    assert run.posts == {
        ("billing", "search"): 2,  # the 429, then its repeat (the tool's `on` list, a bare YAML `on`)
        ("billing", "charge"): 2,  # cut after it ran, repeated with its key
        ("billing", "send_email"): 1,  # cut after it ran, no key: never sent again
        ("catalog", "search"): 2,  # compatibility: the 429 repeated
    }
    assert run.runs[("billing", "charge")] == 1 and run.runs[("billing", "send_email")] == 1
    # One call span per call, one attempt span per POST under it, one record per call.
    calls = call_spans(run.spans)
    assert sorted(span["name"] for span in calls) == sorted(
        f"{t.CALL_SPAN_PREFIX} {tool}" for tool in ("search", "charge", "send_email", "search")
    )
    attempts = [span for span in run.spans if span["name"] == t.ATTEMPT_SPAN_NAME]
    per_call = sorted(sum(1 for a in attempts if a["parent_span_id"] == call["span_id"]) for call in calls)
    assert per_call == sorted(run.posts.values()) == [1, 2, 2, 2]
    assert [sum(1 for e in call["events"] if e["name"] == t.RECORD_EVENT) for call in calls] == [1] * 4
    assert records_received(run.spans) == 4
    assert [secret for secret in SECRETS if secret in run.raw] == []
    assert TWICE not in run.stderr and "without redaction" not in run.stderr
    assert "ERROR" not in run.stderr and "otel-mcp-replay" not in run.stderr


NOTHING_REPEATED: Final = {
    ("billing", "search"): 1,
    ("billing", "charge"): 1,
    ("billing", "send_email"): 1,
    ("catalog", "search"): 1,
}


def errors_of(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "otel-mcp-replay" in line and "fail-closed" in line]


# A bad option is a bad environment value: one ERROR naming the file's field, never its value, and
# nothing repeated; the app runs every step.
@pytest.mark.parametrize("configurator", ["mcp_replay", "configurator"])
def test_a_bad_option_fails_closed(tmp_path: Path, configurator: str) -> None:
    run = run_with_file(tmp_path, configurator, {"max_attempts: 3": "max_attempts: three-Canary81"})
    assert run.posts == NOTHING_REPEATED
    (error,) = errors_of(run.stderr)
    assert "mcp_replay.max_attempts" in error and "Canary81" not in run.stderr
    assert records_received(run.spans) == 4 and TWICE not in run.stderr


# A section opentelemetry-configuration cannot coerce (a bare `on` as one of its own keys: the key
# true) makes the package skip the instrumentor; opentelemetry-instrument's loop then instruments it
# with no options, and the plugin reads the section itself: its own check refuses the key, nothing
# repeats. The declared servers' law is never silently off.
def test_a_section_the_package_skips_is_still_the_plugins_to_check(tmp_path: Path) -> None:
    run = run_with_file(
        tmp_path, "mcp_replay", {"      max_attempts: 3\n": "      max_attempts: 3\n      on: [throttle]\n"}
    )
    assert run.posts == NOTHING_REPEATED
    (error,) = errors_of(run.stderr)
    assert "mcp_replay.on: unknown option" in error
    assert records_received(run.spans) == 4 and TWICE not in run.stderr


# `${VAR}` is the file loader's substitution: the value comes from the environment (1 attempt).
def test_an_option_from_the_environment_through_var(tmp_path: Path) -> None:
    run = run_with_file(tmp_path, "configurator", {"max_attempts: 3": "max_attempts: ${TRIES}"}, TRIES="1")
    assert run.posts == NOTHING_REPEATED
    assert errors_of(run.stderr) == [] and records_received(run.spans) == 4


# `enabled: false` leaves mcp untouched, also against opentelemetry-instrument's loop, which
# instruments every installed instrumentor afterwards: no plugin span, no record, mcp's own behaviour.
# Only the 429s here: a cut after the tool ran ends the whole session on plain mcp.
def test_enabled_false_leaves_mcp_untouched(tmp_path: Path) -> None:
    throttled = {
        "billing": {"search": [{"fault": "throttle"}]},
        "catalog": {"search": [{"fault": "throttle"}]},
    }
    run = run_with_file(
        tmp_path,
        "mcp_replay",
        {"      max_attempts: 3\n": "      enabled: false\n"},
        throttled,
        arrived=lambda spans: len(_sdk_call_spans(spans)) >= 4,  # (no record comes to wait for)
    )
    assert run.posts == NOTHING_REPEATED
    assert records_received(run.spans) == 0
    assert not any(span["scope"] == t.INSTRUMENTATION_NAME for span in run.spans)
    # mcp's own client span of each call, which the plugin's call span stands in for when it runs.
    assert len(_sdk_call_spans(run.spans)) == 4
    assert TWICE not in run.stderr and errors_of(run.stderr) == []


def _sdk_call_spans(spans: list[SpanDict]) -> list[SpanDict]:
    return [span for span in spans if span["name"].startswith("MCP send tools/call")]
