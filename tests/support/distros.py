"""The rig of the distro runs (tests/frameworks/test_aws_distro.py, test_otel_distro.py): the app of
tests/support/distro_app.py under the installed `opentelemetry-instrument`, exporting OTLP to the
harness receiver, and what a backend then holds of each tool call.

The app serves the fault server in its own process (what instruments an mcp server there instruments
it: the server's span is exported beside the client's), declares it app-authorized (`search` repeated
on a 429, `charge` changing state: never repeated), and calls each tool once with canaries in the
arguments. Ground truth is the server's count of executions, which the app prints.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import otel_mcp_replay
from harness.ports import free_port, start_failure, started_on_free_ports
from harness.receiver import OtlpReceiver, SpanDict
from otel_mcp_replay import telemetry as t

BIN = Path(sys.executable).parent
APP = Path(__file__).with_name("distro_app.py")
# The repository: the harness and the tests' support are imported from it, the plugin as installed.
ROOT = Path(otel_mcp_replay.__file__).resolve().parents[2]
CANARIES = {"QUERY": "q-Canary81", "KEY": "idem-Canary82"}
TOOLS = ("search", "charge")
RECORD = "mcp.tool.request_attempts"
# How the app fails when its server cannot bind its port (harness.server.running_server, at its start).
_PORT_TAKEN = "OSError: [Errno 98] Address already in use"


@dataclass(frozen=True)
class AppRun:
    outcomes: dict[str, str]  # what the app saw of each call
    executions: dict[str, int]  # what the server counted
    sessions: list[str]  # the session ids the server handed out (secrets: never exported raw)
    stderr: str


def run_app(receiver: OtlpReceiver, **extra_env: str) -> AppRun:
    """The app under `opentelemetry-instrument` with `extra_env` (the distro's and configurator's
    choice), its spans exported to `receiver` (a 90 s timeout guards a hang). Its server's port is
    named before the app binds it: an app that finds it taken exits before it calls anything, and is
    run again on a fresh one (ports.started_on_free_ports)."""
    return started_on_free_ports(lambda: _run_app_on(free_port(), receiver, extra_env))


def _run_app_on(port: int, receiver: OtlpReceiver, extra_env: dict[str, str]) -> AppRun:
    servers = {
        f"http://127.0.0.1:{port}": {
            "policy": "app-authorized",
            "tools": {"search": {"on": ["throttle"]}, "charge": {"changes": True}},
        }
    }
    env = {key: value for key, value in os.environ.items() if not key.startswith(("OTEL_", "AWS_", "AGENT_"))}
    env.update(
        {
            "PYTHONPATH": str(ROOT),
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_LOGS_EXPORTER": "none",
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_SERVICE_NAME": "distro-app",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
            "OTEL_PYTHON_MCP_REPLAY_SERVERS": json.dumps(servers),
            # Ask the HTTP instrumentation to record the header that carries the session id.
            "OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_CLIENT_REQUEST": "mcp-session-id",
            **extra_env,
        }
    )
    instrument, python = str(BIN / "opentelemetry-instrument"), str(BIN / "python")
    command = [instrument, python, str(APP), str(port), json.dumps(CANARIES)]
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=90, check=False)
    if done.returncode != 0:
        raise start_failure("the distro app", done.returncode, done.stderr, taken=_PORT_TAKEN)
    said = json.loads(done.stdout.strip().splitlines()[-1])
    return AppRun(said["outcomes"], said["executions"], said["sessions"], done.stderr)


def is_call_span(span: SpanDict) -> bool:
    """An MCP client span of a tool call, whoever made it."""
    return span["kind"] == "CLIENT" and span["attributes"].get(t.MCP_METHOD_NAME) == t.TOOLS_CALL_METHOD


@dataclass(frozen=True)
class CallTree:
    """What the backend holds of one tool's call: its MCP client spans, the POSTs under the first,
    the servers' spans of that tool, and the record."""

    calls: list[SpanDict]
    attempts: list[SpanDict]
    servers: list[SpanDict]
    record: dict[str, Any]


def call_tree(spans: list[SpanDict], tool: str) -> CallTree:
    calls = [s for s in spans if is_call_span(s) and s["attributes"].get(t.GEN_AI_TOOL_NAME) == tool]
    call_id = calls[0]["span_id"] if calls else None
    attempts = [s for s in spans if s["parent_span_id"] == call_id and s["name"] == "POST"]
    servers = [
        s
        for s in spans
        if s["kind"] == "SERVER"
        and s["attributes"].get(t.MCP_METHOD_NAME) == t.TOOLS_CALL_METHOD
        and s["attributes"].get(t.GEN_AI_TOOL_NAME) == tool
    ]
    events = [e for s in calls for e in s["events"] if e["name"] == RECORD]
    return CallTree(calls, attempts, servers, events[0]["attributes"] if len(events) == 1 else {})


def exported(receiver: OtlpReceiver, *, server_spans: bool = True) -> list[SpanDict]:
    """The spans received once both calls' spans (and `server_spans`, the server's) have come (20 s
    at most)."""

    def come(spans: list[SpanDict]) -> bool:
        trees = [call_tree(spans, tool) for tool in TOOLS]
        return all(tree.calls and tree.record and (tree.servers or not server_spans) for tree in trees)

    receiver.wait_for(come, timeout=20)
    return receiver.spans()


def raw_session_ids(spans: list[SpanDict]) -> list[str]:
    """Every `mcp.session.id` exported that is not the keyed hash redaction leaves (`h:` + 16 hex)."""
    found = [str(s["attributes"][t.MCP_SESSION_ID]) for s in spans if t.MCP_SESSION_ID in s["attributes"]]
    return [value for value in found if not (value.startswith("h:") and len(value) == 18)]


def leaked(receiver: OtlpReceiver, run: AppRun) -> list[str]:
    """The canaries and the server's session ids found in what crossed the wire to the receiver."""
    assert run.sessions, "the server handed out no session id: the check would be vacuous"
    raw = receiver.raw_bytes()
    secrets = {**CANARIES, **{f"session {n}": session for n, session in enumerate(run.sessions)}}
    return [name for name, value in secrets.items() if value.encode() in raw]


def checked_run(*, server_spans: bool, **extra_env: str) -> tuple[list[SpanDict], dict[str, CallTree]]:
    """The app run with `extra_env`, its spans received, and what holds in every set-up checked
    (`check_calls`; no canary, no session id the server handed out, no raw `mcp.session.id`
    exported; nothing left for the export-path WARNING to name). The spans and call trees, for what a
    set-up adds."""
    with OtlpReceiver() as receiver:
        run = run_app(receiver, **extra_env)
        spans = exported(receiver, server_spans=server_spans)
        trees = check_calls(spans, run, server_spans=server_spans)
        assert leaked(receiver, run) == [] and raw_session_ids(spans) == []
    assert "without redaction" not in run.stderr
    return spans, trees


def check_calls(spans: list[SpanDict], run: AppRun, *, server_spans: bool) -> dict[str, CallTree]:
    """The law held (search's 429 repeated, charge cut after it ran and never repeated: the server's
    counts) and each call is ONE MCP client span, the plugin's, carrying its record, with its POSTs
    under it and (`server_spans`: something instruments the server) the server's span its child.
    The trees, for what a set-up adds."""
    assert run.executions == {"search": 1, "charge": 1}, run
    assert run.outcomes == {"search": "completed", "charge": "UnknownEffectError"}, run
    trees = {tool: call_tree(spans, tool) for tool in TOOLS}
    for tool, tree in trees.items():
        assert len(tree.calls) == 1, [(s["scope"], s["name"]) for s in tree.calls]
        (call,) = tree.calls
        assert (call["scope"], call["name"]) == (t.INSTRUMENTATION_NAME, f"tools/call {tool}")
        if server_spans:
            assert tree.servers and all(s["parent_span_id"] == call["span_id"] for s in tree.servers), tool
    search, charge = trees["search"], trees["charge"]
    assert sorted(s["attributes"][t.ATTEMPT] for s in search.attempts) == [1, 2]
    assert list(search.record[t.ATTEMPTS_STATUS]) == [429, 200]
    assert search.record[t.SENT] == 2 and search.record[t.VERDICT] == "completed"
    assert len(charge.attempts) == 1 and charge.record[t.SENT] == 1
    assert charge.record[t.VERDICT] == "failed" and charge.record[t.MAY_HAVE_RUN] is True
    return trees
