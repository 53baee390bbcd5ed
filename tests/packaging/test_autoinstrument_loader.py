"""A configuration error found in the environment, under `opentelemetry-instrument`: the app runs,
the error is logged at ERROR naming the variable and never its value, the plugin runs fail-closed
(a 429 is not repeated), and an instrumentor that the loader reaches after ours still loads.

The loader (`opentelemetry.instrumentation.auto_instrumentation._load._load_instrumentors`) walks
the `opentelemetry_instrumentor` entry points in `importlib.metadata` order: `sys.path` order, then
directory order within one entry. A non-ImportError raised by one instrumentor stops the walk. So
the probe, a throwaway distribution with its own entry point, must sit on a `sys.path` entry AFTER
the project's site-packages; PYTHONPATH would put it before. The test builds a throwaway virtual
environment whose `.pth` file adds the project's site-packages and then the probe's directory, and
the probe writes down the entry-point order it saw and whether mcp_replay had already loaded.
The same `.pth` file configures logging with level names, so the level of our message is visible.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import sysconfig
import textwrap
import venv
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.faults import FaultPlan, Throttle
from harness.receiver import OtlpReceiver
from harness.run import records_received
from harness.server import ServerHandle, running_server
from otel_mcp_replay import environment_variables as ev
from otel_mcp_replay import telemetry as t

pytestmark = pytest.mark.timeout(90)

BIN = Path(sys.executable).parent
AGENT = Path(__file__).resolve().parents[2] / "examples" / "agent.py"
CANARY = "Canary-6b1d-VALUE"

PROBE = textwrap.dedent(
    """
    import json
    import os

    from opentelemetry.instrumentation.instrumentor import BaseInstrumentor
    from opentelemetry.util._importlib_metadata import entry_points


    class Probe(BaseInstrumentor):
        def instrumentation_dependencies(self):
            return ()

        def _instrument(self, **kwargs):
            from otel_mcp_replay import McpReplayInstrumentor

            report = {
                "order": [ep.name for ep in entry_points(group="opentelemetry_instrumentor")],
                "mcp_replay_loaded": McpReplayInstrumentor().is_instrumented_by_opentelemetry,
            }
            with open(os.environ["ZZ_PROBE_MARKER"], "w") as marker:
                json.dump(report, marker)

        def _uninstrument(self, **kwargs):
            pass
    """
)


@dataclass(frozen=True)
class Interpreter:
    python: Path  # a python whose sys.path ends: project site-packages, then the probe


@pytest.fixture(scope="module")
def interpreter(tmp_path_factory: pytest.TempPathFactory) -> Interpreter:
    root = tmp_path_factory.mktemp("loader")
    probe = root / "probe"
    info = probe / "zz_probe-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: zz-probe\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[opentelemetry_instrumentor]\nzz_probe = zz_probe:Probe\n")
    (probe / "zz_probe.py").write_text(PROBE)

    env_dir = root / "venv"
    venv.EnvBuilder(with_pip=False, symlinks=os.name != "nt").create(env_dir)
    python = env_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    site_packages = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout.strip()
    project_site = sysconfig.get_paths()["purelib"]  # this test's environment: mcp, otel, the plugin
    (Path(site_packages) / "zz_loader_probe.pth").write_text(
        f"import site; site.addsitedir({project_site!r})\n"
        "import logging; logging.basicConfig(format='%(levelname)s %(name)s: %(message)s')\n"
        f"{probe}\n"
    )
    return Interpreter(python)


@pytest.fixture
def server() -> Iterator[ServerHandle]:
    with running_server("streamable", fault_plan=FaultPlan().add("search", Throttle("0"))) as handle:
        yield handle


@dataclass
class Outcome:
    done: subprocess.CompletedProcess[str]
    probe: dict[str, object]
    records: list[dict[str, object]]
    attempts: list[dict[str, object]]


def run_agent(interpreter: Interpreter, server: ServerHandle, tmp_path: Path, **variables: str) -> Outcome:
    marker = tmp_path / "probe.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.pop("PYTHONPATH", None)
    with OtlpReceiver() as receiver:
        env.update(
            {
                "OTEL_PYTHON_CONFIGURATOR": "mcp_replay",
                "OTEL_SERVICE_NAME": "loader-test",
                "OTEL_TRACES_EXPORTER": "otlp",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": receiver.traces_endpoint,
                "OTEL_METRICS_EXPORTER": "none",
                "OTEL_LOGS_EXPORTER": "none",
                "OTEL_BSP_SCHEDULE_DELAY": "100",
                "MCP_DEMO_URL": server.url,
                "ZZ_PROBE_MARKER": str(marker),
                **variables,
            }
        )
        done = subprocess.run(
            [str(BIN / "opentelemetry-instrument"), str(interpreter.python), str(AGENT)],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        receiver.wait_for(lambda spans: records_received(spans) >= 3, timeout=10)
        spans = receiver.spans()
    return Outcome(
        done=done,
        probe=json.loads(marker.read_text()) if marker.exists() else {},
        records=[e["attributes"] for s in spans for e in s["events"] if e["name"] == t.RECORD_EVENT],
        attempts=[s["attributes"] for s in spans if t.ATTEMPT in s["attributes"]],
    )


def test_the_probe_loads_after_mcp_replay_when_nothing_is_wrong(
    interpreter: Interpreter, server: ServerHandle, tmp_path: Path
) -> None:
    """The control: the probe really is reached after ours, and a valid config repeats the 429."""
    outcome = run_agent(interpreter, server, tmp_path, **{ev.OTEL_PYTHON_MCP_REPLAY_SERVERS: "{}"})
    assert outcome.done.returncode == 0, outcome.done.stderr[-3000:]
    order = outcome.probe["order"]
    assert isinstance(order, list) and order.index("mcp_replay") < order.index("zz_probe"), order
    assert outcome.probe["mcp_replay_loaded"] is True
    assert server.counters.tool_posts("search") == 2  # compatibility repeats a 429
    assert "ERROR otel_mcp_replay" not in outcome.done.stderr


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        (ev.OTEL_PYTHON_MCP_REPLAY_SERVERS, "{bad json " + CANARY),
        (ev.OTEL_PYTHON_MCP_REPLAY_SERVERS, json.dumps({"http://127.0.0.1:1/mcp": {"policy": CANARY}})),
        (ev.OTEL_PYTHON_MCP_REPLAY_MAX_ATTEMPTS, "3" + CANARY),
    ],
    ids=["servers-not-json", "servers-unknown-policy", "max-attempts-not-a-number"],
)
def test_a_configuration_error_in_the_environment_is_logged_and_the_plugin_runs_fail_closed(
    interpreter: Interpreter, server: ServerHandle, tmp_path: Path, variable: str, value: str
) -> None:
    outcome = run_agent(interpreter, server, tmp_path, **{variable: value})
    stderr = outcome.done.stderr
    # The app never crashed: every call was made, the later ones answered.
    assert outcome.done.returncode == 0, stderr[-3000:]
    lines = outcome.done.stdout.splitlines()
    assert len(lines) == 3 and "-> MCPError" in lines[0] and "-> ok" in lines[1] and "-> ok" in lines[2]
    # Logged at ERROR, naming the variable, never the value.
    assert re.search(rf"^ERROR otel_mcp_replay[\w.]*: .*{variable}", stderr, re.MULTILINE), stderr[-3000:]
    assert CANARY not in stderr and CANARY not in outcome.done.stdout
    # Fail-closed: the 429 is not repeated, though compatibility would have repeated it.
    assert server.counters.tool_posts("search") == 1
    assert server.counters.executions("search") == 0
    # Spans still record what happened.
    search = [r for r in outcome.records if r[t.GEN_AI_TOOL_NAME] == "search"]
    assert len(search) == 1 and search[0][t.SENT] == 1 and search[0][t.VERDICT] == "failed"
    assert search[0][t.ATTEMPTS_STATUS] == [429]
    (attempt,) = [a for a in outcome.attempts if a[t.GEN_AI_TOOL_NAME] == "search"]
    assert attempt[t.FAILURE] == "throttle" and t.DECLINED in attempt
    # The loader went on: no instrumentor failed, and the probe after ours loaded.
    assert "Instrumenting of" not in stderr and "Failed to auto initialize" not in stderr
    order = outcome.probe.get("order")
    assert isinstance(order, list) and order.index("mcp_replay") < order.index("zz_probe"), order
    assert outcome.probe["mcp_replay_loaded"] is True
