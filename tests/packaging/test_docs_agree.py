"""The docs say what the code does: a limit told in docs/limits.md uses the law's own word, and
docs/frameworks.md tells how to keep a framework's OpenTelemetry pin."""

from __future__ import annotations

import re
from pathlib import Path

from otel_mcp_replay.evidence import classify
from otel_mcp_replay.telemetry import FAILURES

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _bullet(text: str, *words: str) -> str:
    """The one bullet of a markdown list that holds every word (its continuation lines included)."""
    bullets = re.split(r"\n(?=- )", text)
    found = [b for b in bullets if all(w in b for w in words)]
    assert len(found) == 1, f"expected one bullet holding {words}, found {len(found)}"
    return found[0]


def test_limits_name_a_2xx_stream_without_its_answer_by_the_laws_word() -> None:
    ended = classify(200, None).after_stream(None)  # a 2xx stream that ended without its answer
    assert ended.failure is not None
    bullet = _bullet((DOCS / "limits.md").read_text(), "2xx", "ends without the answer")
    named = {word for word in FAILURES if f"`{word}`" in bullet and f"never `{word}`" not in bullet}
    assert named == {ended.failure}, named
    assert f"`{ended.effect}`" in bullet


def test_frameworks_tell_how_to_keep_a_pinned_opentelemetry() -> None:
    text = (DOCS / "frameworks.md").read_text()
    section = text.split("## Beside a framework that pins OpenTelemetry", 1)
    assert len(section) == 2, "docs/frameworks.md: no section on a framework that pins OpenTelemetry"
    body = section[1].split("\n## ", 1)[0]
    commands = [line for line in body.splitlines() if line.startswith("pip install ")]
    assert any("google-adk" in line and "otel-mcp-replay" in line for line in commands)  # one command
    assert "25.1" in body and "pip check" in body
