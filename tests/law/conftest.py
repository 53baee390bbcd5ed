"""Fixtures of the shared repeat guard's store tests (test_guard_store.py, test_guard_deployments.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.support.guard_agents import Agent, agents_in

from harness.server import ServerHandle, running_server


@pytest.fixture
def mcp_server() -> Iterator[ServerHandle]:
    """The demo MCP server the agent processes call (streamable HTTP), counting executions."""
    with running_server("streamable") as handle:
        yield handle


@pytest.fixture
def agents(tmp_path: Path) -> Iterator[Callable[..., Agent]]:
    """agent(server, store_url, backend, **env): an agent process, stopped after the test."""
    yield from agents_in(tmp_path)
