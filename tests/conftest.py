"""Fixtures and hooks only (pytest hands them to the tests): the telemetry read in memory, the demo
server, the instrumentor switched on and off. The rigs and builders are in tests/support/."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from importlib.metadata import version
from importlib.util import find_spec
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from tests.support.telemetry import Telemetry

from harness.client import ERAS

# No test asserts on a clock, hypothesis' included: its defaults fail an example slower than 200 ms,
# and a search whose examples come slowly, which a busy machine (three chains of suites on two cores)
# turns into failures of their own. What the examples find decides, however long they take.
settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")

# LangChain's adapters and mcp-use pin mcp < 2: their tests run in the mcp 1.30 environment
# (scripts/test-lines).
MCP_2X = int(version("mcp").split(".")[0]) >= 2
collect_ignore = ["frameworks/test_langchain.py", "frameworks/test_mcp_use.py"] if MCP_2X else []
# Task-backed calls need fastmcp-tasks, which pins fastmcp to its own release: their test runs in the
# tasks environment (scripts/test-lines), and is left out where fastmcp-tasks is not installed.
if find_spec("fastmcp_tasks") is None:
    collect_ignore += [
        "tasks/test_tasks.py",
        "tasks/test_task_ids_captured.py",
        "tasks/test_foreign_tasks.py",
    ]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=ERAS)
def mode(request: pytest.FixtureRequest) -> str:
    """Each protocol era the installed line speaks: session ids (legacy) and, on 2.x, per-message
    headers (2026-07-28)."""
    return str(request.param)


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[Any]:
    """The demo MCP server on 127.0.0.1: streamable HTTP (SSE-framed answers), or, in a module that
    sets SERVER_TRANSPORTS, each transport it names (see pytest_generate_tests)."""
    from harness.server import running_server

    with running_server(getattr(request, "param", "streamable")) as handle:
        yield handle


@pytest.fixture
def telemetry() -> Telemetry:
    return Telemetry()


@pytest.fixture
def instrument(telemetry: Telemetry) -> Iterator[Callable[..., Any]]:
    """instrument(**settings): the plugin on, with the test's providers; off again after the test."""
    from otel_mcp_replay import McpReplayInstrumentor

    instrumentor = McpReplayInstrumentor()

    def on(**settings: Any) -> Any:
        if instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.uninstrument()
        instrumentor.instrument(
            tracer_provider=telemetry.tracer_provider, meter_provider=telemetry.meter_provider, **settings
        )
        return instrumentor

    yield on
    if instrumentor.is_instrumented_by_opentelemetry:
        instrumentor.uninstrument()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A module's `SERVER_TRANSPORTS = ("streamable", "sse")` runs each of its tests that uses the
    `server` fixture once on each transport."""
    transports = getattr(metafunc.module, "SERVER_TRANSPORTS", None)
    if transports and "server" in metafunc.fixturenames:
        metafunc.parametrize("server", transports, indirect=True)


def pytest_addoption(parser: pytest.Parser) -> None:
    """`--long`: the reliability suite's long run (at least 2,000 calls); CI runs a quick size."""
    parser.addoption("--long", action="store_true", default=False, help="run the long reliability suite")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Under scripts/stages.sh, each test that failed or broke, one line of at most 200 characters
    (its id and the first line of why), for the run's summary: the end of a long run's output then
    says which tests failed."""
    path = os.environ.get("STAGES_FAILURES")
    if not path:
        return
    reports = [*terminalreporter.stats.get("failed", ()), *terminalreporter.stats.get("error", ())]
    with open(path, "a", encoding="utf-8") as failures:
        for report in reports:
            crash = getattr(report.longrepr, "reprcrash", None)  # absent where collecting broke
            why = crash.message.strip().splitlines() if crash is not None else []
            failures.write(f"{report.nodeid}: {why[0] if why else 'broke'}"[:200] + "\n")
