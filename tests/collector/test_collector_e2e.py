"""collector-config/ run for real: the Collector it builds, in front of Jaeger v2, fed by the demo's agent.

The binaries are real upstream builds (scripts/otel-binaries): the Collector v0.161.0 of
collector-config/builder-config.yaml and Jaeger v2 (module v1.75.0), each on free 127.0.0.1 ports,
each shipped config run unchanged (its settings by environment). The traffic is the demo's agent
(examples/agent.py under opentelemetry-instrument) against the harness server, or, for redaction, an
app that exports without the plugin's configurator. What Jaeger holds is read from its query API,
as its UI reads it; the servers' own counters are the ground truth of what ran. When the binaries
are not built every test here fails, never skips: CI builds them first (scripts/test).

Sampling waits are bounded polls on what Jaeger and the Collector report; no clock decides a verdict.
"""

from __future__ import annotations

import contextlib
import http.server
import os
import re
import subprocess
import sys
import textwrap
import threading
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest

from harness import otel_stack as o
from harness.client import ERAS
from harness.ports import PORT_TRIES, PortTaken, free_port, held_port
from harness.receiver import OtlpReceiver, SpanDict
from harness.run import FAULTS, agent_environment, demo_servers, run_agent
from harness.server import Counters, build_server, running_server
from otel_mcp_replay import telemetry as t

REPO: Final = Path(__file__).resolve().parents[2]
DOCS: Final = REPO / "docs" / "jaeger-tempo.md"
SERVICE: Final = "mcp-demo-agent"  # harness.run.agent_environment's OTEL_SERVICE_NAME
DECISION_WAIT: Final = "2s"
ARRIVAL_GUARD_S: Final = 90.0  # a bound on waiting for what the Collector sends on; never a verdict
AGENT_GUARD_S: Final = 90.0
MODERN: Final = "2026-07-28"
BIN: Final = Path(sys.executable).parent

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def bins() -> o.Binaries:
    try:
        return o.binaries()
    except o.BinariesMissing as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture
def jaeger(bins: o.Binaries, tmp_path: Path) -> Iterator[o.Jaeger]:
    with o.running_jaeger(bins.jaeger, tmp_path) as running:
        yield running


def backends(jaeger: o.Jaeger, sample_percent: int) -> dict[str, str]:
    return {
        "MCP_REPLAY_JAEGER_ENDPOINT": jaeger.otlp_grpc,
        "MCP_REPLAY_TEMPO_ENDPOINT": o.closed_endpoint(),  # Tempo is AGPL: not run here
        "MCP_REPLAY_SAMPLE_PERCENT": str(sample_percent),
        "MCP_REPLAY_DECISION_WAIT": DECISION_WAIT,
    }


# ---------------------------------------------------------------------------------------------
# The demo's agent, and what it saw


@dataclass(frozen=True)
class AgentRun:
    seen: list[str]  # the agent's own lines: tool, step, what came back
    posts: dict[tuple[str, str], int]  # (endpoint name, tool) -> tools/call POSTs the server received
    runs: dict[tuple[str, str], int]  # (endpoint name, tool) -> executions


def run_demo_agent(
    work: Path,
    traces_endpoint: str,
    faults: Mapping[str, Mapping[str, list[dict[str, Any]]]] = FAULTS,
    **extra: str,
) -> AgentRun:
    tools = ("search", "charge", "send_email")
    work.mkdir(parents=True, exist_ok=True)
    with demo_servers(work, fixed_ports=False, faults=faults) as demo:
        env = agent_environment(demo, traces_endpoint, **extra)
        done = run_agent(env, timeout=AGENT_GUARD_S)
        assert done.returncode == 0, done.stderr[-4000:]
        counters: dict[str, Counters] = {name: h.counters for name, h in demo.servers.items()}
    return AgentRun(
        [line for line in done.stdout.splitlines() if " -> " in line],
        {(n, tool): c.tool_posts(tool) for n, c in counters.items() for tool in tools if c.tool_posts(tool)},
        {(n, tool): c.executions(tool) for n, c in counters.items() for tool in tools if c.tool_posts(tool)},
    )


# Every call of the demo's agent meets a fault on its first POST except the searches here: they are
# clean calls (one POST, answered).
CLEAN_SEARCHES: Final = {
    "billing": {"charge": [{"fault": "drop-after"}], "send_email": [{"fault": "drop-after"}]},
    "catalog": {},
}


# ---------------------------------------------------------------------------------------------
# Jaeger's traces, read as the contract draws a call


def traces_in_jaeger(jaeger: o.Jaeger, service: str = SERVICE) -> dict[str, list[SpanDict]]:
    if service not in jaeger.services():
        return {}
    return {trace["traceID"]: jaeger.spans_v3(trace["traceID"]) for trace in jaeger.find(service)}


def call_spans(spans: Sequence[SpanDict]) -> list[SpanDict]:
    return [s for s in spans if any(e["name"] == t.RECORD_EVENT for e in s["events"])]


def calls_by_tool(traces: Mapping[str, list[SpanDict]]) -> dict[str, list[list[SpanDict]]]:
    found: dict[str, list[list[SpanDict]]] = {}
    for spans in traces.values():
        for call in call_spans(spans):
            found.setdefault(str(call["attributes"][t.GEN_AI_TOOL_NAME]), []).append(spans)
    return found


def whole_call(spans: Sequence[SpanDict], tool: str, posts: int) -> list[str]:
    """What keeps this trace from being the whole of one call as the contract draws it (1 + N
    CLIENT spans: the call span `tools/call {tool}` and one `POST` child per attempt), [] if none."""
    problems = []
    ids = {s["span_id"] for s in spans}
    calls = [s for s in spans if s["name"] == f"tools/call {tool}"]
    if len(calls) != 1 or calls[0]["kind"] != "CLIENT":
        problems.append(f"call spans: {[(s['name'], s['kind']) for s in calls]}")
        return problems
    (call,) = calls
    attempts = [s for s in spans if s["parent_span_id"] == call["span_id"] and s["name"] == "POST"]
    if len(attempts) != posts or any(s["kind"] != "CLIENT" for s in attempts):
        problems.append(f"{len(attempts)} POST attempt spans under the call, the server received {posts}")
    # The SDK's own protocol requests inside the call (the tools/list before a session's first
    # call) keep their spans, `MCP send ...` and its HTTP POST: they are not the call's.
    protocol = {s["span_id"] for s in spans if s["name"].startswith("MCP send ")}
    own = [s for s in spans if s["span_id"] not in protocol and s["parent_span_id"] not in protocol]
    if len(own) != 1 + posts:
        problems.append(f"{len(own)} spans of the call: {sorted(s['name'] for s in own)}")
    orphans = [s["name"] for s in spans if s["parent_span_id"] and s["parent_span_id"] not in ids]
    if orphans:
        problems.append(f"spans whose parent is missing: {orphans}")
    return problems


def wait_for_calls(jaeger: o.Jaeger, tools: Mapping[str, int]) -> dict[str, list[SpanDict]]:
    """Jaeger's traces once it holds at least `tools[name]` calls of each tool (bounded)."""
    found: dict[str, list[SpanDict]] = {}

    def arrived() -> bool:
        nonlocal found
        found = traces_in_jaeger(jaeger)
        by_tool = calls_by_tool(found)
        return all(len(by_tool.get(tool, [])) >= n for tool, n in tools.items())

    o.wait_until(arrived, ARRIVAL_GUARD_S, interval=0.5)
    return found


def decided(collector: o.Collector) -> float:
    """How many traces tail_sampling has decided, kept or dropped (its own counter)."""
    return collector.metric("otelcol_processor_tail_sampling_global_count_traces_sampled")


# ---------------------------------------------------------------------------------------------
# Start-up


@pytest.mark.parametrize("config", (o.SINGLE, o.AGENT, o.GATEWAY), ids=lambda p: p.name)
def test_every_shipped_config_starts_and_reports_healthy(
    bins: o.Binaries, jaeger: o.Jaeger, tmp_path: Path, config: Path
) -> None:
    settings = backends(jaeger, 10)
    settings["MCP_REPLAY_GATEWAY_HOSTNAME"] = o.HOST
    settings["MCP_REPLAY_GATEWAY_PORT"] = str(free_port())
    with o.running_collector(bins.otelcol, config, tmp_path, settings) as collector:
        assert collector.process.healthy()
        assert "otelcol_process_uptime" in collector.metrics()  # its own telemetry, where it was moved
        text = collector.process.log_text(400)
    assert "Everything is ready" in text, text


def _first_ports(monkeypatch: pytest.MonkeyPatch, taken: int, starts: int) -> list[int]:
    """The harness names `taken` as the first port of each of its next `starts` starts (a Collector
    names four); the ports it named are listed."""
    named: list[int] = []

    def port() -> int:
        named.append(taken if len(named) % 4 == 0 and len(named) < 4 * starts else free_port())
        return named[-1]

    monkeypatch.setattr(o, "free_port", port)
    return named


def test_a_port_taken_before_the_collector_binds_it_is_named_again(
    bins: o.Binaries, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A port is named free before the Collector binds it; another process of the run (three
    chains of suites at once) may bind it meanwhile: the Collector exits at start, and starts again
    on fresh ports, whose every one it binds."""
    with held_port() as taken:
        _started_again(bins, tmp_path, taken, _first_ports(monkeypatch, taken, starts=1))


def _started_again(bins: o.Binaries, tmp_path: Path, taken: int, named: list[int]) -> None:
    """The Collector's first start, told `taken` among the ports it `named`, exits on it; its second
    runs healthy on the ports it named then."""
    with o.running_collector(bins.otelcol, o.SINGLE, tmp_path) as collector:
        assert collector.process.healthy()
        assert collector.otlp_grpc == f"{o.HOST}:{named[4]}"  # the second start's first port
    first = (tmp_path / f"otelcol-{named[0]}.log").read_text()
    assert f"{o.HOST}:{taken}: bind: address already in use" in first, first
    assert len(named) == 8


def test_a_port_taken_at_every_start_fails_after_the_bounded_tries(
    bins: o.Binaries, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with held_port() as taken:
        named = _first_ports(monkeypatch, taken, starts=PORT_TRIES)
        with (
            pytest.raises(PortTaken, match="address already in use"),
            o.running_collector(bins.otelcol, o.SINGLE, tmp_path),
        ):
            pytest.fail("started on a taken port")
    assert len(named) == 4 * PORT_TRIES  # each start named its four, and no fourth start came


@contextlib.contextmanager
def _answered_port() -> Iterator[int]:
    """A free port, then answered: an HTTP server there says 200 to every GET, as another Collector's
    health check would."""

    class Healthy(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b'{"status": "StatusOK"}')

        def log_message(self, format: str, *args: Any) -> None:
            pass

    with http.server.ThreadingHTTPServer((o.HOST, free_port()), Healthy) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield int(server.server_address[1])
        finally:
            server.shutdown()
            thread.join(timeout=10)


def test_a_health_port_another_process_answers_is_not_the_collectors_health(
    bins: o.Binaries, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process answering 200 on the health port named for the Collector is not its health:
    it is healthy only when the health check that says so is its own, so it starts again on fresh
    ports instead of being taken for running."""
    with _answered_port() as taken:
        named: list[int] = []

        def port() -> int:  # the first start's health port (its third) is the answered one
            named.append(taken if len(named) == 2 else free_port())
            return named[-1]

        monkeypatch.setattr(o, "free_port", port)
        _started_again(bins, tmp_path, taken, named)


def test_the_binaries_are_the_pinned_releases(bins: o.Binaries) -> None:
    collector = subprocess.run([str(bins.otelcol), "--version"], capture_output=True, text=True, timeout=60)
    assert "0.161.0" in collector.stdout, collector.stdout + collector.stderr
    jaeger = subprocess.run([str(bins.jaeger), "version"], capture_output=True, text=True, timeout=60)
    assert "v2.12.0" in jaeger.stdout + jaeger.stderr, jaeger.stdout + jaeger.stderr


def test_the_build_script_finds_what_it_built_and_builds_nothing_again(bins: o.Binaries) -> None:
    """README: built into the cache, keyed by version; a second run only finds them (no Go needed)."""
    env = {**os.environ, "GO": "/nonexistent/go", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [str(o.BUILD_SCRIPT)], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [f"OTELCOL={bins.otelcol}", f"JAEGER={bins.jaeger}"]
    assert "/otelcol/v0.161.0-" in str(bins.otelcol) and "/jaeger/v1.75.0/" in str(bins.jaeger)


def test_jaeger_serves_its_query_api_and_only_a_placeholder_ui(jaeger: o.Jaeger) -> None:
    """README: a Jaeger built by `go build` serves a placeholder page where the UI would be; the
    query API is whole."""
    status, page = jaeger.get("/")
    assert status == 200 and b"This is not the Jaeger UI" in page, page[:300]
    assert jaeger.services() == []


def test_jaeger_sends_no_traces_of_its_own(bins: o.Binaries, tmp_path: Path) -> None:
    """jaeger-local.yaml: Jaeger v2 traces its own queries by default, to localhost:4317 (whatever
    listens there: a user's Collector), and waits out that export as it stops; this one does not."""
    with o.running_jaeger(bins.jaeger, tmp_path) as jaeger:
        assert jaeger.services() == []  # a query, which it would trace
        process = jaeger.process
    assert process.popen.returncode == 0  # it ended at its SIGTERM, not killed
    log = process.log_text(tail=10_000)
    assert "127.0.0.1:4317" not in log and "traces export" not in log, log


# ---------------------------------------------------------------------------------------------
# Tail sampling


def test_tail_sampling_keeps_every_call_that_may_have_run_whole_and_drops_clean_calls(
    bins: o.Binaries, jaeger: o.Jaeger, tmp_path: Path
) -> None:
    with o.running_collector(bins.otelcol, o.SINGLE, tmp_path, backends(jaeger, 0)) as collector:
        run = run_demo_agent(tmp_path, collector.traces_endpoint, CLEAN_SEARCHES)
        traces = wait_for_calls(jaeger, {"charge": 1, "send_email": 1})
        # Every trace the agent made (its calls, and the protocol's own requests) decided, so a
        # clean call absent from Jaeger was dropped, not still waiting.
        exported = collector.metric("otelcol_receiver_accepted_spans")
        assert exported > 0
        o.wait_until(lambda: decided(collector) >= len(run.seen), ARRIVAL_GUARD_S)

        def stored_whole() -> bool:
            # A kept trace's other spans leave after the decision, through traces/sampled's batch:
            # read again until the kept calls are whole (a hang guard; the asserts below judge).
            nonlocal traces
            traces = traces_in_jaeger(jaeger)
            found = calls_by_tool(traces)
            return all(
                whole_call(spans, tool, run.posts[("billing", tool)]) == []
                for tool in ("charge", "send_email")
                for spans in found.get(tool, [])[:1]
            )

        o.wait_until(stored_whole, ARRIVAL_GUARD_S, interval=0.5)
    by_tool = calls_by_tool(traces)
    # The agent saw the cut charge repeated and answered, the cut send_email fail as may-have-run.
    assert run.posts[("billing", "charge")] == 2 and run.posts[("billing", "send_email")] == 1
    assert sorted(by_tool) == ["charge", "send_email"], sorted(by_tool)
    assert len(traces) == 2, "only the traces of the calls that may have run are kept"
    for tool in ("charge", "send_email"):
        (spans,) = by_tool[tool]
        assert whole_call(spans, tool, run.posts[("billing", tool)]) == [], tool
    (email,) = call_spans(by_tool["send_email"][0])
    assert email["attributes"][t.MAY_HAVE_RUN] is True  # the span attribute the sampler reads
    (charge,) = call_spans(by_tool["charge"][0])
    assert charge["attributes"][t.EFFECT] == "unknown" and charge["attributes"][t.MAY_HAVE_RUN] is False


# ---------------------------------------------------------------------------------------------
# Redaction, the second line: an app exporting without the plugin's configurator

CANARIES: Final = {
    "account": "ACCT-Canary6101",  # a tool argument the SDK mirrors into Mcp-Param-Account
    "key": "idem-Canary6102",  # the idempotency key, mirrored into Mcp-Param-Key
    "authorization": "Canary6103tok",  # a bearer token in a captured Authorization header
    "query": "Canary6104q",  # a URL query value
    "api_key": "Canary6105ak",  # a credential in a URL query
    "attribute": "Canary6106attr",  # an app attribute the allow-list does not hold
    "provider_key": "sk-Canary6107abcdefghijklmnopqrs",  # a secret in an allowed key
    "status": "Canary6108st",  # a bearer token quoted in a status message
    "event": "Canary6109ev",  # an event attribute
}

LEAKY_APP: Final = textwrap.dedent(
    """
    import asyncio
    import sys

    from opentelemetry import trace
    from opentelemetry.trace import Status, StatusCode

    from harness.client import Client, http, is_error

    url, mode = sys.argv[1:3]
    c = dict(arg.split("=", 1) for arg in sys.argv[3:])


    async def main() -> None:
        async with Client(url, mode=mode) as client:
            await client.list_tools()  # the SDK mirrors only what a listing declared
            looked = await client.call_tool("lookup", {"account": c["account"]})
            keyed = {"account": c["account"], "amount": 3, "idempotency_key": c["key"]}
            moved = await client.call_tool("transfer", keyed)
            assert not is_error(looked) and not is_error(moved), (looked, moved)
        # A request of the app's own (the HTTP instrumentation's span, headers captured), with the
        # arguments mirrored as the SDK mirrors them: a tool call's own POSTs are the plugin's
        # attempt spans, which capture no header, so another client's is where they can show.
        async with http.AsyncClient() as plain:
            await plain.get(
                f"{url}?tenant={c['query']}&api_key={c['api_key']}",
                headers={
                    "Authorization": "Bearer " + c["authorization"],
                    "Mcp-Param-Account": c["account"],
                    "Mcp-Param-Key": c["key"],
                },
            )
        # A span of the app's own, careless with what it records.
        with trace.get_tracer("leaky-app").start_as_current_span("export-report") as span:
            span.set_attribute("app.customer_note", c["attribute"])
            span.set_attribute("error.type", c["provider_key"])
            span.add_event("upstream", {"app.detail": c["event"]})
            span.set_status(Status(StatusCode.ERROR, "upstream said: Bearer " + c["status"]))

    asyncio.run(main())
    print("app-done")
    """
)


def run_leaky_app(
    work: Path,
    url: str,
    traces_endpoint: str,
    mode: str,
    config_file: Path | None = None,
    configurator: str = "",
) -> str:
    """The leaky app, set up by environment variables (opentelemetry-distro's configurator, no
    redaction), or by `config_file` under `configurator`; its stderr."""
    script = work / "leaky_app.py"
    script.write_text(LEAKY_APP)
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    env["PYTHONPATH"] = os.pathsep.join((str(REPO / "src"), str(REPO)))
    env["OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_CLIENT_REQUEST"] = ".*"
    if config_file is not None:
        env.update({"OTEL_CONFIG_FILE": str(config_file), "OTEL_PYTHON_CONFIGURATOR": configurator})
    else:
        env.update(
            {
                # opentelemetry-distro's configurator, and the plugin (which would put its exporter
                # behind redaction) disabled: nothing in the app redacts, the Collector's processors
                # are on their own.
                "OTEL_PYTHON_CONFIGURATOR": "configurator",
                "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": "mcp_replay",
                "OTEL_TRACES_EXPORTER": "otlp",
                "OTEL_METRICS_EXPORTER": "none",
                "OTEL_LOGS_EXPORTER": "none",
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": traces_endpoint,
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
                "OTEL_SERVICE_NAME": "leaky-app",
                "OTEL_BSP_SCHEDULE_DELAY": "100",
            }
        )
    argv = [str(BIN / "opentelemetry-instrument"), str(BIN / "python"), str(script), url, mode]
    argv += [f"{name}={value}" for name, value in CANARIES.items()]
    done = subprocess.run(
        argv, env=env, cwd=work, capture_output=True, text=True, timeout=AGENT_GUARD_S, check=False
    )
    assert done.returncode == 0 and "app-done" in done.stdout, done.stderr[-4000:]
    return done.stderr


@pytest.mark.skipif(MODERN not in ERAS, reason="the installed mcp line has no 2026-07-28 era")
def test_redaction_masks_what_an_app_without_the_configurator_sends(
    bins: o.Binaries, jaeger: o.Jaeger, tmp_path: Path
) -> None:
    counters = Counters()
    with running_server(counters=counters, server=build_server(counters, era_tools=True)) as server:
        # The control: every canary does leave this app (its exporter, seen by a plain receiver).
        with OtlpReceiver() as receiver:
            run_leaky_app(tmp_path, server.url, receiver.traces_endpoint, MODERN)
            assert receiver.wait_for(lambda spans: any(s["name"] == "export-report" for s in spans), 30)
            raw = receiver.raw_bytes()
        assert [name for name, canary in CANARIES.items() if canary.encode() not in raw] == []
        with o.running_collector(bins.otelcol, o.SINGLE, tmp_path, backends(jaeger, 100)) as collector:
            run_leaky_app(tmp_path, server.url, collector.traces_endpoint, MODERN)
            o.wait_stored(collector, jaeger, "leaky-app", ARRIVAL_GUARD_S)  # all of it, masked or not
    ids = [trace["traceID"] for trace in jaeger.find("leaky-app")]
    answers = [jaeger.get("/api/traces", service="leaky-app", lookback="1h")[1]]
    answers += [jaeger.get(f"/api/traces/{trace_id}")[1] for trace_id in ids]
    answers += [jaeger.trace_v3(trace_id)[1] for trace_id in ids]
    spans = [s for trace_id in ids for s in jaeger.spans_v3(trace_id)]
    assert ids and spans
    leaked = [
        name for name, canary in CANARIES.items() if any(canary.encode() in answer for answer in answers)
    ]
    assert leaked == [], f"reached Jaeger unmasked: {leaked}"
    # It arrived, masked rather than lost: the app's span, its URL, its status.
    (report,) = [s for s in spans if s["name"] == "export-report"]
    assert report["attributes"]["error.type"] == "****" and "****" in report["status"]["message"]
    assert "app.customer_note" not in report["attributes"]
    urls = [str(s["attributes"].get(key, "")) for s in spans for key in ("url.full", "http.url")]
    # The plain value by transform/redact_url_queries; the credential pair whole by blocked_values.
    assert any(url.endswith("?tenant=****&****") for url in urls), urls
    assert not [k for s in spans for k in s["attributes"] if k.startswith("http.request.header.")]


# ---------------------------------------------------------------------------------------------
# The record as a log record (the plugin's `record` setting)


def test_the_record_arrives_as_a_log_record_of_its_call_span_and_jaeger_keeps_it_on_the_span(
    bins: o.Binaries, jaeger: o.Jaeger, tmp_path: Path
) -> None:
    """`record` = `both`: each call's record reaches a logs backend through the logs pipeline as a
    log record with its call span's trace and span ids, and Jaeger still shows it on the span."""
    with contextlib.ExitStack() as stack:
        sink = stack.enter_context(OtlpReceiver())
        relay = stack.enter_context(o.running_log_relay(bins.jaeger, tmp_path, f"{sink.endpoint}/v1/logs"))
        settings = {**backends(jaeger, 100), "MCP_REPLAY_LOGS_ENDPOINT": relay}
        collector = stack.enter_context(o.running_collector(bins.otelcol, o.SINGLE, tmp_path, settings))
        run = run_demo_agent(
            tmp_path,
            collector.traces_endpoint,
            CLEAN_SEARCHES,
            OTEL_LOGS_EXPORTER="otlp",
            OTEL_EXPORTER_OTLP_LOGS_ENDPOINT=f"{collector.otlp_http}/v1/logs",
            OTEL_BLRP_SCHEDULE_DELAY="200",
            OTEL_PYTHON_MCP_REPLAY_RECORD="both",
        )
        calls = len(run.seen)
        assert sink.wait_for_logs(lambda logs: len(records_logged(logs)) >= calls, ARRIVAL_GUARD_S)
        traces = wait_for_calls(jaeger, dict(Counter(line.split()[0] for line in run.seen)))
        logged = records_logged(sink.logs())
        accepted = collector.metric("otelcol_receiver_accepted_log_records")
        sent = collector.metric("otelcol_exporter_sent_log_records", exporter="otlp/logs")
    on_spans = {(s["trace_id"], s["span_id"]): s for spans in traces.values() for s in call_spans(spans)}
    assert len(on_spans) == calls == 4, run.seen  # the demo's four calls, each kept on its span
    assert accepted >= sent >= calls
    assert sorted((log["trace_id"], log["span_id"]) for log in logged) == sorted(on_spans)
    for log in logged:
        span = on_spans[(log["trace_id"], log["span_id"])]
        (event,) = [e for e in span["events"] if e["name"] == t.RECORD_EVENT]
        assert log["attributes"] == event["attributes"], span["name"]
        assert log["scope"] == t.INSTRUMENTATION_NAME and log["resource"]["service.name"] == SERVICE


def records_logged(logs: Sequence[Any]) -> list[Any]:
    return [log for log in logs if log["event_name"] == t.RECORD_EVENT]


# ---------------------------------------------------------------------------------------------
# Two tiers


AGENT_RUNS: Final = 3  # each run: six traces (the demo's four calls, two protocol requests)


def test_two_tiers_route_each_trace_whole_to_exactly_one_of_two_gateways(
    bins: o.Binaries, tmp_path: Path
) -> None:
    """The agent (otelcol-agent.yaml) in front of two gateways (otelcol-gateway.yaml), its
    loadbalancing exporter given a `static` resolver listing both; each gateway exports to a Jaeger
    of its own, so where a trace went is where it is stored."""
    with contextlib.ExitStack() as stack:
        jaegers = [stack.enter_context(o.running_jaeger(bins.jaeger, tmp_path)) for _ in range(2)]
        gateways = [
            stack.enter_context(o.running_collector(bins.otelcol, o.GATEWAY, tmp_path, backends(j, 100)))
            for j in jaegers
        ]
        overlay = o.static_gateways(tmp_path, gateways)
        agent = stack.enter_context(o.running_collector(bins.otelcol, o.AGENT, tmp_path, overlays=[overlay]))
        runs = [run_demo_agent(tmp_path / str(n), agent.traces_endpoint) for n in range(AGENT_RUNS)]

        def accepted(collector: o.Collector) -> float:
            return collector.metric("otelcol_receiver_accepted_spans")

        def exported(gateway: o.Collector) -> float:
            return gateway.metric("otelcol_exporter_sent_spans", exporter="otlp/jaeger")

        def delivered() -> bool:
            # Every span the agent took reached a gateway, and every span a gateway took left it
            # for its Jaeger (the sampling rate is 100: all are kept).
            return sum(map(accepted, gateways)) >= accepted(agent) > 0 and all(
                exported(g) >= accepted(g) for g in gateways
            )

        o.wait_until(delivered, ARRIVAL_GUARD_S, interval=0.5)
        by_agent, by_gateway = accepted(agent), [accepted(g) for g in gateways]
        sent = [exported(g) for g in gateways]
        calls = sum(len(run.seen) for run in runs)
        # The call span and one POST per POST the server got, for each call.
        posts = Counter[tuple[str, str]]()
        for run in runs:
            posts.update(run.posts)
        stored: list[dict[str, list[SpanDict]]] = []
        whole: dict[str, list[list[str]]] = {}

        def stored_whole() -> bool:
            # Jaeger's own batches: a call's span can be stored before an attempt span of its trace,
            # so read again until every call is there and whole (a hang guard, not the verdict: the
            # asserts below judge the last read).
            nonlocal stored, whole
            stored = [traces_in_jaeger(j) for j in jaegers]
            whole = problems_by_tool(stored, posts)
            found = sum(len(problems) for problems in whole.values())
            return found >= calls and all(p == [] for problems in whole.values() for p in problems)

        o.wait_until(stored_whole, ARRIVAL_GUARD_S, interval=0.5)
    # Nothing lost, nothing doubled: each span the agent took reached one gateway and left it once.
    assert by_agent > 0 and sum(by_gateway) == by_agent, (by_agent, by_gateway)
    assert sent == by_gateway, (sent, by_gateway)
    # Both gateways took traces (18 traces, routed by the hash of their random ids: all on one of
    # two gateways has odds below 1 in 10,000 even on a ring split 60/40), and none went to both.
    assert all(by_gateway), by_gateway
    ids = [set(found) for found in stored]
    assert ids[0] and ids[1] and not ids[0] & ids[1], [sorted(i) for i in ids]
    # Each call's trace whole where it was stored: the call span and one POST per POST the server got.
    assert {tool: len(problems) for tool, problems in whole.items()} == {
        "search": 2 * AGENT_RUNS,
        "charge": AGENT_RUNS,
        "send_email": AGENT_RUNS,
    }
    assert all(problems == [] for found in whole.values() for problems in found), whole


def problems_by_tool(
    stored: Sequence[Mapping[str, list[SpanDict]]], posts: Counter[tuple[str, str]]
) -> dict[str, list[list[str]]]:
    """For each tool, what keeps each of its calls stored in the Jaegers from being whole (the agent
    ran AGENT_RUNS times: each call's POSTs are the server's count over the runs)."""
    whole: dict[str, list[list[str]]] = {}
    for found in stored:
        for spans in found.values():
            for call in call_spans(spans):
                tool = str(call["attributes"][t.GEN_AI_TOOL_NAME])
                per_call = posts[(endpoint_of(call), tool)] // AGENT_RUNS
                whole.setdefault(tool, []).append(whole_call(spans, tool, per_call))
    return whole


def test_the_agent_without_a_resolver_is_refused_at_start(bins: o.Binaries, tmp_path: Path) -> None:
    """README: the loadbalancing exporter has no default resolver; leaving it out is an error."""
    without = tmp_path / "no-resolver.yaml"
    without.write_text("exporters:\n  loadbalancing:\n    resolver:\n      dns: null\n")
    status, said = o.validate(bins.otelcol, [o.AGENT, without])
    assert status != 0 and "no resolvers specified" in said, said
    status, said = o.validate(bins.otelcol, [o.AGENT])
    assert status == 0, said  # the shipped file, its `dns` resolver in place


# ---------------------------------------------------------------------------------------------
# The docs' Jaeger queries

QUERY_ROW: Final = r"^\| `([^`]+)` \| ([^|]+) \| ([^|]+) \|$"
README: Final = REPO / "collector-config" / "README.md"
# Each table of Jaeger searches: (file, the section that holds it).
QUERY_TABLES: Final = ((DOCS, "## Jaeger queries"), (README, "## Jaeger searches"))


def documented_queries(
    path: Path = DOCS, heading: str = "## Jaeger queries"
) -> list[tuple[dict[str, str], set[str]]]:
    """A table of Jaeger searches: (tags, the demo calls it finds: none when it says `none`) per row."""
    section = path.read_text().split(heading + "\n", 1)[1].split("\n## ", 1)[0]
    rows = []
    for tags, _what, finds in re.findall(QUERY_ROW, section, flags=re.M):
        pairs = dict(pair.split("=", 1) for pair in tags.split())
        calls = {tool.strip().strip("`") for tool in finds.split(",")}
        rows.append((pairs, set() if calls == {"none"} else calls))
    return rows


@pytest.mark.parametrize(("path", "heading"), QUERY_TABLES, ids=("docs", "readme"))
def test_the_docs_list_jaeger_queries(path: Path, heading: str) -> None:
    rows = documented_queries(path, heading)
    assert len(rows) >= 5
    assert all(tags for tags, _ in rows) and sum(1 for _, finds in rows if finds) >= 5


def test_every_jaeger_query_in_the_docs_returns_what_it_says(
    bins: o.Binaries, jaeger: o.Jaeger, tmp_path: Path
) -> None:
    with o.running_collector(bins.otelcol, o.SINGLE, tmp_path, backends(jaeger, 100)) as collector:
        run_demo_agent(tmp_path, collector.traces_endpoint)
        # Every span, not only the calls': some rows match answered attempts, which leave last.
        o.wait_stored(collector, jaeger, SERVICE, ARRIVAL_GUARD_S)
    wrong = []
    for path, heading in QUERY_TABLES:
        for tags, finds in documented_queries(path, heading):
            found = set()
            for trace in jaeger.find(SERVICE, tags):
                spans = otlp_spans_of(jaeger, trace["traceID"])
                found |= {
                    f"{endpoint_of(call)} {call['attributes'][t.GEN_AI_TOOL_NAME]}"
                    for call in call_spans(spans)
                }
            if found != finds:
                wrong.append((path.name, tags, sorted(found), sorted(finds)))
    assert wrong == []
    # Counted per query: what an MCP-operation query (kind CLIENT, mcp.method.name = tools/call)
    # answers is one span per call, its call span, however many attempts the call made: attempt
    # spans carry no mcp.method.name, so one answers no such query at all.
    spans = [s for trace in jaeger.find(SERVICE) for s in otlp_spans_of(jaeger, trace["traceID"])]
    operations = [
        s
        for s in spans
        if s["kind"] == "CLIENT" and s["attributes"].get(t.MCP_METHOD_NAME) == t.TOOLS_CALL_METHOD
    ]
    attempts = [s for s in spans if t.ATTEMPT in s["attributes"]]
    assert len(operations) == len(call_spans(spans)) == 4 and len(attempts) > len(operations), (
        len(operations),
        len(attempts),
    )
    found = [trace["traceID"] for trace in jaeger.find(SERVICE, {t.MCP_METHOD_NAME: t.TOOLS_CALL_METHOD})]
    assert len(found) == len({s["trace_id"] for s in operations})
    assert jaeger.find(SERVICE, {t.MCP_METHOD_NAME: t.TOOLS_CALL_METHOD, t.ATTEMPT: "1"}) == []
    # README: `error=true` finds nothing on this Jaeger's memory store, though spans failed.
    stored = [s for trace in jaeger.find(SERVICE) for s in otlp_spans_of(jaeger, trace["traceID"])]
    assert any(s["status"]["code"] == "ERROR" for s in stored)
    assert jaeger.find(SERVICE, {"error": "true"}) == []


def otlp_spans_of(jaeger: o.Jaeger, trace_id: str) -> list[SpanDict]:
    return jaeger.spans_v3(trace_id)


def endpoint_of(call: SpanDict) -> str:
    (record,) = [e for e in call["events"] if e["name"] == t.RECORD_EVENT]
    return str(record["attributes"][t.ENDPOINT])


# ---------------------------------------------------------------------------------------------
# Faults: the Collector or Jaeger down or stalled


@pytest.fixture(scope="module")
def without_export(tmp_path_factory: pytest.TempPathFactory) -> AgentRun:
    """The demo's agent with no trace exporter at all: what its calls do without any collector."""
    return run_demo_agent(
        tmp_path_factory.mktemp("plain"), "http://127.0.0.1:9/v1/traces", OTEL_TRACES_EXPORTER="none"
    )


@pytest.mark.parametrize("how", ["down", "stalled"])
def test_the_app_s_calls_complete_as_without_a_collector_when_it_is(
    bins: o.Binaries, jaeger: o.Jaeger, tmp_path: Path, without_export: AgentRun, how: str
) -> None:
    if how == "down":
        run = run_demo_agent(tmp_path, f"http://{o.closed_endpoint()}/v1/traces")
    else:
        with o.running_collector(bins.otelcol, o.SINGLE, tmp_path, backends(jaeger, 100)) as collector:
            collector.process.pause()
            run = run_demo_agent(tmp_path, collector.traces_endpoint)
            collector.process.resume()
    assert run == without_export


@pytest.mark.parametrize("how", ["down", "stalled"])
def test_the_app_s_calls_complete_and_the_collector_stays_bounded_when_jaeger_is(
    bins: o.Binaries, jaeger: o.Jaeger, tmp_path: Path, without_export: AgentRun, how: str
) -> None:
    with o.running_collector(bins.otelcol, o.SINGLE, tmp_path, backends(jaeger, 100)) as collector:
        if how == "down":
            jaeger.process.stop()
        else:
            jaeger.process.pause()
        runs = [run_demo_agent(tmp_path / str(n), collector.traces_endpoint) for n in range(3)]
        assert o.wait_until(lambda: decided(collector) >= 3 * len(without_export.seen), ARRIVAL_GUARD_S)
        assert collector.process.healthy()
        rss = collector.process.rss_bytes()
        if how == "stalled":
            # Nothing was lost while Jaeger hung: the Collector's retry delivers once it answers.
            jaeger.process.resume()
            arrived = wait_for_calls(jaeger, {"search": 6, "charge": 3, "send_email": 3})
            assert len(calls_by_tool(arrived)["send_email"]) == 3
    assert all(run == without_export for run in runs)
    assert rss < 512 * 1024 * 1024, f"the Collector's resident memory: {rss} bytes"


# ---------------------------------------------------------------------------------------------
# The demo, through them


DEMO: Final = REPO / "scripts" / "demo"
TRACE_HEAD: Final = re.compile(r"^trace ([0-9a-f]{32})$")
GROUND_TRUTH: Final = re.compile(r"^  (\w+) +(.+)$")
SENT: Final = re.compile(r"(\w+) sent (\d+)x, ran (\d+)x")


@dataclass(frozen=True)
class PrintedCall:
    """One trace block of the demo's output, read back: its call span and the spans under it."""

    trace_id: str
    roots: list[str]  # the head lines at the tree's top
    endpoint: str  # from the record's line: "... endpoint billing"
    attempts: list[str]  # the head lines of the call span's POST children, in order
    attempt_details: list[str]  # the detail line under each of them


def printed_calls(stdout: str) -> tuple[dict[tuple[str, str], int], list[PrintedCall]]:
    """The demo's "What the servers really did" ((endpoint, tool) -> POSTs) and its trace blocks."""
    rest = stdout.partition("What the servers really did (their own counters):\n")[2]
    truth_text, _, traces_text = rest.partition("\nThe trace of each tool call, ")
    posts = {
        (endpoint, tool): int(sent)
        for line in truth_text.splitlines()
        if (row := GROUND_TRUTH.match(line))
        for endpoint in [row.group(1)]
        for tool, sent, _ran in SENT.findall(row.group(2))
    }
    calls = []
    for block in traces_text.split("\n\n"):
        lines = block.splitlines()
        if not lines or not (match := TRACE_HEAD.match(lines[0])):
            continue
        body = lines[1:]
        roots = [line[3:] for line in body if line.startswith(("└─ ", "├─ "))]
        endpoint = re.search(r"· endpoint (\w+)", block)
        attempt_rows = [i for i, line in enumerate(body) if re.match(r"^   [├└]─ POST  \[", line)]
        calls.append(
            PrintedCall(
                match.group(1),
                roots,
                endpoint.group(1) if endpoint else "",
                [body[i][6:] for i in attempt_rows],
                [body[i + 1].strip(" │") if i + 1 < len(body) else "" for i in attempt_rows],
            )
        )
    return posts, calls


def test_the_demo_script_prints_each_call_s_trace_as_jaeger_returns_it(bins: o.Binaries) -> None:
    """`./scripts/demo --jaeger`, as a user runs it: the Collector and Jaeger started, the demo's
    four calls made through them, and each call's trace printed as Jaeger's query API returned it:
    one tree per call, the call span `tools/call {tool}` (CLIENT) at its top and one `POST`
    (CLIENT) under it per POST its server received, numbered in order."""
    done = subprocess.run(
        [str(DEMO), "--jaeger"], cwd=REPO, capture_output=True, text=True, timeout=540, check=False
    )
    out = done.stdout
    assert done.returncode == 0, out[-3000:] + done.stderr[-3000:]
    assert "the agent and the OpenTelemetry Collector in front of Jaeger, all on 127.0.0.1" in out
    assert "The trace of each tool call, as Jaeger returns them (/api/v3/traces/{id}) (4 calls):" in out
    posts, calls = printed_calls(out)
    assert posts == {
        ("billing", "search"): 2,
        ("billing", "charge"): 2,
        ("billing", "send_email"): 1,
        ("catalog", "search"): 2,
    }, out
    assert len(calls) == 4 and len({call.trace_id for call in calls}) == 4, out
    printed: dict[tuple[str, str], list[PrintedCall]] = {}
    for call in calls:
        assert len(call.roots) == 1, call  # one tree: nothing of the call lost its parent
        (root,) = call.roots
        tool = re.match(r"tools/call (\w+)  \[client, ", root)
        assert tool, root
        printed.setdefault((call.endpoint, tool.group(1)), []).append(call)
    assert {key: len(found) for key, found in printed.items()} == dict.fromkeys(posts, 1), out
    for key, (call,) in printed.items():
        assert len(call.attempts) == posts[key], (key, call)
        assert all(head.startswith("POST  [client, ") for head in call.attempts), call
        numbers = [re.match(r"attempt (\d+) · ", detail) for detail in call.attempt_details]
        assert [int(n.group(1)) if n else 0 for n in numbers] == list(range(1, posts[key] + 1)), call


def test_a_plain_demo_never_looks_for_the_binaries() -> None:
    text = (REPO / "harness" / "run.py").read_text()
    top = text.split("class JaegerSink", 1)[0]
    assert "otel_stack" not in top, "harness.run imports the binaries' module only for --jaeger"


# ---------------------------------------------------------------------------------------------
# Configuration by file (OTEL_CONFIG_FILE): the file's exporter behind mcp_replay_redacting

FILE_SERVICE: Final = "leaky-app-by-file"
# What a configuration file's redaction stops before the Collector: URL queries, the arguments the
# SDK mirrors into headers, captured headers. (The app's own attribute and event values are no
# secret by their key or shape: the Collector's allow-list is what drops them.)
BEFORE_THE_COLLECTOR: Final = ("account", "key", "authorization", "query", "api_key", "status")


def leaky_app_file(work: Path, server_url: str, endpoints: Sequence[str]) -> Path:
    """An OTEL_CONFIG_FILE sending every span to each of `endpoints` through mcp_replay_redacting."""
    processors = "".join(
        "    - simple:\n        exporter:\n          mcp_replay_redacting:\n"
        f"            otlp_http: {{endpoint: {endpoint}}}\n"
        for endpoint in endpoints
    )
    path = work / "otel-leaky.yaml"
    path.write_text(
        'file_format: "1.0"\n'
        f"resource:\n  attributes:\n    - {{name: service.name, value: {FILE_SERVICE}}}\n"
        f"tracer_provider:\n  processors:\n{processors}"
        "instrumentation/development:\n  python:\n    mcp_replay:\n"
        f'      servers:\n        "{server_url}":\n'
        "          {policy: app-authorized, tools: {lookup: {on: [throttle]}}}\n"
    )
    return path


# The app's spans leave through the file's exporter, redacted, to the Collector (and, beside it, an
# identical exporter to a receiver that keeps the very bytes such an exporter sends); then into Jaeger.
@pytest.mark.skipif(MODERN not in ERAS, reason="the installed mcp line has no 2026-07-28 era")
@pytest.mark.parametrize("configurator", ["mcp_replay", "configurator"])
def test_a_config_files_spans_reach_the_collector_redacted(
    bins: o.Binaries, jaeger: o.Jaeger, tmp_path: Path, configurator: str
) -> None:
    pytest.importorskip("opentelemetry.configuration")
    counters = Counters()
    with (
        running_server(counters=counters, server=build_server(counters, era_tools=True)) as server,
        OtlpReceiver() as tee,
        o.running_collector(bins.otelcol, o.SINGLE, tmp_path, backends(jaeger, 100)) as collector,
    ):
        config = leaky_app_file(tmp_path, server.url, [collector.traces_endpoint, tee.traces_endpoint])
        stderr = run_leaky_app(tmp_path, server.url, "", MODERN, config, configurator)
        spans = o.wait_stored(collector, jaeger, FILE_SERVICE, ARRIVAL_GUARD_S)
        assert tee.wait_for(lambda got: any(s["name"] == "export-report" for s in got), 30)
        sent = tee.raw_bytes()
        accepted = collector.metric("otelcol_receiver_accepted_spans")
    # The Collector took what the twin exporter sent (one span each), and Jaeger holds it.
    assert accepted == len(tee.spans()) > 0 and len(spans) == accepted
    assert [name for name in BEFORE_THE_COLLECTOR if CANARIES[name].encode() in sent] == []
    ids = {s["trace_id"] for s in spans}
    answers = [jaeger.trace_v3(trace_id)[1] for trace_id in ids]
    assert [name for name, canary in CANARIES.items() if any(canary.encode() in a for a in answers)] == []
    # One call span per call, its one attempt under it, its record; instrumented once, no warning.
    for tool in ("lookup", "transfer"):
        (call,) = [s for s in spans if s["name"] == f"{t.CALL_SPAN_PREFIX} {tool}"]
        assert [e["name"] for e in call["events"]] == [t.RECORD_EVENT]
        attempts = [s for s in spans if s["parent_span_id"] == call["span_id"] and s["name"] == "POST"]
        assert len(attempts) == 1 and counters.tool_posts(tool) == 1
    assert "already instrumented" not in stderr and "without redaction" not in stderr


# The demo's agent configured by examples/otel-config.yaml, through the Collector into Jaeger: the
# file's declaration obeyed (counted on the servers), each call's trace whole.
def test_the_example_file_drives_the_demo_into_jaeger(
    bins: o.Binaries, jaeger: o.Jaeger, tmp_path: Path
) -> None:
    pytest.importorskip("opentelemetry.configuration")
    from tests.support.config_files import TWICE, run_with_file

    with o.running_collector(bins.otelcol, o.SINGLE, tmp_path, backends(jaeger, 100)) as collector:
        run = run_with_file(tmp_path, "mcp_replay", traces_endpoint=collector.traces_endpoint)
        o.wait_stored(collector, jaeger, SERVICE, ARRIVAL_GUARD_S)
        traces = traces_in_jaeger(jaeger)
    assert run.posts == {
        ("billing", "search"): 2,
        ("billing", "charge"): 2,
        ("billing", "send_email"): 1,
        ("catalog", "search"): 2,
    }
    by_tool = calls_by_tool(traces)
    assert sorted((tool, len(found)) for tool, found in by_tool.items()) == [
        ("charge", 1),
        ("search", 2),
        ("send_email", 1),
    ]
    for tool, posts in (("charge", 2), ("send_email", 1)):
        assert whole_call(by_tool[tool][0], tool, posts) == [], tool
    assert all(whole_call(spans, "search", 2) == [] for spans in by_tool["search"])
    assert TWICE not in run.stderr
