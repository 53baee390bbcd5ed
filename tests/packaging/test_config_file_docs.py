"""The configuration-file docs say what the code reads: docs/config-file.md's whole `mcp_replay`
section and examples/otel-config.yaml load with opentelemetry-configuration's own loader, name every
option `instrument()` takes from a file, and pass the plugin's check without an error."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
from tests.support.autoinstrument import needs_config_file

from otel_mcp_replay.config import configuration_of
from otel_mcp_replay.config_file import OPTION_NAMES, SECTION

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "config-file.md"
EXAMPLE = ROOT / "examples" / "otel-config.yaml"

pytestmark = needs_config_file


def the_docs_section(tmp_path: Path) -> Path:
    (block,) = [b for b in re.findall(r"```yaml\n(.*?)```", DOC.read_text(), re.S) if f"{SECTION}:" in b]
    path = tmp_path / "otel.yaml"
    path.write_text(block)
    return path


@pytest.mark.parametrize("which", ["docs", "example"])
def test_the_documented_file_loads_and_passes_the_plugins_check(
    which: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from opentelemetry.configuration import load_config_file

    path = the_docs_section(tmp_path) if which == "docs" else EXAMPLE
    loaded = load_config_file(str(path))  # the SDK's own loader: schema-valid
    section = loaded.instrumentation_development.python[SECTION]
    if which == "docs":
        assert set(OPTION_NAMES) | {"enabled"} == set(section)  # the whole section, nothing else
    with caplog.at_level(logging.WARNING):
        got = configuration_of({}, {"OTEL_CONFIG_FILE": str(path)})
    assert caplog.records == [] and not got.fail_closed and got.enabled
    assert len(got.servers) >= 1
