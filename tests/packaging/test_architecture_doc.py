"""docs/architecture.md names the package's modules as they are: every module of
src/otel_mcp_replay in its list, and every module the list names in the package."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "otel_mcp_replay"
DOC = ROOT / "docs" / "architecture.md"


def listed() -> set[str]:
    """The modules the rows of the doc's "The modules" tables name, in their first cell (`name.py`,
    `wing/name.py`)."""
    text = DOC.read_text(encoding="utf-8")
    start = text.index("## The modules")
    end = text.index("\n## ", start + 1)
    return set(re.findall(r"^\| `([a-z_/]+\.py)` \|", text[start:end], re.MULTILINE))


def modules() -> set[str]:
    return {path.relative_to(PACKAGE).as_posix() for path in PACKAGE.rglob("*.py")}


def test_every_module_of_the_package_is_named_in_the_doc() -> None:
    assert modules() - listed() == set()


def test_every_module_the_doc_names_exists() -> None:
    assert listed() - modules() == set()


def test_the_doc_lists_a_module_tree_not_nothing() -> None:
    # The two checks above pass on an empty list of an empty tree: both must hold something.
    assert len(listed()) >= 30 and "call.py" in listed() and "redaction/wrappers.py" in listed()
