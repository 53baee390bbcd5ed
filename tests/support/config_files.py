"""The demo's agent configured by a file: examples/otel-config.yaml (edited as a test asks, its
endpoints rewritten to the ports served) under `opentelemetry-instrument`, with `OTEL_CONFIG_FILE`
and no other `OTEL_*` variable, against the demo's fault-injecting servers; what the servers counted
and, when it exports to the rig's own receiver, what it exported."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from harness.receiver import OtlpReceiver, SpanDict
from harness.run import EXAMPLES, FAULTS, agent_environment, demo_servers, records_received, run_agent

CONFIG: Final = EXAMPLES / "otel-config.yaml"
TOOLS: Final = ("search", "charge", "send_email")
TWICE: Final = "Attempting to instrument while already instrumented"


@dataclass(frozen=True)
class FileRun:
    stdout: str
    stderr: str
    posts: Mapping[tuple[str, str], int]  # (endpoint name, tool) -> tools/call POSTs received
    runs: Mapping[tuple[str, str], int]  # (endpoint name, tool) -> executions
    spans: list[SpanDict]
    raw: bytes


def run_with_file(
    tmp_path: Path,
    configurator: str,
    edit: Mapping[str, str] | None = None,
    faults: Mapping[str, Mapping[str, list[dict[str, Any]]]] = FAULTS,
    traces_endpoint: str = "",
    arrived: Callable[[list[SpanDict]], bool] | None = None,
    **extra_env: str,
) -> FileRun:
    """The demo's agent configured by the example file (with `edit`'s replacements), exporting to
    `traces_endpoint` (unset: a receiver of its own, whose spans and bytes the run holds, once
    `arrived` holds of them: by default, once its four calls' records are in)."""
    text = CONFIG.read_text(encoding="utf-8")
    for old, new in (edit or {}).items():
        assert old in text, old
        text = text.replace(old, new)
    config = tmp_path / "otel-config.yaml"
    config.write_text(text, encoding="utf-8")
    with contextlib.ExitStack() as stack:
        receiver = None if traces_endpoint else stack.enter_context(OtlpReceiver())
        endpoint = traces_endpoint if receiver is None else receiver.traces_endpoint
        demo = stack.enter_context(demo_servers(tmp_path, config, fixed_ports=False, faults=faults))
        env = {
            key: value
            for key, value in agent_environment(demo, endpoint).items()
            if not key.startswith("OTEL_")
        }
        env.update(
            {
                "OTEL_CONFIG_FILE": str(demo.config),
                "OTEL_PYTHON_CONFIGURATOR": configurator,
                "MCP_REPLAY_OTLP_TRACES_ENDPOINT": endpoint,
                **extra_env,
            }
        )
        done = run_agent(env, timeout=90)
        assert done.returncode == 0, done.stderr[-4000:]
        calls = sum(1 for line in done.stdout.splitlines() if " -> " in line)
        assert calls == 4, done.stdout  # the app ran every step, whatever the file said
        if receiver is not None:  # bounded: the app has exited, whatever it exported is in by now
            receiver.wait_for(arrived or (lambda spans: records_received(spans) >= 4), timeout=10)
        counters = {name: handle.counters for name, handle in demo.servers.items()}
        return FileRun(
            done.stdout,
            done.stderr,
            {
                (n, tool): c.tool_posts(tool)
                for n, c in counters.items()
                for tool in TOOLS
                if c.tool_posts(tool)
            },
            {
                (n, tool): c.executions(tool)
                for n, c in counters.items()
                for tool in TOOLS
                if c.tool_posts(tool)
            },
            [] if receiver is None else receiver.spans(),
            b"" if receiver is None else receiver.raw_bytes(),
        )
