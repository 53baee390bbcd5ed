"""A pytest plugin loaded in every run of the SDK's suite: each test report, as it happens, one JSON
line appended to `$SDK_SUITE_OUTCOMES`.

Written as the run goes (not at its end, as --junitxml is), so a run the driver had to kill for its
global timeout still says which tests passed before the hang, and which one was running. Under
pytest-xdist only the controller writes: it sees every worker's reports.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

_TAIL_LINES = 30  # the failure's text kept: its last lines hold the assertion and the raise site


def _crash(report: pytest.TestReport) -> dict[str, Any] | None:
    """Where and why a failed phase failed: pytest's crash line and the tail of its report."""
    if report.passed or report.skipped:
        return None
    crash = getattr(report.longrepr, "reprcrash", None)
    text = report.longreprtext.splitlines()
    return {
        "where": f"{crash.path}:{crash.lineno}" if crash is not None else "",
        "message": crash.message if crash is not None else (text[-1] if text else ""),
        "tail": text[-_TAIL_LINES:],
    }


class _Outcomes:
    def __init__(self, path: str) -> None:
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 (open for the whole session)

    def _write(self, entry: dict[str, Any]) -> None:
        self._file.write(json.dumps(entry) + "\n")
        self._file.flush()  # a killed run keeps every line written before the kill

    @pytest.hookimpl
    def pytest_runtest_logstart(self, nodeid: str) -> None:
        self._write({"nodeid": nodeid, "when": "start"})

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self._write(
            {
                "nodeid": report.nodeid,
                "when": report.when,
                "outcome": report.outcome,
                "xfail": hasattr(report, "wasxfail"),
                "duration": round(report.duration, 3),
                "crash": _crash(report),
            }
        )

    @pytest.hookimpl
    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:  # a module that cannot even be imported: its tests never run
            text = report.longreprtext.splitlines()
            self._write(
                {
                    "nodeid": report.nodeid,
                    "when": "collect",
                    "outcome": "failed",
                    "crash": {
                        "where": report.nodeid,
                        "message": text[-1] if text else "",
                        "tail": text[-10:],
                    },
                }
            )

    def close(self) -> None:
        self._file.close()


def pytest_configure(config: pytest.Config) -> None:
    path = os.environ.get("SDK_SUITE_OUTCOMES")
    if not path or hasattr(config, "workerinput"):  # an xdist worker: its controller writes
        return
    config.pluginmanager.register(_Outcomes(path), "sdk_suite_outcomes_writer")


def pytest_unconfigure(config: pytest.Config) -> None:
    writer = config.pluginmanager.get_plugin("sdk_suite_outcomes_writer")
    if writer is not None:
        writer.close()
