"""Agent processes sharing a repeat guard through a store: what the store tests of each deployment
share (tests/law/test_guard_store.py, tests/law/test_guard_deployments.py).

Each agent (harness/guard_agent.py) is configured by the environment alone, as a deployed app is,
and calls the test's MCP server, whose `charge` changes and `search` does not."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from harness.server import ServerHandle
from otel_mcp_replay import environment_variables as ev
from otel_mcp_replay import telemetry as t

ROOT = Path(__file__).resolve().parents[2]
SECRET = "the agents' shared secret, 32 bytes+"
_ANSWER_TIMEOUT_S = 60.0  # a hang guard only
# The bound on each store operation where the test needs every one to answer: generous, so a loaded
# machine's slow first connection is not read as an outage (the default, 50 ms, is the benchmark's).
ANSWERING_BOUND_MS = 2000


def declared(server: ServerHandle) -> dict[str, Any]:
    tools = {"charge": {"changes": True, "on": ["network"]}, "search": {"on": ["network"]}}
    return {
        server.url: {
            "policy": "app-authorized",
            "tools": tools,
            "deduplicates": {"argument": "idempotency_key"},
        }
    }


class Agent:
    """One agent process: its calls made on command, what it exported read back."""

    def __init__(self, server: ServerHandle, store_url: str, backend: str, log: Path, **extra: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        env.update(
            {
                "PYTHONPATH": str(ROOT),
                ev.OTEL_PYTHON_MCP_REPLAY_SERVERS: json.dumps(declared(server)),
                ev.OTEL_PYTHON_MCP_REPLAY_REPEAT_GUARD_STORE: store_url,
                ev.OTEL_PYTHON_MCP_REPLAY_REPEAT_GUARD_SECRET: SECRET,
                ev.OTEL_PYTHON_MCP_REPLAY_REPEAT_GUARD_STORE_TIMEOUT_MS: str(ANSWERING_BOUND_MS),
                **extra,
            }
        )
        self.log = log
        self._stderr = log.open("w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "harness.guard_agent", server.url, backend],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        assert self._answer() == {"ready": True}

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line)
        self._lines.put("")

    def _answer(self) -> dict[str, Any]:
        line = self._lines.get(timeout=_ANSWER_TIMEOUT_S)
        assert line, f"the agent exited: {self.log.read_text()}"
        answer: dict[str, Any] = json.loads(line)
        return answer

    def _ask(self, command: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()
        return self._answer()

    def call(self, arguments: dict[str, Any], *, tool: str = "charge", confirmed: bool = False) -> str:
        outcome: str = self._ask(
            {"op": "call", "tool": tool, "arguments": arguments, "confirmed": confirmed}
        )["outcome"]
        return outcome

    def report(self) -> dict[str, Any]:
        return self._ask({"op": "report"})

    def fallbacks(self) -> dict[tuple[str, str], int]:
        """The fallback metric: (operation, failure) -> count."""
        return {
            (attrs[t.GUARD_STORE_OPERATION], attrs[t.GUARD_STORE_FAILURE]): value
            for attrs, value in self.report()["fallbacks"]
        }

    def stop(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        self._stderr.close()


def agents_in(folder: Path) -> Iterator[Callable[..., Agent]]:
    """The body of a fixture: agent(server, store_url, backend, **env), each stopped after."""
    made: list[Agent] = []

    def agent(server: ServerHandle, store_url: str, backend: str, **extra: str) -> Agent:
        made.append(Agent(server, store_url, backend, folder / f"agent-{len(made)}.log", **extra))
        return made[-1]

    yield agent
    for one in made:
        one.stop()


def said(agent: Agent, level: str) -> list[str]:
    """What the agent's plugin logged at `level`."""
    return [message for told, message in agent.report()["logs"] if told == level]
