"""End to end, for real: the example agent under `opentelemetry-instrument`, set up by environment
variables only, against the demo MCP servers with faults, exporting OTLP/HTTP through a real
collector (rotel's `rotel-agent`, the Rust OTLP collector the `rotel` package bundles) to a receiver
that decodes the protobuf and keeps the raw bytes.

One run (module fixture) is read by several tests: the contract's attributes on attempt spans and
records; one trace per call holding the plugin's, the mcp SDK's and the HTTP client instrumentor's
spans; the servers' own counters against the records; and nothing secret on the wire. Then the demo
module as a user runs it, and the example config as a file the plugin reads.

Both mcp lines run it (the agent opens its client per line). Where they differ, the test says so:
mcp 1.x makes no spans of its own (no `MCP send` span), and its HTTP client is `httpx`, not `httpx2`.
"""

from __future__ import annotations

import hashlib
import hmac
import importlib.util
import itertools
import json
import os
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.support.telemetry import OLD_HTTP_NAMES, OLD_HTTP_STATUS, STABLE_HTTP_NAMES

from harness import run as demo
from harness.ports import free_port, held_port, holds, started_on_free_ports, taken_first, wait_serving
from harness.receiver import OtlpReceiver, SpanDict
from harness.server import Counters
from otel_mcp_replay import environment_variables as ev
from otel_mcp_replay import telemetry as t
from otel_mcp_replay.config import servers_from_config_file
from otel_mcp_replay.policy import BACKOFF_BASE_MS
from otel_mcp_replay.redaction import MASK

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

# Above the demo's own hang guards (harness/run.py): the agent's bound, then its spans'.
pytestmark = pytest.mark.timeout(240)

SESSION_KEY = "end-to-end-session-key-5e2c0a17"
# The argument values examples/agent.py sends: none may cross the wire (the server must see them).
ARGUMENT_VALUES = (
    "invoices due in march",
    "order-7f3a9c",  # the idempotency key
    "ada@example.com",
    "Your receipt for order 7f3a9c",
    "blue widgets",
)
START_TIMEOUT_S = 30.0  # a hang guard only
STOP_TIMEOUT_S = 5.0


# -- the collector -------------------------------------------------------------------------------


def rotel_binary() -> Path:
    spec = importlib.util.find_spec("rotel")
    assert spec is not None and spec.submodule_search_locations, "the rotel package is not installed"
    return Path(next(iter(spec.submodule_search_locations))) / "rotel-agent"


@dataclass
class Collector:
    process: subprocess.Popen[bytes]
    http_port: int
    log: Path

    @property
    def traces_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.http_port}/v1/traces"

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def rotel_command(http_port: int, grpc_port: int, forward_to: str, work: Path) -> list[str]:
    """rotel-agent in the foreground: OTLP in on 127.0.0.1 (HTTP and gRPC), OTLP/HTTP out."""
    return [
        str(rotel_binary()),
        "start",
        "--otlp-http-endpoint",
        f"127.0.0.1:{http_port}",
        "--otlp-grpc-endpoint",
        f"127.0.0.1:{grpc_port}",
        "--exporter",
        "otlp",
        "--otlp-exporter-endpoint",
        forward_to,
        "--otlp-exporter-protocol",
        "http",
        "--batch-timeout",
        "50ms",
        "--pid-file",
        str(work / "rotel.pid"),
        "--log-file",
        str(work / "rotel.log"),
    ]


def rotel_environment() -> dict[str, str]:
    """rotel-agent links the running Python's libpython (for its Python processors). A Python built
    with a shared library outside the loader's own paths (pyenv's, uv's) keeps it in its LIBDIR: the
    agent is told to look there too, as the interpreter itself does (its rpath)."""
    libdir = sysconfig.get_config_var("LIBDIR")
    searched = os.environ.get("LD_LIBRARY_PATH")
    return {**os.environ, "LD_LIBRARY_PATH": f"{libdir}:{searched}" if searched else str(libdir)}


def start_rotel(forward_to: str, work: Path) -> Collector:
    """Start rotel on two free loopback ports, ready once it holds both (whatever else accepts on a
    port it was named is another process's: ports.wait_serving); one that exits because a port was
    taken meanwhile starts again on fresh ones (ports.started_on_free_ports)."""
    starts = itertools.count()

    def start() -> Collector:
        http_port, grpc_port = free_port(), free_port()
        log = work / f"rotel-{next(starts)}.out"
        with log.open("wb") as out:
            process = subprocess.Popen(
                rotel_command(http_port, grpc_port, forward_to, work),
                stdout=out,
                stderr=subprocess.STDOUT,
                env=rotel_environment(),
            )
        collector = Collector(process, http_port, log)
        try:
            wait_serving(
                process,
                http_port,
                lambda: holds(process.pid, grpc_port),
                what="rotel-agent",
                said=collector.output,
                timeout=START_TIMEOUT_S,
            )
        except BaseException:
            stop_rotel(collector)
            raise
        return collector

    return started_on_free_ports(start)


def stop_rotel(collector: Collector) -> None:
    collector.process.terminate()
    try:
        collector.process.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        collector.process.kill()
        collector.process.wait(STOP_TIMEOUT_S)


# -- one run of the example agent ----------------------------------------------------------------


@dataclass
class Run:
    done: subprocess.CompletedProcess[str]
    spans: list[SpanDict]
    raw: bytes
    user_agents: set[str]
    counters: dict[str, Counters]
    session_ids: set[str]
    bodies: bytes


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    work = tmp_path_factory.mktemp("e2e")
    with (
        demo.demo_servers(work, fixed_ports=False) as servers,
        OtlpReceiver() as receiver,
    ):
        collector = start_rotel(receiver.endpoint, work)
        try:
            # The servers mapping inline (OTEL_PYTHON_MCP_REPLAY_SERVERS); the demo uses the file.
            declared = tomllib.loads(servers.config.read_text())["servers"]
            env = demo.agent_environment(servers, collector.traces_endpoint)
            del env[ev.OTEL_PYTHON_MCP_REPLAY_CONFIG]
            env.update(
                {
                    ev.OTEL_PYTHON_MCP_REPLAY_SERVERS: json.dumps(declared),
                    ev.OTEL_PYTHON_MCP_REPLAY_SESSION_KEY: SESSION_KEY,
                    "MCP_DEMO_MODE": "legacy",  # the initialize handshake: a session id on every POST
                    # Have the HTTP client's instrumentor record the session header, so hashing it is tested.
                    "OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_CLIENT_REQUEST": "mcp-session-id",
                    "OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_CLIENT_RESPONSE": "mcp-session-id",
                }
            )
            done = demo.run_agent(env)  # bounded by the demo's hang guard
            assert done.returncode == 0, done.stderr[-3000:]
            arrived = receiver.wait_for(
                lambda spans: demo.records_received(spans) >= 4, timeout=demo.SPANS_TIMEOUT_S
            )
            assert arrived, f"records missing; collector said: {collector.output()[-2000:]}"
        finally:
            stop_rotel(collector)  # it exports what it still holds as it stops: the spans are read after
        log = [post for handle in servers.servers.values() for post in handle.counters.post_log()]
        yield Run(
            done=done,
            spans=receiver.spans(),
            raw=receiver.raw_bytes(),
            user_agents={dict(r.headers).get("user-agent", "") for r in receiver.raw_requests()},
            counters={name: handle.counters for name, handle in servers.servers.items()},
            session_ids={post.session_id for post in log if post.session_id},
            bodies=b"".join(post.body for post in log),
        )


def calls(run: Run) -> dict[tuple[str, str], SpanDict]:
    """The call spans by (endpoint label, tool)."""
    found = {}
    for span in run.spans:
        for event in span["events"]:
            if event["name"] == t.RECORD_EVENT:
                record = event["attributes"]
                found[(record[t.ENDPOINT], record[t.GEN_AI_TOOL_NAME])] = span
    return found


def record_of(span: SpanDict) -> dict[str, Any]:
    (event,) = [e for e in span["events"] if e["name"] == t.RECORD_EVENT]
    return event["attributes"]


def children(run: Run, span: SpanDict) -> list[SpanDict]:
    kids = [s for s in run.spans if s["parent_span_id"] == span["span_id"]]
    return sorted(kids, key=lambda s: s["start_time_unix_nano"])


def attempts(run: Run, call: SpanDict) -> list[dict[str, Any]]:
    spans = [s for s in children(run, call) if t.ATTEMPT in s["attributes"]]
    return [s["attributes"] for s in sorted(spans, key=lambda s: s["attributes"][t.ATTEMPT])]


def session_hash(session_id: str) -> str:
    return "h:" + hmac.new(SESSION_KEY.encode(), session_id.encode(), hashlib.sha256).hexdigest()[:16]


# -- what arrived --------------------------------------------------------------------------------


def test_the_agent_saw_what_the_law_says(run: Run) -> None:
    lines = run.done.stdout.splitlines()
    assert len(lines) == 4, run.done.stdout
    search, charge, send_email, catalog = lines
    assert search.startswith("search") and "-> ok:" in search
    assert charge.startswith("charge") and "-> ok: charged 42" in charge
    assert send_email.startswith("send_email") and "-> UnknownEffectError" in send_email
    assert catalog.startswith("search") and "-> ok:" in catalog
    assert "Traceback" not in run.done.stderr and "otel-mcp-replay" not in run.done.stderr


def test_the_spans_crossed_a_real_collector(run: Run) -> None:
    # Every export the receiver got came from rotel, none straight from the SDK's exporter.
    assert run.user_agents and all(ua.startswith("Rotel ") for ua in run.user_agents), run.user_agents
    assert {s["resource"].get("service.name") for s in run.spans} == {"mcp-demo-agent"}


def test_attempt_spans_and_records_carry_the_contract_attributes(run: Run) -> None:
    found = calls(run)
    assert set(found) == {("billing", "search"), ("billing", "charge"), ("billing", "send_email"),
                          ("catalog", "search")}  # fmt: skip
    for call in found.values():
        record = record_of(call)
        assert set(record) == set(t.RECORD_KEYS)  # all of the allow-list, nothing else
        assert all(len(record[key]) == record[t.SENT] for key in t.RECORD_COLUMN_KEYS)
        assert record[t.OMITTED] == 0
        assert len(attempts(run, call)) == record[t.SENT]
        for number, attempt in enumerate(attempts(run, call), start=1):
            # The HTTP instrumentation's default vocabulary (the agent sets no OTEL_SEMCONV_STABILITY_OPT_IN):
            # the old names, and no MCP method (an attempt is an HTTP span, no MCP operation).
            assert set(attempt) - set(t.ATTEMPT_SPAN_KEYS) <= OLD_HTTP_NAMES
            assert not set(attempt) & STABLE_HTTP_NAMES and t.MCP_METHOD_NAME not in attempt
            assert attempt[t.GEN_AI_TOOL_NAME] == record[t.GEN_AI_TOOL_NAME]
            assert attempt[t.JSONRPC_REQUEST_ID] == record[t.JSONRPC_REQUEST_ID]
            assert attempt[t.ATTEMPT] == number
            assert t.HTTP_RESEND_COUNT not in attempt  # the old names have none: mcp.replay.attempt says it
            assert attempt[t.EFFECT] == record[t.ATTEMPTS_EFFECT][number - 1]

    # search on billing (app-authorized, names throttle): a 429 with Retry-After: 1, then repeated by app.
    search = found[("billing", "search")]
    record = record_of(search)
    assert record[t.POLICY] == "app-authorized"
    assert record[t.VERDICT] == "completed" and record[t.MAY_HAVE_RUN] is False
    assert record[t.ATTEMPTS_STATUS] == [429, 200]
    assert record[t.ATTEMPTS_FAILURE] == ["throttle", ""]
    assert record[t.ATTEMPTS_PERMISSION] == ["first", "app"]
    assert record[t.ATTEMPTS_WAIT_MS] == [1000, 0]
    assert record[t.EFFECT] == "unknown"  # a 429 is not proof the tool did not run
    first, second = attempts(run, search)
    assert first[OLD_HTTP_STATUS] == 429 and first[t.FAILURE] == "throttle"
    assert first[t.WAIT_MS] == 1000 and first[t.EFFECT] == "unknown"
    assert t.PERMISSION_BY not in first and t.DECLINED not in first
    assert second[t.PERMISSION_BY] == "app" and second[t.PERMISSION_ON] == "throttle"
    assert t.PERMISSION_ASSUMES not in second and t.FAILURE not in second
    assert second[OLD_HTTP_STATUS] == 200 and second[t.EFFECT] == "applied"

    # charge (changes, carries its key): the connection cut after it ran, repeated by app.
    charge = found[("billing", "charge")]
    record = record_of(charge)
    assert record[t.ATTEMPTS_STATUS] == [0, 200]
    assert record[t.ATTEMPTS_FAILURE] == ["network", ""]
    assert record[t.ATTEMPTS_PERMISSION] == ["first", "app"]
    assert record[t.ATTEMPTS_EFFECT] == ["unknown", "applied"]
    first, second = attempts(run, charge)
    assert OLD_HTTP_STATUS not in first and first[t.FAILURE] == "network"
    # The first repeat's equal-jitter backoff (policy.backoff_ms): half the base fixed, half drawn.
    assert BACKOFF_BASE_MS // 2 <= first[t.WAIT_MS] < BACKOFF_BASE_MS
    assert first[t.WAIT_MS] == record[t.ATTEMPTS_WAIT_MS][0]
    assert second[t.PERMISSION_BY] == "app" and second[t.PERMISSION_ON] == "network"

    # send_email (changes, no key): cut after it ran, never repeated, the caller told it may have run.
    send_email = found[("billing", "send_email")]
    record = record_of(send_email)
    assert record[t.SENT] == 1 and record[t.VERDICT] == "failed" and record[t.MAY_HAVE_RUN] is True
    assert record[t.EFFECT] == "unknown"
    (only,) = attempts(run, send_email)
    assert only[t.FAILURE] == "network" and only[t.DECLINED] == "changes-without-key"
    assert t.WAIT_MS not in only
    assert send_email["attributes"][t.ERROR_TYPE] == "otel_mcp_replay.UnknownEffectError"
    assert send_email["status"]["code"] == "ERROR"

    # search on catalog (compatibility, names only network): the 429 repeated on an assumption.
    catalog = found[("catalog", "search")]
    record = record_of(catalog)
    assert record[t.POLICY] == "compatibility"
    assert record[t.ATTEMPTS_PERMISSION] == ["first", "compatibility"]
    first, second = attempts(run, catalog)
    assert first[t.WAIT_MS] > 0  # no Retry-After: the plugin's own backoff
    assert second[t.PERMISSION_BY] == "compatibility" and second[t.PERMISSION_ON] == "throttle"
    assert second[t.PERMISSION_ASSUMES] == "refused-before-execution"


def test_each_call_is_one_client_span_with_one_http_client_span_per_attempt(run: Run) -> None:
    assert calls(run), "the demo made no tool call"
    for call in calls(run).values():
        record = record_of(call)
        tool, request_id = record[t.GEN_AI_TOOL_NAME], record[t.JSONRPC_REQUEST_ID]
        assert call["name"] == f"tools/call {tool}" and call["scope"] == t.INSTRUMENTATION_NAME
        assert call["attributes"][t.JSONRPC_REQUEST_ID] == request_id
        trace = [s for s in run.spans if s["trace_id"] == call["trace_id"]]
        assert call["kind"] == "CLIENT"
        # The call span stands in for the SDK's own client span of the request (mcp 1.x makes none).
        assert not [s for s in trace if s["name"] == f"MCP send tools/call {tool}"]
        # Each attempt: the HTTP client span of its POST, a CLIENT child of the call; the httpx
        # instrumentation (httpx2's on mcp 2.x, httpx's on 1.x), suppressed for it, makes none under it.
        attempt_spans = [s for s in children(run, call) if t.ATTEMPT in s["attributes"]]
        assert len(attempt_spans) == record[t.SENT]
        for attempt in attempt_spans:
            assert attempt["name"] == "POST" and attempt["kind"] == "CLIENT"
            assert attempt["scope"] == t.INSTRUMENTATION_NAME and attempt["trace_id"] == call["trace_id"]
            assert children(run, attempt) == []
        # No HTTP instrumentation span carries this call's POSTs: 1 + N client spans per call.
        client_spans = [
            s
            for s in trace
            if s["kind"] == "CLIENT"
            and s["attributes"].get(t.MCP_METHOD_NAME) in (None, "tools/call")
            and s["parent_span_id"] in (None, "", call["span_id"])
        ]
        assert sorted(s["span_id"] for s in client_spans) == sorted(
            s["span_id"] for s in [call, *attempt_spans]
        )


def test_the_servers_counts_match_the_records(run: Run) -> None:
    billing, catalog = run.counters["billing"], run.counters["catalog"]
    found = calls(run)
    assert found, "the demo made no tool call"
    for (endpoint, tool), call in found.items():
        assert run.counters[endpoint].tool_posts(tool) == record_of(call)[t.SENT], (endpoint, tool)
    assert billing.executions("search") == 1 == catalog.executions("search")  # the 429s never ran it
    assert billing.executions("charge") == 1  # sent twice, run once: the server deduplicated the key
    assert billing.deduplicated("charge") == 1
    assert billing.executions("send_email") == 1  # it did run: "may have run" was the truth
    assert billing.tool_posts("send_email") == 1


def test_no_argument_value_key_or_raw_session_id_crosses_the_wire(run: Run) -> None:
    assert run.raw and run.session_ids
    for value in ARGUMENT_VALUES:
        assert value.encode() in run.bodies, value  # the servers did receive it
        assert value.encode() not in run.raw, value
    for session_id in run.session_ids:
        assert session_id.encode() not in run.raw
    # The HTTP client's instrumentor did record the session header: it arrived hashed.
    hashed = {session_hash(s) for s in run.session_ids}
    captured = [
        value
        for span in run.spans
        for key, values in span["attributes"].items()
        if key.endswith("header.mcp_session_id")
        for value in values
    ]
    assert captured and set(captured) <= hashed | {MASK}
    assert set(captured) & hashed


# -- the demo, as a user runs it -----------------------------------------------------------------


@pytest.mark.timeout(360)
def test_a_rotel_whose_port_was_taken_starts_on_fresh_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another process of the run holds the port named first (its HTTP port): rotel exits at its
    # bind, saying so, and starts again on the ports named next, which it holds.
    with held_port() as taken:
        port, named = taken_first(taken)
        monkeypatch.setattr(sys.modules[__name__], "free_port", port)
        collector = start_rotel("http://127.0.0.1:9/v1/traces", tmp_path)
        try:
            assert named[0] == taken and len(named) == 4
            assert collector.http_port == named[2] != taken
            assert holds(collector.process.pid, named[2]) and holds(collector.process.pid, named[3])
            assert "Address already in use" in (tmp_path / "rotel-0.out").read_text(errors="replace")
        finally:
            stop_rotel(collector)


def test_the_demo_runs_and_prints_each_tool_calls_trace_as_a_tree() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "harness.run"],
        capture_output=True,
        text=True,
        timeout=300,  # a guard against a hang only (it takes a few seconds), above the demo's own
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    for line in (
        "opentelemetry-instrument python",
        "OTEL_PYTHON_CONFIGURATOR=mcp_replay",
        "-> UnknownEffectError",
        "charge sent 2x, ran 1x (+1 answered from its idempotency key)",
        "send_email sent 1x, ran 1x",
        "The trace of each tool call, as exported (4 calls):",
        "└─ tools/call search",
        "call: verdict completed · effect unknown · sent 2 · may have run: no · policy app-authorized",
        "#1 first: HTTP 429, throttle, effect unknown, waited 1000 ms",
        "attempt 2 · HTTP 200 · repeat allowed by app on throttle · effect applied",
        "attempt 2 · HTTP 200 · repeat allowed by app on network · effect applied",
        "tools/call send_email",
        "call: verdict failed · effect unknown · sent 1 · may have run: yes",
        "no repeat: changes-without-key",
        "repeat allowed by compatibility on throttle, assuming refused-before-execution",
        "POST  [client",
        "a 429 is not proof that the tool did not run",
        "did not fail with UnknownEffectError",
    ):
        assert line in out, line
    assert "MCP send tools/call" not in out  # the call span stands in for the SDK's
    trees = out[out.index("The trace of each tool call") :]
    assert "{" not in trees  # words, not JSON
    assert out.count("\ntrace ") == 4
    assert "agent stderr" not in out


# -- the example config --------------------------------------------------------------------------


def test_the_example_config_parses_and_declares_both_policies() -> None:
    servers = servers_from_config_file(demo.CONFIG.read_text(), ".toml", "examples/replay.toml")
    assert len(servers) == len(demo.ORIGINS) == 2
    billing = servers.declaration_for(demo.ORIGINS["billing"] + "/mcp")
    assert billing.policy == "app-authorized" and billing.label == "billing"
    assert billing.key_argument == "idempotency_key"
    assert billing.tools["search"].on == {"throttle", "network"} and not billing.tools["search"].changes
    assert billing.tools["charge"].changes and billing.tools["send_email"].changes
    catalog = servers.declaration_for(demo.ORIGINS["catalog"] + "/mcp")
    assert catalog.policy == "compatibility" and catalog.label == "catalog"
    # The demo's faults script only tools the example declares.
    assert set(demo.FAULTS["billing"]) <= set(billing.tools)
    assert set(demo.FAULTS["catalog"]) <= set(catalog.tools)
