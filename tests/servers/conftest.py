"""Hooks only: the conformance matrix's table, printed at the end of the run (tests/support/matrix.py
holds it; tests/servers/test_conformance.py fills it)."""

from __future__ import annotations

from typing import Any

import pytest
from tests.support import matrix


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if not matrix.CELLS:
        return
    terminalreporter.section("conformance matrix: servers this project did not write")
    for line in matrix.table():
        terminalreporter.write_line(line)
