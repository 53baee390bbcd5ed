"""Every command block of the README does what the README says it does, run as a newcomer runs it.

Each block the README asks a reader to run is marked `<!-- readme-test: NAME -->` just above it.
The Quick start is run for real: a copy of the repository's files (what a fresh clone holds), the
install block verbatim (a new `.venv` there, `pip install -e '.[instruments]'`: it needs PyPI, as
the test command does), the test server and the agent on 127.0.0.1, and its output checked against
the README's sample: the agent's line, the call's span and record, nothing on stderr, no refused
connection, and the server's own count of executions. The only change made to the blocks is the
port (a free one for 8000, in all three places), so the test never depends on 8000 being free; a
server that finds its port taken all the same is started again on another (`_serving`).

The demo and test command blocks are checked to be the commands the scripts and CI run (running
./scripts/test here would recurse; the demo itself runs in tests/end_to_end).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from harness.ports import PORT_TRIES, free_port, held_port, start_failure, started_on_free_ports, taken_first

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
_MARKED = re.compile(r"<!-- readme-test: (?P<name>[\w.-]+) -->\n```(?P<lang>\w+)\n(?P<body>.*?)\n```", re.S)
README_PORT = "8000"
# Guards against a hang only; a verdict never rests on them.
INSTALL_TIMEOUT_S = 900
RUN_TIMEOUT_S = 120


def blocks() -> dict[str, str]:
    found: dict[str, str] = {}
    for match in _MARKED.finditer(README.read_text(encoding="utf-8")):
        assert match["name"] not in found, f"two README blocks named {match['name']}"
        found[match["name"]] = match["body"]
    return found


def test_every_marked_block_is_found() -> None:
    # A marker the pattern no longer reaches (a changed fence, a blank line) would skip its check.
    text = README.read_text(encoding="utf-8")
    assert text.count("<!-- readme-test: ") == len(blocks())
    assert set(blocks()) >= {"install", "server", "agent.py", "run", "output", "declaration", "demo", "test"}


def _fresh_clone(dest: Path) -> Path:
    """The files a clone of this repository holds (tracked, and new ones not ignored), copied."""
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():  # a tracked file deleted in the work tree is not in a clone either
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return dest


def _shell_environment() -> dict[str, str]:
    """A newcomer's shell: no virtual environment active, no OpenTelemetry or plugin settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYTHON"))}
    active = env.pop("VIRTUAL_ENV", None)
    bin_dirs = {str(Path(sys.executable).parent)} | ({str(Path(active) / "bin")} if active else set())
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p not in bin_dirs)
    return env


def _bash(script: str, cwd: Path, timeout: float, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=cwd,
        env=_shell_environment(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        **kw,
    )


def _json_objects(text: str) -> list[dict[str, Any]]:
    """The console exporter's output: JSON objects one after another."""
    decoder = json.JSONDecoder()
    found: list[dict[str, Any]] = []
    at = text.find("{")
    while at != -1:
        value, end = decoder.raw_decode(text, at)
        found.append(value)
        at = text.find("{", end)
    return found


def test_the_declaration_key_is_the_url_the_agent_connects_to() -> None:
    found = blocks()
    servers = re.search(r"OTEL_PYTHON_MCP_REPLAY_SERVERS='(.*)'", found["run"])
    assert servers is not None
    (key,) = json.loads(servers[1])
    assert f'Client("{key}")' in found["agent.py"]
    assert key == f"http://127.0.0.1:{README_PORT}/mcp"
    assert f"--port {README_PORT}" in found["server"]


def _on_port(text: str, port: str) -> str:
    """`text` with the README's port moved to `port`, in every place it appears."""
    moved = text.replace(f"127.0.0.1:{README_PORT}", f"127.0.0.1:{port}").replace(
        f"--port {README_PORT}", f"--port {port}"
    )
    assert README_PORT not in moved, "the README's port appears somewhere this test does not move"
    return moved


def _serving(server_block: str, cwd: Path) -> tuple[subprocess.Popen[str], str]:
    """The README's server block run on a free port, once it printed its URL (it binds its port
    first): the process and the port. A server that exits instead, its port taken by another
    process of the run meanwhile, is started again on a fresh one (ports.started_on_free_ports)."""

    def start() -> tuple[subprocess.Popen[str], str]:
        port = str(free_port())
        server = subprocess.Popen(
            ["bash", "-euo", "pipefail", "-c", _on_port(server_block, port)],
            cwd=cwd,
            env=_shell_environment(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        first_line: list[str] = []
        reader = threading.Thread(target=lambda: first_line.append(server.stdout.readline()), daemon=True)  # type: ignore[union-attr]
        reader.start()
        reader.join(RUN_TIMEOUT_S)
        if first_line != [f"MCP_URL=http://127.0.0.1:{port}/mcp\n"]:
            # The server serves until its stdin closes: closed, it exits, if it had not already.
            _, said = server.communicate(input="", timeout=RUN_TIMEOUT_S)
            raise start_failure(f"the README's server (its first line {first_line})", server.returncode, said)
        return server, port

    return started_on_free_ports(start)


@pytest.mark.timeout(INSTALL_TIMEOUT_S + (PORT_TRIES + 1) * RUN_TIMEOUT_S)
def test_the_quick_start_runs_as_written_from_a_fresh_clone(tmp_path: Path) -> None:
    found = blocks()
    clone = _fresh_clone(tmp_path / "clone")
    installed = _bash(found["install"], clone, INSTALL_TIMEOUT_S)
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    activate = f". {clone}/.venv/bin/activate\n"

    server, port = _serving(found["server"], clone)

    def on_port(text: str) -> str:
        return _on_port(text, port)

    try:
        work = tmp_path / "agent"
        work.mkdir()
        (work / "agent.py").write_text(on_port(found["agent.py"]) + "\n", encoding="utf-8")
        ran = _bash(activate + on_port(found["run"]), work, RUN_TIMEOUT_S)
    finally:
        # The server serves until its stdin closes; then it prints its own count and exits.
        server_out, server_err = server.communicate(input="", timeout=RUN_TIMEOUT_S)

    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    # No refused connection, and no line on stderr at all: the README says it prints none.
    assert "refused" not in (ran.stdout + ran.stderr).lower()
    assert ran.stderr.strip() == "", ran.stderr
    agent_line, _, exported = ran.stdout.partition("\n")
    assert agent_line == "3 results for 'invoices due in march'"

    spans = _json_objects(exported)
    calls = [s for s in spans if s.get("name") == "tools/call search"]
    assert len(calls) == 1, [s.get("name") for s in spans]
    (call,) = calls
    sample = json.loads(on_port(found["output"]))
    assert sample["name"] == call["name"]
    (sample_record,) = sample["events"]
    records = [e for e in call["events"] if e["name"] == sample_record["name"]]
    assert len(records) == 1
    for key, value in sample_record["attributes"].items():
        assert records[0]["attributes"].get(key) == value, key
    # The span's kind and call-level attributes are the contract's: a CLIENT span carrying the
    # outcome, read exactly as the sample shows it, with one POST span under it per attempt.
    assert call["kind"] == sample["kind"] == "SpanKind.CLIENT"
    for key, value in sample["attributes"].items():
        assert call["attributes"].get(key) == value, key
    posts = [s for s in spans if s.get("name") == "POST" and s.get("parent_id") == call["context"]["span_id"]]
    # In the HTTP instrumentation's default vocabulary (OTEL_SEMCONV_STABILITY_OPT_IN unset): the old names.
    assert [p["attributes"]["http.status_code"] for p in posts] == [429, 200]

    # The server's own count: the 429 came before the tool ran, the repeat ran it once.
    assert server.returncode == 0, server_err
    assert "executions: search=1 " in server_err, server_err
    assert server_out == ""


def test_a_readme_server_whose_port_was_taken_serves_on_a_fresh_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The server block as written, run where `.venv` is this environment and `harness` the repository's.
    if not (Path(sys.prefix) / "bin" / "activate").exists():
        pytest.skip("needs a virtual environment (the README's block activates .venv)")
    (tmp_path / ".venv").symlink_to(sys.prefix, target_is_directory=True)
    (tmp_path / "harness").symlink_to(ROOT / "harness", target_is_directory=True)
    with held_port() as taken:
        port, named = taken_first(taken)
        monkeypatch.setattr(sys.modules[__name__], "free_port", port)
        server, served = _serving(blocks()["server"], tmp_path)
        out, err = server.communicate(input="", timeout=RUN_TIMEOUT_S)
    # Its first start found the port taken and exited; the second serves on the port named next.
    assert len(named) == 2 and served == str(named[1]) != str(taken)
    assert server.returncode == 0, err
    assert "executions: search=0 " in err, err
    assert out == ""  # its URL was its only line


def test_the_declaration_block_is_accepted_as_written() -> None:
    code = blocks()["declaration"] + "\nMcpReplayInstrumentor().uninstrument()\nprint('ok')\n"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False
    )
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr
    assert done.stderr == ""


def test_the_demo_block_is_the_demo_script() -> None:
    assert blocks()["demo"] == "./scripts/demo"
    script = (ROOT / "scripts" / "demo").read_text(encoding="utf-8")
    assert os.access(ROOT / "scripts" / "demo", os.X_OK)
    # What tests/end_to_end runs as the demo is what the script runs.
    assert script.rstrip().endswith('exec .venv/bin/python -m harness.run "$@"')


def test_the_test_block_is_exactly_what_ci_runs() -> None:
    assert blocks()["test"] == "./scripts/test"
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    commands = [line for line in ci if line.strip() and not line.startswith("#")]
    # From a clean environment: every virtual environment removed, then the README's command.
    assert commands[-2:] == ["rm -rf .venv .venv-*", "exec ./scripts/test"]
    assert "set -euo pipefail" in commands
