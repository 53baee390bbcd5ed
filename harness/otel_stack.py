"""A real OpenTelemetry Collector and a real Jaeger v2, run from the binaries scripts/otel-binaries builds.

The rule kept here: every process started is stopped on exit (terminated, then killed), and each
listens only on 127.0.0.1, on ports free when it starts. Waits are bounded polls that guard a hang;
none decides anything by a clock. The collector runs a shipped config unchanged: its endpoints come
from the `MCP_REPLAY_*` environment variables the config reads (collector-config/README.md).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final, ParamSpec, TypeVar

from harness.ports import PORT_TRIES, PortTaken, free_port, holds, wait_serving
from harness.receiver import EventDict, SpanDict

REPO: Final = Path(__file__).resolve().parents[1]
CC: Final = REPO / "collector-config"
SINGLE: Final = CC / "otelcol.yaml"
AGENT: Final = CC / "otelcol-agent.yaml"
GATEWAY: Final = CC / "otelcol-gateway.yaml"
JAEGER_CONFIG: Final = CC / "jaeger-local.yaml"
BUILD_SCRIPT: Final = REPO / "scripts" / "otel-binaries"
HOST: Final = "127.0.0.1"
START_TIMEOUT_S: Final = 90.0  # a cold start on a busy 2-core machine; a guard, never a verdict
# What Go's net package says when a port it binds is held.
_PORT_TAKEN: Final = "bind: address already in use"
_KINDS: Final = ("UNSPECIFIED", "INTERNAL", "SERVER", "CLIENT", "PRODUCER", "CONSUMER")
_STATUS: Final = ("UNSET", "OK", "ERROR")
T = TypeVar("T")
P = ParamSpec("P")


class BinariesMissing(RuntimeError):
    """The Collector or Jaeger binary is not built: run scripts/otel-binaries."""


@dataclass(frozen=True)
class Binaries:
    otelcol: Path
    jaeger: Path


def binaries() -> Binaries:
    """Where scripts/otel-binaries put them (it is asked, so the two never disagree on the path)."""
    done = subprocess.run(
        [str(BUILD_SCRIPT), "--print"], capture_output=True, text=True, timeout=60, check=False
    )
    found = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    if done.returncode != 0 or not {"OTELCOL", "JAEGER"} <= set(found):
        raise BinariesMissing(
            "the Collector and Jaeger binaries are not built: run scripts/otel-binaries "
            f"(it printed: {done.stdout.strip()!r} {done.stderr.strip()!r})"
        )
    return Binaries(Path(found["OTELCOL"]), Path(found["JAEGER"]))


def closed_endpoint() -> str:
    """A 127.0.0.1 endpoint nothing listens on (a backend that is down, or not run here: Tempo)."""
    return f"{HOST}:{free_port()}"


def http_get(url: str, timeout: float = 10.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return int(response.status), bytes(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _healthy(url: str) -> bool:
    with contextlib.suppress(OSError):
        status, _ = http_get(url, timeout=2.0)
        return status == 200
    return False


@dataclass
class Process:
    """A binary running on 127.0.0.1, with its log; stopped by `stop`, paused by `pause`."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    health_url: str

    def healthy(self) -> bool:
        """Alive, its health check saying so, and that check its own: a port taken before it bound
        it may be answered by another process's (another suite's Collector)."""
        port = urllib.parse.urlsplit(self.health_url).port
        return (
            self.popen.poll() is None
            and _healthy(self.health_url)
            and port is not None
            and holds(self.popen.pid, port)
        )

    def wait_healthy(self, timeout: float = START_TIMEOUT_S) -> None:
        """Healthy on its own health port (ports.wait_serving); PortTaken when it exited because a
        port it was named was taken."""
        port = urllib.parse.urlsplit(self.health_url).port
        assert port is not None, self.health_url
        wait_serving(
            self.popen,
            port,
            lambda: _healthy(self.health_url),
            what=self.name,
            said=self.log_text,
            timeout=timeout,
            taken=_PORT_TAKEN,
            pause=0.2,
        )

    def log_text(self, tail: int = 60) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-tail:])
        return ""

    def pause(self) -> None:
        """Stalled, not gone: its sockets stay open and accept, and nothing answers."""
        self.popen.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.popen.send_signal(signal.SIGCONT)

    def rss_bytes(self) -> int:
        for line in Path(f"/proc/{self.popen.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError(f"{self.name}: no VmRSS")

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.resume()  # a stopped process does not act on SIGTERM until continued
            self.popen.terminate()
            try:
                self.popen.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=15)


@contextlib.contextmanager
def _running(
    name: str, argv: list[str], env: Mapping[str, str], log: Path, health_url: str
) -> Iterator[Process]:
    out: IO[bytes] = log.open("wb")
    try:
        popen = subprocess.Popen(argv, env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT)
    except BaseException:
        out.close()
        raise
    process = Process(name, popen, log, health_url)
    try:
        process.wait_healthy()
        yield process
    finally:
        process.stop()
        out.close()


def _on_free_ports(
    start: Callable[P, contextlib.AbstractContextManager[T]],
) -> Callable[P, contextlib.AbstractContextManager[T]]:
    """`start`, which names its ports with `free_port` and runs a process on them, run once more on
    fresh ports when the process found one taken (PortTaken): a port is named free before its process
    binds it, and any other process of the run may bind it meanwhile (harness/ports.py). At most
    PORT_TRIES starts; any other failure is the start's own."""

    @functools.wraps(start)
    @contextlib.contextmanager
    def started(*args: P.args, **kwargs: P.kwargs) -> Iterator[T]:
        for left in reversed(range(PORT_TRIES)):
            with contextlib.ExitStack() as stack:
                try:
                    process = stack.enter_context(start(*args, **kwargs))
                except PortTaken:
                    if not left:
                        raise
                    continue
                yield process
                return

    return started


@dataclass
class Jaeger:
    process: Process
    otlp_grpc: str  # host:port, what a collector's otlp exporter sends to
    query_url: str  # http://127.0.0.1:port, the query API (/api/traces, /api/v3/...)

    def get(self, path: str, **params: str) -> tuple[int, bytes]:
        query = ("?" + urllib.parse.urlencode(params)) if params else ""
        return http_get(self.query_url + path + query)

    def services(self) -> list[str]:
        status, body = self.get("/api/services")
        assert status == 200, body[:200]
        return list(json.loads(body)["data"] or [])

    def find(
        self, service: str, tags: Mapping[str, str] | None = None, limit: int = 200
    ) -> list[dict[str, Any]]:
        """`/api/traces`, what the UI's search runs: the traces with a span matching every tag."""
        params = {"service": service, "lookback": "1h", "limit": str(limit)}
        if tags:
            params["tags"] = json.dumps(dict(tags))
        status, body = self.get("/api/traces", **params)
        assert status == 200, body[:300]
        found: list[dict[str, Any]] = json.loads(body)["data"] or []
        return found

    def trace_v3(self, trace_id: str) -> tuple[int, bytes]:
        return self.get(f"/api/v3/traces/{trace_id}")

    def spans_v3(self, trace_id: str) -> list[SpanDict]:
        """One trace from `/api/v3/traces/{id}` (OTLP JSON), as the receiver's span dicts."""
        status, body = self.trace_v3(trace_id)
        if status == 404:
            return []
        assert status == 200, body[:300]
        return otlp_json_spans(json.loads(body)["result"])


@_on_free_ports
@contextlib.contextmanager
def running_jaeger(binary: Path, work_dir: Path) -> Iterator[Jaeger]:
    """Jaeger v2 (jaeger-local.yaml), its OTLP receiver and query API on free 127.0.0.1 ports."""
    otlp, http, grpc, health = (free_port() for _ in range(4))
    env = {
        "MCP_REPLAY_JAEGER_OTLP_GRPC": f"{HOST}:{otlp}",
        "MCP_REPLAY_JAEGER_QUERY_HTTP": f"{HOST}:{http}",
        "MCP_REPLAY_JAEGER_QUERY_GRPC": f"{HOST}:{grpc}",
        "MCP_REPLAY_JAEGER_HEALTH": f"{HOST}:{health}",
    }
    argv = [str(binary), f"--config={JAEGER_CONFIG}"]
    log = work_dir / f"jaeger-{otlp}.log"
    with _running("jaeger", argv, env, log, f"http://{HOST}:{health}/status") as process:
        yield Jaeger(process, f"{HOST}:{otlp}", f"http://{HOST}:{http}")


# The Collector built here has no OTLP/HTTP exporter (builder-config.yaml), and the receiver of
# harness/receiver.py speaks OTLP/HTTP only: Jaeger's binary, which has one, relays the log records.
LOG_RELAY_CONFIG: Final = """\
service:
  extensions: [healthcheckv2]
  pipelines:
    logs: {{receivers: [otlp], exporters: [otlphttp]}}
  telemetry: {{metrics: {{level: none}}, logs: {{level: warn}}}}
extensions:
  healthcheckv2: {{use_v2: true, http: {{endpoint: "{health}"}}}}
receivers:
  otlp: {{protocols: {{grpc: {{endpoint: "{grpc}"}}}}}}
exporters:
  otlphttp: {{logs_endpoint: "{logs_url}"}}
"""


@_on_free_ports
@contextlib.contextmanager
def running_log_relay(jaeger_binary: Path, work_dir: Path, logs_url: str) -> Iterator[str]:
    """OTLP gRPC in on a free 127.0.0.1 port (yielded, host:port), each log record out to `logs_url`."""
    grpc, health = free_port(), free_port()
    config = work_dir / f"log-relay-{grpc}.yaml"
    config.write_text(
        LOG_RELAY_CONFIG.format(health=f"{HOST}:{health}", grpc=f"{HOST}:{grpc}", logs_url=logs_url)
    )
    argv = [str(jaeger_binary), f"--config={config}"]
    with _running(
        "log relay", argv, {}, work_dir / f"log-relay-{grpc}.log", f"http://{HOST}:{health}/status"
    ):
        yield f"{HOST}:{grpc}"


@dataclass
class Collector:
    process: Process
    config: Path
    otlp_grpc: str  # host:port
    otlp_http: str  # http://127.0.0.1:port (the gateway has none: "")
    metrics_url: str

    @property
    def traces_endpoint(self) -> str:
        return f"{self.otlp_http}/v1/traces"

    def metrics(self) -> str:
        status, body = http_get(self.metrics_url)
        assert status == 200, body[:200]
        return body.decode()

    def metric(self, name: str, **labels: str) -> float:
        """The sum of the series of one of the collector's own metrics that carry every label given
        (0 when it has none yet): `metric("otelcol_exporter_sent_spans", exporter="otlp/jaeger")`."""
        wanted = [f'{key}="{value}"' for key, value in labels.items()]
        total = 0.0
        for line in self.metrics().splitlines():
            if not (line.startswith(name + "{") or line.startswith(name + " ")):
                continue
            series = line[len(name) :].rsplit(" ", 1)
            if all(label in series[0] for label in wanted):
                total += float(series[1])
        return total


@_on_free_ports
@contextlib.contextmanager
def running_collector(
    binary: Path,
    config: Path,
    work_dir: Path,
    env: Mapping[str, str] | None = None,
    overlays: Sequence[Path] = (),
) -> Iterator[Collector]:
    """`binary --config=config`, its receivers, health check and metrics on free 127.0.0.1 ports.

    `env` adds the config's other settings (MCP_REPLAY_JAEGER_ENDPOINT, MCP_REPLAY_SAMPLE_PERCENT ...).
    `overlays` are further `--config` files the Collector merges over the shipped one, as a user
    changes a setting no variable reaches (the loadbalancing exporter's resolver).
    """
    grpc, http, health, metrics = (free_port() for _ in range(4))
    settings = {
        "MCP_REPLAY_OTLP_GRPC_ENDPOINT": f"{HOST}:{grpc}",
        "MCP_REPLAY_OTLP_HTTP_ENDPOINT": f"{HOST}:{http}",
        "MCP_REPLAY_HEALTH_ENDPOINT": f"{HOST}:{health}",
        "MCP_REPLAY_METRICS_HOST": HOST,
        "MCP_REPLAY_METRICS_PORT": str(metrics),
        **(env or {}),
    }
    argv = [str(binary), f"--config={config}", *(f"--config={overlay}" for overlay in overlays)]
    log = work_dir / f"{config.stem}-{grpc}.log"
    with _running(config.name, argv, settings, log, f"http://{HOST}:{health}/") as process:
        has_http = "MCP_REPLAY_OTLP_HTTP_ENDPOINT" in config.read_text()
        yield Collector(
            process,
            config,
            f"{HOST}:{grpc}",
            f"http://{HOST}:{http}" if has_http else "",
            f"http://{HOST}:{metrics}/metrics",
        )


def static_gateways(work_dir: Path, gateways: Sequence[Collector]) -> Path:
    """An overlay for otelcol-agent.yaml: the loadbalancing exporter's `static` resolver, listing
    these gateways, in place of the shipped `dns` one (its README, "From one tier to two").
    `dns: null` removes the shipped resolver: the exporter takes exactly one."""
    overlay = work_dir / f"static-gateways-{len(gateways)}-{free_port()}.yaml"
    hostnames = ", ".join(json.dumps(gateway.otlp_grpc) for gateway in gateways)
    overlay.write_text(
        "exporters:\n  loadbalancing:\n    resolver:\n      dns: null\n"
        f"      static:\n        hostnames: [{hostnames}]\n"
    )
    return overlay


def validate(binary: Path, configs: Sequence[Path], env: Mapping[str, str] | None = None) -> tuple[int, str]:
    """`binary validate`: whether the Collector accepts these merged configs, and what it said."""
    argv = [str(binary), "validate", *(f"--config={config}" for config in configs)]
    done = subprocess.run(
        argv, env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=60, check=False
    )
    return done.returncode, done.stdout + done.stderr


def wait_stored(collector: Collector, jaeger: Jaeger, service: str, timeout: float) -> list[SpanDict]:
    """The service's spans in Jaeger once it holds every span the collector took (bounded).

    For a collector that keeps every trace (a sampling rate of 100) and sends no span twice: each
    span it accepted is sent on once, to `otlp/jaeger`. Waiting for the call spans alone is not
    enough: uncertain spans leave at once, the others after the decision and a batch.
    """
    spans: list[SpanDict] = []

    def stored() -> bool:
        nonlocal spans
        sent = collector.metric("otelcol_exporter_sent_spans", exporter="otlp/jaeger")
        done = sent >= collector.metric("otelcol_receiver_accepted_spans") > 0
        found = [] if service not in jaeger.services() else jaeger.find(service)
        spans = [s for trace in found for s in jaeger.spans_v3(trace["traceID"])]
        return done and len(spans) >= sent

    wait_until(stored, timeout, interval=0.5)
    return spans


def wait_until(holds: Any, timeout: float, interval: float = 0.25) -> bool:
    """Poll `holds()` until true or `timeout` (a guard against a hang, never a verdict)."""
    deadline = time.monotonic() + timeout
    while True:
        if holds():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


# ---------------------------------------------------------------------------------------------
# Jaeger's answers, read


def _otlp_value(value: Mapping[str, Any]) -> Any:
    if "stringValue" in value:
        return value["stringValue"]
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "intValue" in value:
        return int(value["intValue"])  # OTLP JSON writes 64-bit integers as strings
    if "doubleValue" in value:
        return float(value["doubleValue"])
    if "arrayValue" in value:
        return [_otlp_value(v) for v in value["arrayValue"].get("values", [])]
    if "kvlistValue" in value:
        return _otlp_attributes(value["kvlistValue"].get("values", []))
    return None


def _otlp_attributes(kvs: Any) -> dict[str, Any]:
    return {kv["key"]: _otlp_value(kv.get("value", {})) for kv in kvs or []}


def _enum(value: Any, names: tuple[str, ...], prefix: str) -> str:
    if isinstance(value, int):
        return names[value] if 0 <= value < len(names) else str(value)
    text = str(value or names[0])
    return text.removeprefix(prefix)


def otlp_json_spans(data: Mapping[str, Any]) -> list[SpanDict]:
    """OTLP JSON (`{"resourceSpans": [...]}`, as Jaeger's API v3 answers) as the receiver's span dicts."""
    spans: list[SpanDict] = []
    for rs in data.get("resourceSpans", []) or []:
        resource = _otlp_attributes((rs.get("resource") or {}).get("attributes"))
        for ss in rs.get("scopeSpans", []) or []:
            scope = ss.get("scope") or {}
            for s in ss.get("spans", []) or []:
                status = s.get("status") or {}
                events: list[EventDict] = [
                    {
                        "name": e.get("name", ""),
                        "time_unix_nano": int(e.get("timeUnixNano", 0)),
                        "attributes": _otlp_attributes(e.get("attributes")),
                    }
                    for e in s.get("events", []) or []
                ]
                spans.append(
                    {
                        "trace_id": str(s.get("traceId", "")).lower(),
                        "span_id": str(s.get("spanId", "")).lower(),
                        "parent_span_id": str(s.get("parentSpanId", "") or "").lower(),
                        "name": s.get("name", ""),
                        "kind": _enum(s.get("kind", 0), _KINDS, "SPAN_KIND_"),
                        "start_time_unix_nano": int(s.get("startTimeUnixNano", 0)),
                        "end_time_unix_nano": int(s.get("endTimeUnixNano", 0)),
                        "attributes": _otlp_attributes(s.get("attributes")),
                        "events": events,
                        "status": {
                            "code": _enum(status.get("code", 0), _STATUS, "STATUS_CODE_"),
                            "message": status.get("message", ""),
                        },
                        "resource": resource,
                        "scope": scope.get("name", ""),
                        "scope_version": scope.get("version", ""),
                    }
                )
    return spans
