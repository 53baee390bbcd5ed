"""collector-config/ run for real: the Collector it builds, in front of Jaeger v2, fed by the demo's agent.

The binaries are real upstream builds (scripts/otel-binaries): the Collector v0.161.0 of
collector-config/builder-config.yaml and Jaeger v2 (module v1.76.0), each on free 127.0.0.1 ports,
each shipped config run unchanged (its settings by environment). The traffic is the demo's agent
(examples/agent.py under opentelemetry-instrument) against the harness server, or, for redaction, an
app that exports without the plugin's configurator. What Jaeger holds is read from its query API,
as its UI reads it; the servers' own counters are the ground truth of what ran. When the binaries
are not built every test here fails, never skips: CI builds them first (scripts/test).

Sampling waits are bounded polls on what Jaeger and the Collector report; no clock decides a verdict.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest

from harness import otel_stack as o
from harness.client import ERAS
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
    settings["MCP_REPLAY_GATEWAY_PORT"] = str(o.free_port())
    with o.running_collector(bins.otelcol, config, tmp_path, settings) as collector:
        assert collector.process.healthy()
        assert "otelcol_process_uptime" in collector.metrics()  # its own telemetry, where it was moved
        text = collector.process.log_text(400)
    assert "Everything is ready" in text, text


def test_the_binaries_are_the_pinned_releases(bins: o.Binaries) -> None:
    collector = subprocess.run([str(bins.otelcol), "--version"], capture_output=True, text=True, timeout=60)
    assert "0.161.0" in collector.stdout, collector.stdout + collector.stderr
    jaeger = subprocess.run([str(bins.jaeger), "version"], capture_output=True, text=True, timeout=60)
    assert "v2.13.0" in jaeger.stdout + jaeger.stderr, jaeger.stdout + jaeger.stderr


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
        traces = traces_in_jaeger(jaeger)
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


def run_leaky_app(work: Path, url: str, traces_endpoint: str, mode: str) -> None:
    script = work / "leaky_app.py"
    script.write_text(LEAKY_APP)
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    env["PYTHONPATH"] = os.pathsep.join((str(REPO / "src"), str(REPO)))
    env.update(
        {
            "OTEL_PYTHON_CONFIGURATOR": "configurator",  # opentelemetry-distro's: no redaction
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_LOGS_EXPORTER": "none",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": traces_endpoint,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_SERVICE_NAME": "leaky-app",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
            "OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_CLIENT_REQUEST": ".*",
        }
    )
    argv = [str(BIN / "opentelemetry-instrument"), str(BIN / "python"), str(script), url, mode]
    argv += [f"{name}={value}" for name, value in CANARIES.items()]
    done = subprocess.run(
        argv, env=env, cwd=work, capture_output=True, text=True, timeout=AGENT_GUARD_S, check=False
    )
    assert done.returncode == 0 and "app-done" in done.stdout, done.stderr[-4000:]


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
            o.wait_until(
                lambda: any(
                    s["name"] == "export-report"
                    for spans in traces_in_jaeger(jaeger, "leaky-app").values()
                    for s in spans
                ),
                ARRIVAL_GUARD_S,
            )
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
# Two tiers


def test_two_tiers_route_each_trace_whole_to_the_gateway(
    bins: o.Binaries, jaeger: o.Jaeger, tmp_path: Path
) -> None:
    gateway_settings = backends(jaeger, 100)
    with o.running_collector(bins.otelcol, o.GATEWAY, tmp_path, gateway_settings) as gateway:
        port = gateway.otlp_grpc.rsplit(":", 1)[1]
        agent_settings = {"MCP_REPLAY_GATEWAY_HOSTNAME": o.HOST, "MCP_REPLAY_GATEWAY_PORT": port}
        with o.running_collector(bins.otelcol, o.AGENT, tmp_path, agent_settings) as agent:
            run = run_demo_agent(tmp_path, agent.traces_endpoint)
            traces = wait_for_calls(jaeger, {"search": 2, "charge": 1, "send_email": 1})
            o.wait_until(
                lambda: (
                    gateway.metric("otelcol_receiver_accepted_spans")
                    >= agent.metric("otelcol_receiver_accepted_spans")
                ),
                ARRIVAL_GUARD_S,
            )
            received_by_agent = agent.metric("otelcol_receiver_accepted_spans")
            received_by_gateway = gateway.metric("otelcol_receiver_accepted_spans")

            def stored_whole() -> bool:
                # The uncertain spans reach Jaeger by a pipeline of their own (its batch): read
                # again until every call is there whole, bounded (a hang guard, not the verdict).
                nonlocal traces
                traces = traces_in_jaeger(jaeger)
                by_tool = calls_by_tool(traces)
                return all(
                    whole_call(spans, tool, run.posts[(endpoint, tool)]) == []
                    for tool, endpoint in (("charge", "billing"), ("send_email", "billing"))
                    for spans in by_tool.get(tool, [])[:1]
                )

            o.wait_until(stored_whole, ARRIVAL_GUARD_S, interval=0.5)
    assert received_by_agent > 0 and received_by_gateway == received_by_agent
    by_tool = calls_by_tool(traces)
    assert sorted(len(v) for v in by_tool.values()) == [1, 1, 2]
    for tool, endpoint in (("charge", "billing"), ("send_email", "billing")):
        assert whole_call(by_tool[tool][0], tool, run.posts[(endpoint, tool)]) == [], tool
    searches = sorted(whole_call(spans, "search", 2) for spans in by_tool["search"])
    assert searches == [[], []], searches  # each search: a 429, then the repeat


# ---------------------------------------------------------------------------------------------
# The docs' Jaeger queries

QUERY_ROW: Final = r"^\| `([^`]+)` \| ([^|]+) \| ([^|]+) \|$"


def documented_queries() -> list[tuple[dict[str, str], set[str]]]:
    """docs/jaeger-tempo.md, "Jaeger queries": (tags, the demo calls it finds) for each row."""
    import re

    section = DOCS.read_text().split("## Jaeger queries", 1)[1].split("\n## ", 1)[0]
    rows = []
    for tags, _what, finds in re.findall(QUERY_ROW, section, flags=re.M):
        pairs = dict(pair.split("=", 1) for pair in tags.split())
        rows.append((pairs, {tool.strip().strip("`") for tool in finds.split(",")}))
    return rows


def test_the_docs_list_jaeger_queries() -> None:
    rows = documented_queries()
    assert len(rows) >= 5
    assert all(tags and finds for tags, finds in rows)


def test_every_jaeger_query_in_the_docs_returns_what_it_says(
    bins: o.Binaries, jaeger: o.Jaeger, tmp_path: Path
) -> None:
    with o.running_collector(bins.otelcol, o.SINGLE, tmp_path, backends(jaeger, 100)) as collector:
        run_demo_agent(tmp_path, collector.traces_endpoint)
        wait_for_calls(jaeger, {"search": 2, "charge": 1, "send_email": 1})
    wrong = []
    for tags, finds in documented_queries():
        found = set()
        for trace in jaeger.find(SERVICE, tags):
            spans = otlp_spans_of(jaeger, trace["traceID"])
            found |= {
                f"{endpoint_of(call)} {call['attributes'][t.GEN_AI_TOOL_NAME]}" for call in call_spans(spans)
            }
        if found != finds:
            wrong.append((tags, sorted(found), sorted(finds)))
    assert wrong == []


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


def test_the_demo_prints_each_call_s_trace_as_jaeger_returns_it(bins: o.Binaries) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "harness.run", "--jaeger"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "as Jaeger returns them (/api/v3/traces/{id}) (4 calls)" in done.stdout
    for tool in ("search", "charge", "send_email"):
        assert f"tools/call {tool}" in done.stdout


def test_a_plain_demo_never_looks_for_the_binaries() -> None:
    text = (REPO / "harness" / "run.py").read_text()
    top = text.split("class JaegerSink", 1)[0]
    assert "otel_stack" not in top, "harness.run imports the binaries' module only for --jaeger"
