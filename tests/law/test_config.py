"""Configuration: keywords override the environment; the environment never crashes the app.

An invalid keyword is the app's own code and raises, naming the field. An invalid environment value
is logged at ERROR naming the variable (never the value) and the plugin runs fail-closed: nothing
is repeated, and spans still record what happened.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from importlib.metadata import distribution, entry_points
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from tests.support.calls import declared
from tests.support.telemetry import Telemetry, attempt_spans, the_record

from harness.faults import Throttle
from harness.server import ServerHandle
from otel_mcp_replay import McpReplayInstrumentor
from otel_mcp_replay import environment_variables as ev
from otel_mcp_replay import telemetry as t
from otel_mcp_replay.config import configuration_of

CANARY = "CANARY-env-4b1d"

pytestmark = pytest.mark.anyio


SEARCH_ON_THROTTLE = {"search": {"on": ["throttle"]}}


async def _one_throttled_call(server: ServerHandle) -> None:
    server.faults.add("search", Throttle("0"))
    async with Client(server.url) as client:
        with contextlib.suppress(MCPError):
            await client.call_tool("search", {"query": "q"})


async def test_servers_from_inline_json(
    server: ServerHandle, telemetry: Telemetry, instrument: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        ev.OTEL_PYTHON_MCP_REPLAY_SERVERS, json.dumps(declared(server, SEARCH_ON_THROTTLE, label="demo"))
    )
    instrument()
    await _one_throttled_call(server)
    record = the_record(telemetry)
    assert record[t.ATTEMPTS_PERMISSION] == ("first", "app")
    assert record[t.ENDPOINT] == "demo"


@pytest.mark.parametrize("suffix", [".toml", ".json"])
async def test_servers_from_a_config_file(
    server: ServerHandle,
    telemetry: Telemetry,
    instrument: Any,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    suffix: str,
) -> None:
    path = tmp_path / f"replay{suffix}"
    if suffix == ".json":
        path.write_text(json.dumps({"servers": declared(server, SEARCH_ON_THROTTLE, label="demo")}))
    else:
        path.write_text(
            f'[servers."{server.url}"]\npolicy = "app-authorized"\nlabel = "demo"\n'
            f'[servers."{server.url}".tools.search]\non = ["throttle"]\n'
        )
    monkeypatch.setenv(ev.OTEL_PYTHON_MCP_REPLAY_CONFIG, str(path))
    instrument()
    await _one_throttled_call(server)
    assert the_record(telemetry)[t.ATTEMPTS_PERMISSION] == ("first", "app")


def test_a_toml_config_file_is_read_by_the_running_pythons_parser(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The version-specific spot of src/: tomllib from Python 3.11, tomli below it (scripts/test-pythons
    runs this on 3.10 and 3.13). Either reads the declaration, and refuses a broken file naming the
    variable, never its text."""
    from otel_mcp_replay import config

    assert config.tomllib.__name__ == ("tomllib" if sys.version_info >= (3, 11) else "tomli")
    path = tmp_path / "replay.toml"
    path.write_text('[servers."http://127.0.0.1:9/mcp"]\npolicy = "app-authorized"\n')
    resolved = configuration_of({}, {ev.OTEL_PYTHON_MCP_REPLAY_CONFIG: str(path)})
    assert not resolved.fail_closed
    assert resolved.servers.declaration_for("http://127.0.0.1:9/mcp").policy == "app-authorized"
    path.write_text(f'[servers."http://127.0.0.1:9/mcp"]\npolicy = "{CANARY}\n')
    with caplog.at_level(logging.ERROR, logger="otel_mcp_replay"):
        resolved = configuration_of({}, {ev.OTEL_PYTHON_MCP_REPLAY_CONFIG: str(path)})
    assert resolved.fail_closed
    assert ev.OTEL_PYTHON_MCP_REPLAY_CONFIG in caplog.text and "not valid TOML" in caplog.text
    assert CANARY not in caplog.text


async def test_keywords_override_the_environment(
    server: ServerHandle, telemetry: Telemetry, instrument: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        ev.OTEL_PYTHON_MCP_REPLAY_SERVERS, json.dumps(declared(server, SEARCH_ON_THROTTLE, label="demo"))
    )
    monkeypatch.setenv(ev.OTEL_PYTHON_MCP_REPLAY_MAX_ATTEMPTS, "5")
    instrument(servers={server.url: {"policy": "app-authorized"}}, max_attempts=1)
    await _one_throttled_call(server)
    record = the_record(telemetry)
    assert record[t.SENT] == 1
    assert (attempt_spans(telemetry)[0].attributes or {})[t.DECLINED] == "not-permitted"


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        (ev.OTEL_PYTHON_MCP_REPLAY_SERVERS, "{" + CANARY),
        (ev.OTEL_PYTHON_MCP_REPLAY_SERVERS, json.dumps({"http://127.0.0.1:1/mcp": {"policy": CANARY}})),
        (ev.OTEL_PYTHON_MCP_REPLAY_CONFIG, f"/nonexistent/{CANARY}.toml"),
        (ev.OTEL_PYTHON_MCP_REPLAY_MAX_ATTEMPTS, CANARY),
        (ev.OTEL_PYTHON_MCP_REPLAY_MAX_ATTEMPTS, "0"),
        (ev.OTEL_PYTHON_MCP_REPLAY_MAX_WAIT_MS, "-5"),
        (ev.OTEL_PYTHON_MCP_REPLAY_RETRY_ON_THROTTLE, CANARY),
        (ev.OTEL_PYTHON_MCP_REPLAY_RETRY_BUDGET, f"10,{CANARY}"),
    ],
)
async def test_an_invalid_environment_value_is_logged_and_runs_fail_closed(
    server: ServerHandle,
    telemetry: Telemetry,
    instrument: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    variable: str,
    value: str,
) -> None:
    monkeypatch.setenv(variable, value)
    with caplog.at_level(logging.ERROR, logger="otel_mcp_replay"):
        instrument()  # never raises for the environment
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert errors, "the configuration error was not logged"
    logged = " ".join(r.getMessage() for r in errors)
    assert variable in logged
    assert CANARY not in logged and CANARY not in caplog.text
    await _one_throttled_call(server)
    # Fail-closed: even compatibility's 429 rule repeats nothing; the spans still record.
    record = the_record(telemetry)
    assert record[t.SENT] == 1 == server.counters.tool_posts("search")
    assert (attempt_spans(telemetry)[0].attributes or {})[t.DECLINED] == "not-permitted"


@pytest.mark.parametrize("where", ["environment", "config file"])
async def test_a_malformed_key_pointer_in_the_environment_is_logged_naming_the_field_and_runs_fail_closed(
    server: ServerHandle,
    telemetry: Telemetry,
    instrument: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
    where: str,
) -> None:
    """`deduplicates.argument` a JSON Pointer with a '~' RFC 6901 does not write: the app runs,
    the field is named (never the pointer), and a changing call carrying a key is not repeated."""
    pointer = f"/meta/{CANARY}~2"
    declaration = declared(
        server, {"charge": {"changes": True, "on": ["throttle"]}}, deduplicates={"argument": pointer}
    )
    if where == "environment":
        monkeypatch.setenv(ev.OTEL_PYTHON_MCP_REPLAY_SERVERS, json.dumps(declaration))
        field = f"{ev.OTEL_PYTHON_MCP_REPLAY_SERVERS}[0].deduplicates.argument"
    else:
        path = tmp_path / "replay.toml"
        path.write_text(f'[servers."{server.url}".deduplicates]\nargument = "{pointer}"\n')
        monkeypatch.setenv(ev.OTEL_PYTHON_MCP_REPLAY_CONFIG, str(path))
        field = f"{ev.OTEL_PYTHON_MCP_REPLAY_CONFIG}.servers[0].deduplicates.argument"
    with caplog.at_level(logging.ERROR, logger="otel_mcp_replay"):
        instrument()  # never raises for the environment
    logged = " ".join(r.getMessage() for r in caplog.records if r.levelno == logging.ERROR)
    assert f"{field}: " in logged
    assert CANARY not in caplog.text
    server.faults.add("charge", Throttle("0"))
    async with Client(server.url) as client:
        with pytest.raises(MCPError):
            await client.call_tool("charge", {"amount": 5, "meta": {CANARY: "k-1"}, "idempotency_key": "k-1"})
    assert server.counters.tool_posts("charge") == 1  # the 429 was not repeated
    record = the_record(telemetry)
    assert record[t.SENT] == 1
    assert (attempt_spans(telemetry)[0].attributes or {})[t.DECLINED] == "not-permitted"


def test_servers_and_config_together_is_an_error_naming_both(caplog: pytest.LogCaptureFixture) -> None:
    environ = {ev.OTEL_PYTHON_MCP_REPLAY_SERVERS: "{}", ev.OTEL_PYTHON_MCP_REPLAY_CONFIG: "/x.toml"}
    with caplog.at_level(logging.ERROR, logger="otel_mcp_replay"):
        resolved = configuration_of({}, environ)
    assert resolved.fail_closed
    assert (
        ev.OTEL_PYTHON_MCP_REPLAY_SERVERS in caplog.text and ev.OTEL_PYTHON_MCP_REPLAY_CONFIG in caplog.text
    )


def test_valid_environment_settings_are_read() -> None:
    resolved = configuration_of(
        {},
        {
            ev.OTEL_PYTHON_MCP_REPLAY_MAX_ATTEMPTS: "5",
            ev.OTEL_PYTHON_MCP_REPLAY_MAX_WAIT_MS: "250",
            ev.OTEL_PYTHON_MCP_REPLAY_RETRY_ON_THROTTLE: "false",
            ev.OTEL_PYTHON_MCP_REPLAY_RETRY_BUDGET: "off",
        },
    )
    assert not resolved.fail_closed
    settings = resolved.settings
    assert (settings.max_attempts, settings.max_wait_ms, settings.retry_on_throttle) == (5, 250, False)
    assert settings.retry_budget is None
    assert configuration_of({}, {}).settings.retry_budget == (100, 0.1)


@pytest.mark.parametrize(
    ("settings", "field", "error"),
    [
        ({"max_attempts": 0}, "max_attempts", ValueError),
        ({"max_attempts": True}, "max_attempts", TypeError),
        ({"max_wait_ms": -1}, "max_wait_ms", ValueError),
        ({"retry_budget": (0, 0.1)}, "retry_budget", ValueError),
        (
            {
                "servers": {
                    "http://127.0.0.1:9/mcp": {
                        "policy": "app-authorized",
                        "tools": {"charge": {"chnages": True}},
                    }
                }
            },
            "tools.charge.chnages",
            TypeError,
        ),
        (
            {"servers": {"http://127.0.0.1:9/mcp": {"deduplicates": {"argument": f"/meta/{CANARY}~"}}}},
            "servers[0].deduplicates.argument",
            ValueError,
        ),
        ({"no_such_setting": 1}, "no_such_setting", TypeError),
    ],
)
def test_an_invalid_keyword_raises_naming_the_field(
    settings: dict[str, Any], field: str, error: type[Exception]
) -> None:
    instrumentor = McpReplayInstrumentor()
    with pytest.raises(error) as raised:
        instrumentor.instrument(**settings)
    assert field in str(raised.value)
    assert CANARY not in str(raised.value)
    assert not instrumentor.is_instrumented_by_opentelemetry


def test_the_package_metadata_registers_the_entry_points_and_the_instruments_extra() -> None:
    names = {ep.name: ep for ep in entry_points(group="opentelemetry_instrumentor")}
    assert names["mcp_replay"].load() is McpReplayInstrumentor
    variables = {ep.name: ep for ep in entry_points(group="opentelemetry_environment_variables")}
    assert variables["mcp_replay"].load() is ev
    configurators = {ep.name for ep in entry_points(group="opentelemetry_configurator")}
    assert "mcp_replay" in configurators
    requires = distribution("otel-mcp-replay").requires or []
    assert any(r.startswith("mcp") and "extra == 'instruments'" in r.replace('"', "'") for r in requires)
    # Installing the plugin never changes the app's mcp: it is no runtime dependency.
    assert not [r for r in requires if r.replace(" ", "").startswith("mcp") and "extra" not in r]
    assert list(McpReplayInstrumentor().instrumentation_dependencies()) == ["mcp >= 1.24, < 3"]
    extra = [r for r in requires if r.startswith("mcp") and "extra == 'instruments'" in r.replace('"', "'")]
    # the same range as package.py
    assert [r.split(";")[0].replace(" ", "") for r in extra] == ["mcp<3,>=1.24"]
    # Every variable the contract names is in the one constants module.
    for name in (
        "SERVERS",
        "CONFIG",
        "MAX_ATTEMPTS",
        "MAX_WAIT_MS",
        "RETRY_ON_THROTTLE",
        "RETRY_BUDGET",
        "REDACT_KEYS",
        "REDACT_VALUES",
    ):
        assert getattr(ev, f"OTEL_PYTHON_MCP_REPLAY_{name}") == f"OTEL_PYTHON_MCP_REPLAY_{name}"
