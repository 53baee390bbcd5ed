"""Configuration that must never hurt the host app, nor echo what it holds.

- F10: OTEL_PYTHON_MCP_REPLAY_CONFIG naming a FIFO, a device, a directory or a huge file is refused
  at once (never a hang, never an unbounded read), with an ERROR naming the variable, not the path.
- The environment's numbers are ASCII digits; OTEL_PYTHON_MCP_REPLAY_SERVERS=null is an error; a
  config file may open with a UTF-8 byte-order mark.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import otel_mcp_replay
from otel_mcp_replay import environment_variables as ev
from otel_mcp_replay.config import configuration_of

CANARY = "CANARY-cfg-93d0"
CONFIG = ev.OTEL_PYTHON_MCP_REPLAY_CONFIG
SERVERS = ev.OTEL_PYTHON_MCP_REPLAY_SERVERS
ENDPOINT = "http://127.0.0.1:9/mcp"
DECLARED = {"servers": {ENDPOINT: {"policy": "app-authorized", "label": "bom"}}}


@pytest.fixture
def errors(caplog: pytest.LogCaptureFixture) -> Iterator[Callable[[], str]]:
    with caplog.at_level(logging.DEBUG, logger="otel_mcp_replay"):
        yield lambda: "\n".join(r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR)


def refused(environ: dict[str, str], errors: Callable[[], str], variable: str) -> str:
    resolved = configuration_of({}, environ)
    logged = errors()
    assert resolved.fail_closed, "not fail-closed"
    assert variable in logged, logged
    assert CANARY not in logged
    return logged


# --- F10: the config file ------------------------------------------------------------------------


def resolve_within(environ: dict[str, str], seconds: float) -> bool:
    """Whether configuration_of(environ) returned within `seconds` (it runs in a daemon thread)."""
    done = threading.Event()

    def run() -> None:
        with contextlib.suppress(Exception):
            configuration_of({}, environ)
        done.set()

    threading.Thread(target=run, daemon=True).start()
    return done.wait(seconds)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path, errors: Callable[[], str]) -> None:
    fifo = tmp_path / f"{CANARY}.json"
    os.mkfifo(fifo)
    environ = {CONFIG: str(fifo)}
    try:
        assert resolve_within(environ, 10.0), "start-up waits on a FIFO"
    finally:
        # Free a reader left blocked in open() (the bug): a writer that opens and closes ends it.
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    assert "regular file" in refused(environ, errors, CONFIG)


def test_a_directory_is_refused(tmp_path: Path, errors: Callable[[], str]) -> None:
    folder = tmp_path / f"{CANARY}.json"
    folder.mkdir()
    assert "regular file" in refused({CONFIG: str(folder)}, errors, CONFIG)


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero here")
def test_an_endless_device_is_refused_at_once() -> None:
    """In a child process with its address space capped, so the old unbounded read fails fast."""
    code = (
        "import logging, resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
        "logging.basicConfig(stream=sys.stdout, level=logging.ERROR)\n"
        "from otel_mcp_replay.config import configuration_of\n"
        f"print('fail-closed', configuration_of({{}}, {{{CONFIG!r}: '/dev/zero'}}).fail_closed)\n"
    )
    source = str(Path(otel_mcp_replay.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([source, os.environ.get("PYTHONPATH", "")])}
    # The timeout guards against a read that never ends (/dev/zero): a hang, not a speed check.
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "fail-closed True" in done.stdout
    assert CONFIG in done.stdout and "regular file" in done.stdout, done.stdout


def test_a_file_over_one_mib_is_refused_and_one_at_the_cap_is_read(
    tmp_path: Path, errors: Callable[[], str]
) -> None:
    text = json.dumps(DECLARED)
    at_cap = tmp_path / "at-cap.json"
    at_cap.write_text(text + " " * (1024 * 1024 - len(text)))
    resolved = configuration_of({}, {CONFIG: str(at_cap)})
    assert not resolved.fail_closed, errors()
    assert len(resolved.servers) == 1
    over = tmp_path / f"{CANARY}.json"
    over.write_text(text + " " * (1024 * 1024 + 1 - len(text)))
    assert "1 MiB" in refused({CONFIG: str(over)}, errors, CONFIG)


def test_a_toml_key_of_many_parts_is_refused_before_the_parser_reads_it(
    tmp_path: Path, errors: Callable[[], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The TOML parsers' work on one dotted key grows with the square of its parts: 100,000 parts in
    # 200 kB (under the 1 MiB cap) would exhaust memory. Refused before any parser is asked.
    from otel_mcp_replay import config as config_module

    parsed: list[str] = []
    real_loads = config_module.tomllib.loads
    monkeypatch.setattr(config_module.tomllib, "loads", lambda text: parsed.append(text) or real_loads(text))
    hostile = tmp_path / f"{CANARY}.toml"
    hostile.write_text("[servers]\n" + "a." * 100_000 + "b = 1\n")
    assert "more than 32 dots" in refused({CONFIG: str(hostile)}, errors, CONFIG)
    assert parsed == []
    # A declaration's lines, with their URLs' dots, are read as before.
    fine = tmp_path / "servers.toml"
    fine.write_text('[servers."http://a.b.c.d.example.com:1/mcp".tools.search]\non = ["throttle"]\n')
    resolved = configuration_of({}, {CONFIG: str(fine)})
    assert not resolved.fail_closed, errors()
    assert len(parsed) == 1


def test_a_missing_file_is_refused_without_its_path(tmp_path: Path, errors: Callable[[], str]) -> None:
    refused({CONFIG: str(tmp_path / f"{CANARY}.toml")}, errors, CONFIG)
    refused({CONFIG: f"/tmp/{CANARY}\0.json"}, errors, CONFIG)


# --- a byte-order mark, null, and digits -----------------------------------------------------------


@pytest.mark.parametrize("suffix", [".json", ".toml"])
def test_a_config_file_may_open_with_a_byte_order_mark(
    tmp_path: Path, suffix: str, errors: Callable[[], str]
) -> None:
    path = tmp_path / f"servers{suffix}"
    if suffix == ".json":
        path.write_text(json.dumps(DECLARED), encoding="utf-8-sig")
    else:
        path.write_text(f'[servers."{ENDPOINT}"]\npolicy = "app-authorized"\n', encoding="utf-8-sig")
    resolved = configuration_of({}, {CONFIG: str(path)})
    assert not resolved.fail_closed, errors()
    assert resolved.servers.declaration_for(ENDPOINT).policy == "app-authorized"


@pytest.mark.parametrize("text", ["null", " null "])
def test_servers_null_is_an_error_naming_the_variable(text: str, errors: Callable[[], str]) -> None:
    refused({SERVERS: text}, errors, SERVERS)


def test_servers_null_in_a_config_file_is_an_error(tmp_path: Path, errors: Callable[[], str]) -> None:
    path = tmp_path / "servers.json"
    path.write_text('{"servers": null}')
    assert "servers" in refused({CONFIG: str(path)}, errors, CONFIG)


@pytest.mark.parametrize("digits", ["\uff15", "\u0663", "\u06f3", "\u0969", "1\uff15", "\uff11\uff10"])
@pytest.mark.parametrize(
    "variable", [ev.OTEL_PYTHON_MCP_REPLAY_MAX_ATTEMPTS, ev.OTEL_PYTHON_MCP_REPLAY_MAX_WAIT_MS]
)
def test_numbers_are_ascii_digits_only(variable: str, digits: str, errors: Callable[[], str]) -> None:
    refused({variable: digits}, errors, variable)


def test_true_and_false_are_ascii_words_only(errors: Callable[[], str]) -> None:
    refused(
        {ev.OTEL_PYTHON_MCP_REPLAY_RETRY_ON_THROTTLE: "\uff54\uff52\uff55\uff45"},
        errors,
        ev.OTEL_PYTHON_MCP_REPLAY_RETRY_ON_THROTTLE,
    )
