"""`python -m harness.run`: the plugin end to end on loopback, in one command.

It serves the two endpoints of `examples/replay.toml` with the demo MCP server and a scripted mix
of faults (429s, a connection cut after the tool ran, a changes tool with and without its key),
starts an OTLP/HTTP receiver, runs `opentelemetry-instrument python examples/agent.py` configured
by environment variables only, and prints what the agent saw, what the servers really ran, and each
tool call's trace as a tree. Everything binds 127.0.0.1 and is stopped at the end; the agent gets
`AGENT_TIMEOUT_S`, the spans `SPANS_TIMEOUT_S`.

The servers take the ports `examples/replay.toml` names (8765, 8766) so the example file is used
as it is; when one is taken, they take ephemeral ports and the agent gets a copy of the file whose
endpoint keys are rewritten to match.

`--jaeger` sends the spans through the real OpenTelemetry Collector (collector-config/otelcol.yaml,
unchanged) into Jaeger v2, both built by scripts/otel-binaries, and prints each trace as Jaeger's
query API returns it (collector-config/README.md).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from harness.faults import FaultPlan
from harness.receiver import OtlpReceiver, SpanDict, format_trace_tree
from harness.sdk import LINE
from harness.server import ServerHandle, running_server
from otel_mcp_replay import environment_variables as ev
from otel_mcp_replay import telemetry as t

REPO: Final = Path(__file__).resolve().parents[1]
EXAMPLES: Final = REPO / "examples"
AGENT: Final = EXAMPLES / "agent.py"
CONFIG: Final = EXAMPLES / "replay.toml"
# Guards against a hang only, generous so a loaded machine is never read as a failure: the agent
# takes a few seconds, and its spans are in by the time it exits (it flushes them on the way out).
AGENT_TIMEOUT_S: Final = 120.0
SPANS_TIMEOUT_S: Final = 30.0
# --jaeger: how long the Collector's tail sampling holds a trace before it decides (the shipped
# default, 30 s, is for production; the demo's calls end in under a second).
JAEGER_DECISION_WAIT_S: Final = 2

# The endpoints of examples/replay.toml (name -> origin), and the faults each one's tools meet:
# `FaultPlan.from_json`'s format, one fault per POST of that tool, in order; then calls pass.
ORIGINS: Final[Mapping[str, str]] = {
    "billing": "http://127.0.0.1:8765",
    "catalog": "http://127.0.0.1:8766",
}
FAULTS: Final[Mapping[str, Mapping[str, list[dict[str, Any]]]]] = {
    "billing": {
        "search": [{"fault": "throttle", "retry_after": "1"}],
        "charge": [{"fault": "drop-after"}],
        "send_email": [{"fault": "drop-after"}],
    },
    "catalog": {
        "search": [{"fault": "throttle"}],
    },
}
TOOLS: Final = ("search", "charge", "send_email")
# The one warning opentelemetry-instrument always prints when a configurator is chosen by name.
_EXPECTED_STDERR: Final = "Configuration of configurator not loaded, mcp_replay already loaded"
# The environment the demo prints as the agent's command line (all the agent gets, less the shell's).
_SHOWN: Final = (
    "OTEL_PYTHON_CONFIGURATOR",
    ev.OTEL_PYTHON_MCP_REPLAY_CONFIG,
    "OTEL_SERVICE_NAME",
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_METRICS_EXPORTER",
    "OTEL_LOGS_EXPORTER",
    "OTEL_BSP_SCHEDULE_DELAY",
    "MCP_DEMO_URL",
    "MCP_DEMO_CATALOG_URL",
)
_LEGEND: Final = """\
  tools/call <tool>   [client]  the call, the MCP client span (this plugin); its record: verdict, effect,
                                one row per attempt
  POST                [client]  under a call: one HTTP attempt, the HTTP client span of its POST (this
                                plugin): status, failure, what allowed it, effect, wait after
""" + (
    "  MCP send <method>   [client]  the mcp SDK's own span of a protocol request; its POST: the httpx2\n"
    "                                instrumentation's"
    if LINE == 2
    else "  POST                [client]  elsewhere: the httpx instrumentation's (mcp 1.x makes no spans)"
)
# How to read a record whose call completed after a 429 (it reads as a contradiction otherwise).
_READING: Final = (
    "Reading a record: a 429 is not proof that the tool did not run, so an attempt that got one\n"
    'keeps effect unknown, and so does its call, even when a repeat was answered; "may have run: no"\n'
    "says only that the call completed, so it did not fail with UnknownEffectError."
)


@dataclass(frozen=True)
class DemoServers:
    """The running endpoints (by the names of ORIGINS) and the config file that declares them."""

    servers: Mapping[str, ServerHandle]
    config: Path

    @property
    def billing(self) -> ServerHandle:
        return self.servers["billing"]

    @property
    def catalog(self) -> ServerHandle:
        return self.servers["catalog"]


def _port_of(origin: str) -> int:
    return int(origin.rsplit(":", 1)[1])


def _serve(origin: str, faults: Mapping[str, list[dict[str, Any]]], fixed_port: bool) -> ServerHandle:
    plan = FaultPlan.from_json(json.dumps(dict(faults)))
    if fixed_port:
        try:
            return running_server("streamable", fault_plan=plan, port=_port_of(origin))
        except OSError:  # the port is taken: any free one will do, the config follows
            pass
    return running_server("streamable", fault_plan=plan)


@contextlib.contextmanager
def demo_servers(
    work_dir: Path,
    config: Path = CONFIG,
    *,
    fixed_ports: bool = True,
    faults: Mapping[str, Mapping[str, list[dict[str, Any]]]] = FAULTS,
) -> Iterator[DemoServers]:
    """Serve every endpoint of ORIGINS with its `faults` (default FAULTS); stop them all on exit.

    The config is `config` itself when every server got its port, else a copy in `work_dir` with
    each origin replaced by the one actually served.
    """
    with contextlib.ExitStack() as stack:
        servers = {
            name: stack.enter_context(_serve(origin, faults.get(name, {}), fixed_ports))
            for name, origin in ORIGINS.items()
        }
        text = config.read_text(encoding="utf-8")
        rewritten = text
        for name, origin in ORIGINS.items():
            rewritten = rewritten.replace(origin, servers[name].origin)
        if rewritten != text:
            config = work_dir / config.name
            config.write_text(rewritten, encoding="utf-8")
        yield DemoServers(servers, config)


def agent_environment(
    demo: DemoServers, traces_endpoint: str, base: Mapping[str, str] | None = None, **extra: str
) -> dict[str, str]:
    """The agent's whole set-up, as environment variables: OpenTelemetry's, the plugin's, the agent's.

    Any OTEL_* variable of `base` (default: this process's environment) is dropped, so the run
    does not depend on the shell it starts from.
    """
    env = {k: v for k, v in (os.environ if base is None else base).items() if not k.startswith("OTEL_")}
    env.update(
        {
            "OTEL_PYTHON_CONFIGURATOR": "mcp_replay",  # every exported span goes through redaction
            "OTEL_SERVICE_NAME": "mcp-demo-agent",
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": traces_endpoint,
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_LOGS_EXPORTER": "none",
            "OTEL_BSP_SCHEDULE_DELAY": "200",
            ev.OTEL_PYTHON_MCP_REPLAY_CONFIG: str(demo.config),
            "MCP_DEMO_URL": demo.billing.url,
            "MCP_DEMO_CATALOG_URL": demo.catalog.url,
            **extra,
        }
    )
    return env


def agent_command(agent: Path = AGENT) -> list[str]:
    """`opentelemetry-instrument python agent.py`, both from this interpreter's environment."""
    bin_dir = Path(sys.executable).parent
    return [str(bin_dir / "opentelemetry-instrument"), sys.executable, str(agent)]


def run_agent(
    env: Mapping[str, str], agent: Path = AGENT, timeout: float = AGENT_TIMEOUT_S
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        agent_command(agent),
        env=dict(env),
        cwd=agent.parent,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def tool_call_traces(spans: Sequence[SpanDict]) -> list[list[SpanDict]]:
    """The traces holding a tool call's record, in the order the calls started."""
    with_record = {s["trace_id"] for s in spans if any(e["name"] == t.RECORD_EVENT for e in s["events"])}
    traces: dict[str, list[SpanDict]] = {}
    for span in spans:
        if span["trace_id"] in with_record:
            traces.setdefault(span["trace_id"], []).append(span)
    return sorted(traces.values(), key=lambda ss: min(s["start_time_unix_nano"] for s in ss))


def records_received(spans: Sequence[SpanDict]) -> int:
    return sum(1 for s in spans for e in s["events"] if e["name"] == t.RECORD_EVENT)


def _describe(fault: Mapping[str, Any]) -> str:
    kind = fault.get("fault")
    if kind == "throttle":
        retry_after = fault.get("retry_after")
        return "HTTP 429" + (f" (Retry-After: {retry_after})" if retry_after is not None else "")
    if kind == "drop-after":
        return "connection cut after the tool ran"
    return str(kind)


def _ground_truth(handle: ServerHandle) -> str:
    parts = []
    for tool in TOOLS:
        posts = handle.counters.tool_posts(tool)
        if not posts:
            continue
        part = f"{tool} sent {posts}x, ran {handle.counters.executions(tool)}x"
        deduplicated = handle.counters.deduplicated(tool)
        if deduplicated:
            part += f" (+{deduplicated} answered from its idempotency key)"
        parts.append(part)
    return "; ".join(parts)


def _indent(text: str, prefix: str = "  ") -> str:
    return "\n".join(prefix + line if line else line for line in text.splitlines())


def _display(path: Path) -> str:
    with contextlib.suppress(ValueError):
        return str(path.relative_to(Path.cwd()))
    return str(path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--agent", type=Path, default=AGENT, help="the agent script (default: %(default)s)")
    parser.add_argument("--config", type=Path, default=CONFIG, help="replay config (default: %(default)s)")
    parser.add_argument(
        "--jaeger",
        action="store_true",
        help="export through the OpenTelemetry Collector (collector-config/otelcol.yaml) into Jaeger v2, "
        "both built by scripts/otel-binaries, and print each trace as Jaeger returns it",
    )
    args = parser.parse_args(argv)
    agent: Path = args.agent.resolve()
    config: Path = args.config.resolve()
    for path in (agent, config):
        if not path.is_file():
            print(f"demo: {path} not found: run it from a clone of the repository", file=sys.stderr)
            return 2

    def say(text: str = "") -> None:
        print(text, flush=True)

    with contextlib.ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mcp-replay-demo-")))
        demo = stack.enter_context(demo_servers(work, config))
        sink: SpanSink = stack.enter_context(JaegerSink(work) if args.jaeger else ReceiverSink())
        say(f"otel-mcp-replay demo: two MCP servers, the agent and {sink.description}, all on 127.0.0.1")
        say()
        for name, handle in demo.servers.items():
            say(f"  {name} server {handle.url}, faults on each tool's first tools/call POSTs:")
            for tool, faults in FAULTS[name].items():
                say(f"    {tool:<11} " + ", then ".join(_describe(f) for f in faults))
        say()
        env = agent_environment(demo, sink.traces_endpoint)
        say("$ env \\")
        for key in _SHOWN:
            value = _display(demo.config) if key == ev.OTEL_PYTHON_MCP_REPLAY_CONFIG else env[key]
            say(f"    {key}={value} \\")
        say(f"  opentelemetry-instrument python {_display(agent)}")
        try:
            done = run_agent(env, agent)
        except subprocess.TimeoutExpired:
            say(f"demo: the agent did not finish within {AGENT_TIMEOUT_S:.0f} s")
            return 1
        say()
        say("What the agent saw (it has no tracing code):")
        say(_indent(done.stdout.rstrip()))
        stderr = [line for line in done.stderr.splitlines() if line.strip() and _EXPECTED_STDERR not in line]
        if stderr:
            say("  agent stderr:")
            say(_indent("\n".join(stderr[-40:]), "    "))
        if done.returncode != 0:
            say(f"demo: the agent exited with status {done.returncode}")
            return 1
        calls = done.stdout.count(" -> ")
        spans = sink.wait_for_records(calls)
        say()
        say("What the servers really did (their own counters):")
        for name, handle in demo.servers.items():
            say(f"  {name:<8} {_ground_truth(handle)}")
        traces = tool_call_traces(spans)
        say()
        say(f"The trace of each tool call, {sink.shown_as} ({len(traces)} calls):")
        say(_LEGEND)
        say()
        say(_READING)
        for members in traces:
            say()
            say(format_trace_tree(members))
        if records_received(spans) < calls:
            say(f"demo: expected {calls} request_attempts records, got {records_received(spans)}")
            return 1
    return 0


class SpanSink(contextlib.AbstractContextManager["SpanSink"]):
    """Where the agent exports, and how the demo reads back what arrived."""

    description: str
    shown_as: str

    @property
    def traces_endpoint(self) -> str:
        raise NotImplementedError

    def wait_for_records(self, calls: int) -> list[SpanDict]:
        raise NotImplementedError


class ReceiverSink(SpanSink):
    """The quick way: harness/receiver.py's OTLP receiver, spans as exported."""

    description = "an OTLP receiver"
    shown_as = "as exported"

    def __init__(self) -> None:
        self.receiver = OtlpReceiver()

    def __enter__(self) -> ReceiverSink:
        self.receiver.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.receiver.stop()

    @property
    def traces_endpoint(self) -> str:
        return self.receiver.traces_endpoint

    def wait_for_records(self, calls: int) -> list[SpanDict]:
        self.receiver.wait_for(lambda spans: records_received(spans) >= calls, timeout=SPANS_TIMEOUT_S)
        return self.receiver.spans()


class JaegerSink(SpanSink):
    """`--jaeger`: the Collector (collector-config/otelcol.yaml, unchanged) in front of Jaeger v2,
    both built by scripts/otel-binaries; the traces are read back from Jaeger's query API."""

    description = "the OpenTelemetry Collector in front of Jaeger"
    shown_as = "as Jaeger returns them (/api/v3/traces/{id})"

    def __init__(self, work: Path) -> None:
        self.work = work
        self.stack = contextlib.ExitStack()

    def __enter__(self) -> JaegerSink:
        from harness import otel_stack as o  # only here: plain runs never look for the binaries

        found = o.binaries()
        with contextlib.ExitStack() as stack:  # what started is stopped if the rest fails to
            self.jaeger = stack.enter_context(o.running_jaeger(found.jaeger, self.work))
            settings = {
                "MCP_REPLAY_JAEGER_ENDPOINT": self.jaeger.otlp_grpc,
                "MCP_REPLAY_TEMPO_ENDPOINT": o.closed_endpoint(),  # Tempo is not run here
                "MCP_REPLAY_SAMPLE_PERCENT": "100",  # every call shown, not one in ten
                "MCP_REPLAY_DECISION_WAIT": f"{JAEGER_DECISION_WAIT_S}s",
            }
            self.collector = stack.enter_context(
                o.running_collector(found.otelcol, o.SINGLE, self.work, settings)
            )
            self.stack = stack.pop_all()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stack.close()

    @property
    def traces_endpoint(self) -> str:
        return self.collector.traces_endpoint

    def spans(self) -> list[SpanDict]:
        service = "mcp-demo-agent"
        if service not in self.jaeger.services():
            return []
        return [s for trace in self.jaeger.find(service) for s in self.jaeger.spans_v3(trace["traceID"])]

    def wait_for_records(self, calls: int) -> list[SpanDict]:
        """Every span the Collector took, once Jaeger holds it. The records alone are not enough:
        they ride on the call spans, uncertain ones, which the Collector sends at once, while the
        answered attempts wait for the sampling decision (collector-config/README.md)."""
        from harness import otel_stack as o

        timeout = JAEGER_DECISION_WAIT_S + SPANS_TIMEOUT_S + 10
        return o.wait_stored(self.collector, self.jaeger, "mcp-demo-agent", timeout)


if __name__ == "__main__":
    raise SystemExit(main())
