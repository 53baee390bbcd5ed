"""What every benchmark shares: the server process, the OTel pipeline, statistics, the result rows."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from otel_mcp_replay.record import AttemptRow, call_record

REPO = Path(__file__).resolve().parent.parent
LOOPBACK = "127.0.0.1"
# What a figure depends on besides the plugin (issue 55: a dependency's change told apart from the
# plugin's). The peer is this distribution's HTTPX2ClientInstrumentor; fastmcp only when installed.
PEER = "opentelemetry-instrumentation-httpx"
MEASURED = ("mcp", "httpx2", "opentelemetry-api", "opentelemetry-sdk", PEER, "fastmcp", "otel-mcp-replay")
OPTIONAL = ("fastmcp",)


# -- results --------------------------------------------------------------------------------------


@dataclass
class Row:
    """One line of the results table."""

    metric: str
    value: str
    target: str = ""
    met: bool | None = None  # None: no target


@dataclass
class Section:
    """One benchmark's rows, and anything it adds below the table (notes, a profile)."""

    name: str
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    details: str = ""
    seconds: float = 0.0
    versions: dict[str, str] = field(default_factory=dict)  # what it measured, printed above its table

    def add(self, metric: str, value: str, target: str = "", met: bool | None = None) -> None:
        self.rows.append(Row(metric, value, target, met))

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Section:
        raw = json.loads(text)
        rows = [Row(**row) for row in raw.pop("rows")]
        return cls(rows=rows, **raw)


LEAST = ("plugin", "skeleton", "floor")  # the plugin and the least an implementation could add


def beside(section: Section, metric: str, figure: Callable[[str], str]) -> None:
    """One row of the plugin's figure with the skeleton's and the floor's, side by side."""
    section.add(f"{', '.join(LEAST)}: {metric}", "; ".join(f"{arm} {figure(arm)}" for arm in LEAST))


def section_main(run: Callable[[bool], Section], argv: Sequence[str] | None = None) -> int:
    """`python -m benchmarks.<name> [--quick] [--json PATH]`: run one benchmark in this process."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", default=None, help="write the section here as JSON")
    args = parser.parse_args(argv)
    started = time.monotonic()
    section = run(args.quick)
    section.seconds = time.monotonic() - started
    if args.json:
        Path(args.json).write_text(section.to_json())
    else:
        print(render_section(section))
    return 0


def render_section(section: Section) -> str:
    lines = [f"### {section.name}", ""]
    if section.versions:
        measured = "; ".join(
            f"{name} {version}" + (" (the peer)" if name == PEER else "")
            for name, version in section.versions.items()
        )
        lines += [f"Versions measured: {measured}.", ""]
    lines += ["| metric | value | target | met |", "| --- | --- | --- | --- |"]
    for row in section.rows:
        met = "" if row.met is None else ("yes" if row.met else "**no**")
        lines.append(f"| {row.metric} | {row.value} | {row.target} | {met} |")
    if section.notes:
        lines.append("")
        lines.extend(f"- {note}" for note in section.notes)
    if section.details:
        lines.extend(["", section.details])
    return "\n".join(lines)


# -- statistics -----------------------------------------------------------------------------------


def percentile(samples: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation between closest ranks."""
    ordered = sorted(samples)
    if not ordered:
        return float("nan")
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def median(samples: Sequence[float]) -> float:
    return percentile(samples, 50)


def per_op_us(
    fn: Callable[[], object], *, runs: int, loops: int, clock: Callable[[], int] = time.perf_counter_ns
) -> list[float]:
    """Microseconds per call of `fn`, one sample per run of `loops` calls (short runs, so a burst
    of another process's load spoils a few samples, not the figure); `clock` in nanoseconds."""
    samples = []
    for _ in range(runs):
        started = clock()
        for _ in range(loops):
            fn()
        samples.append((clock() - started) / loops / 1000)
    return samples


# -- the server, in its own process ---------------------------------------------------------------


@contextlib.contextmanager
def server_process(*args: str, startup_timeout: float = 20.0) -> Iterator[str]:
    """Start `python -m benchmarks._server *args` on 127.0.0.1; yield its MCP URL; stop it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
    process = subprocess.Popen(
        [sys.executable, "-m", "benchmarks._server", *args],
        cwd=REPO,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        url = _first_url(process, startup_timeout)
        if not url.startswith(f"http://{LOOPBACK}:"):
            raise RuntimeError("the benchmark server is not on loopback")
        yield url
    finally:
        _stop(process)


def _first_url(process: subprocess.Popen[str], timeout: float) -> str:
    lines: queue.Queue[str] = queue.Queue()
    assert process.stdout is not None
    stdout = process.stdout
    threading.Thread(target=lambda: lines.put(stdout.readline()), daemon=True).start()
    try:
        line = lines.get(timeout=timeout)
    except queue.Empty:
        raise RuntimeError("the benchmark server did not start in time") from None
    if not line.startswith("MCP_URL="):
        raise RuntimeError("the benchmark server did not print its URL")
    return line.removeprefix("MCP_URL=").strip()


def _stop(process: subprocess.Popen[str]) -> None:
    with contextlib.suppress(OSError):
        if process.stdin is not None:
            process.stdin.close()  # the server's signal to stop
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=5)
    if process.stdout is not None:
        process.stdout.close()


# -- the OTel pipeline ----------------------------------------------------------------------------


class NoopExporter(SpanExporter):
    """Accepts and drops spans: what the SDK does to make and queue them is the whole cost."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def declared(url: str) -> dict[str, Any]:
    """The benchmarks' declaration: app-authorized, `search` repeated on throttle and network."""
    tools = {"search": {"on": ["throttle", "network"]}}
    return {url: {"policy": "app-authorized", "label": "bench", "tools": tools}}


# -- the machine ----------------------------------------------------------------------------------


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def versions() -> dict[str, str]:
    """Python's and each of MEASURED's version as importlib.metadata reports it ("absent" when it is
    not installed; OPTIONAL ones left out then)."""
    found = {"python": f"{platform.python_version()} ({platform.python_implementation()})"}
    for distribution in MEASURED:
        try:
            found[distribution] = metadata.version(distribution)
        except metadata.PackageNotFoundError:
            if distribution not in OPTIONAL:
                found[distribution] = "absent"
    return found


def machine() -> dict[str, str]:
    load = ""
    with contextlib.suppress(OSError):
        load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    return {
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
        "python speed (sum(range(1000)), best of 50 x 1000)": f"{python_speed_us():.1f} us",
        "cpus (nproc)": str(os.cpu_count()),
        "cpu": cpu_model(),
        "kernel": platform.release(),
        **versions(),
        "load average at start": load,
    }


def python_speed_us() -> float:
    """A yardstick for reading the figures on another machine: `sum(range(1000))`, best of runs
    (about 7-9 us on a recent desktop CPU with CPython 3.11)."""
    return min(per_op_us(lambda: sum(range(1000)), runs=50, loops=1000))


def rss_kib() -> int:
    """This process's resident set size (VmRSS), KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def clean_record(rows: list[AttemptRow]) -> dict[str, Any]:
    """The record of a call that ended with its last row's answer, built as the plugin builds it."""
    return call_record(
        policy="app-authorized",
        sent=len(rows),
        effect="applied",
        verdict="completed",
        may_have_run=False,
        endpoint="billing",
        tool="search",
        request_id="7",
        rows=rows,
        call_round=1,
    )
