"""The conformance matrix's cases, what a caller got from each, the record each should file, and the
table of every cell (printed at the end of the run by tests/servers/conftest.py)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import astuple, dataclass
from typing import Any, Final

import anyio

from harness.client import Client, McpError, is_error
from otel_mcp_replay import telemetry as t

if sys.version_info < (3, 11):  # pragma: no cover - Python 3.10
    from exceptiongroup import BaseExceptionGroup

CLEAN: Final = "clean"
THROTTLE: Final = "429-then-200"
CUT_BEFORE: Final = "cut-before"
CUT_AFTER: Final = "cut-after+repeat"
TOOL_ERROR: Final = "isError"
RPC_ERROR: Final = "jsonrpc-error"
LARGE: Final = "large"
CASES: Final = (CLEAN, THROTTLE, CUT_BEFORE, CUT_AFTER, TOOL_ERROR, RPC_ERROR, LARGE)
# The large answer: under the mcp client's 1 MiB cap on one SSE event (which it refuses whoever sent
# it), the JSON-RPC framing included, and fastmcp's legacy era sending the text twice in one event.
LARGE_SIZE: Final = 450_000
HANG_GUARD_S: Final = 60.0  # a guard on a hang, never a verdict

# The tool each case calls, and the executions the server counts: (plain, instrumented). Plain, a
# 429 or a cut before the request arrived runs nothing; a cut after it ran, then a blind repeat on a
# new client, runs it twice; instrumented, the repeat guard refuses that repeat.
TOOL: Final = {
    CLEAN: "search",
    THROTTLE: "search",
    CUT_BEFORE: "search",
    CUT_AFTER: "charge",
    TOOL_ERROR: "fail",
    RPC_ERROR: "reject",
    LARGE: "bulk",
}
EXECUTIONS: Final = {
    CLEAN: (1, 1),
    THROTTLE: (0, 1),
    CUT_BEFORE: (0, 1),
    CUT_AFTER: (2, 1),
    TOOL_ERROR: (1, 1),
    RPC_ERROR: (1, 1),
    LARGE: (1, 1),
}
# The cases whose plain outcome is the server's own answer: there the instrumented caller gets the same.
PLAIN_WORKS: Final = (CLEAN, TOOL_ERROR, RPC_ERROR, LARGE)


def declaration(url: str, policy: str = "app-authorized") -> dict[str, Any]:
    """`search` may be repeated on a 429 or a cut; `charge` changes things."""
    tools = {"search": {"on": ["throttle", "network"]}, "charge": {"changes": True}}
    return {url: {"policy": policy, "tools": tools}}


def arguments(case: str, tag: int) -> dict[str, Any]:
    """The call's arguments; `tag` makes them the cell's own (the repeat guard remembers arguments)."""
    tool = TOOL[case]
    if tool == "search":
        return {"query": f"q{tag}"}
    if tool == "charge":
        return {"amount": tag}
    if tool == "bulk":
        return {"size": LARGE_SIZE}
    return {}


# What one record must say: (sent, call effect, verdict, may_have_run, statuses, failures). ANSWERED
# stands for the status the plain caller's HTTP client saw for the same call (a server may answer a
# JSON-RPC error with a 4xx on 2026-07-28): the record says what came, whatever it is.
ANSWERED: Final = -1
_Facts = tuple[int, str, str, bool, tuple[int, ...], tuple[str, ...]]
RECORDS: Final[Mapping[str, tuple[_Facts, ...]]] = {
    CLEAN: ((1, "applied", "completed", False, (ANSWERED,), ("",)),),
    # A 429 is no proof the tool did not run: the call's effect stays unknown (the law).
    THROTTLE: ((2, "unknown", "completed", False, (429, 200), ("throttle", "")),),
    CUT_BEFORE: ((2, "unknown", "completed", False, (0, 200), ("network", "")),),
    CUT_AFTER: (
        (1, "unknown", "failed", True, (0,), ("network",)),
        (0, "none", "failed", False, (), ()),  # the blind repeat, refused before sending
    ),
    TOOL_ERROR: ((1, "applied", "tool-error", False, (ANSWERED,), ("",)),),
    RPC_ERROR: ((1, "unknown", "failed", False, (ANSWERED,), ("error",)),),
    LARGE: ((1, "applied", "completed", False, (ANSWERED,), ("",)),),
}
_KEYS: Final = (t.SENT, t.EFFECT, t.VERDICT, t.MAY_HAVE_RUN, t.ATTEMPTS_STATUS, t.ATTEMPTS_FAILURE)
_SHORT: Final = ("sent", "effect", "verdict", "may_have_run", "statuses", "failures")


def record_errors(case: str, found: list[dict[str, Any]], answered: list[int]) -> list[str]:
    """What the records of one instrumented run say that they should not (empty: every one true).
    `answered`: the statuses of the tools/call POSTs the plain caller's HTTP client saw."""
    expected = RECORDS[case]
    if len(found) != len(expected):
        return [f"{len(found)} records, expected {len(expected)}"]
    errors = []
    for index, (record, facts) in enumerate(zip(found, expected, strict=True)):
        for key, short, want in zip(_KEYS, _SHORT, facts, strict=True):
            if want == (ANSWERED,):
                want = tuple(answered)
            got = record.get(key, ())
            if (tuple(got) if isinstance(got, (list, tuple)) else got) != want:
                errors.append(f"#{index + 1} {short}={_show(got)} (expected {_show(want)})")
    return errors


def facts(found: list[dict[str, Any]]) -> str:
    """The records' facts in a few words: sent, effect, verdict, may_have_run (when true), statuses."""
    return " / ".join(
        f"{r.get(t.SENT)} sent {r.get(t.EFFECT)} {r.get(t.VERDICT)}"
        + (" may-have-run" if r.get(t.MAY_HAVE_RUN) else "")
        + f" {_show(r.get(t.ATTEMPTS_STATUS, ()))}"
        for r in found
    )


def _show(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(str(v) for v in value) + "]"
    return str(value)


@dataclass(frozen=True)
class Outcome:
    """What a caller got: a result (its text's digest), a tool error, an error raised by the call
    (its class and JSON-RPC code), or the session torn down around it (its leaf exceptions)."""

    kind: str
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.kind} {self.detail}".strip()


def result_outcome(result: Any) -> Outcome:
    text = "".join(getattr(block, "text", "") for block in result.content)
    digest = f"{text[:16]}..({len(text)})" if len(text) > 24 else text
    return Outcome("isError" if is_error(result) else "result", digest)


def error_outcome(exc: BaseException) -> Outcome:
    if isinstance(exc, BaseExceptionGroup):
        return Outcome("torn-down", "+".join(sorted({type(leaf).__name__ for leaf in _leaves(exc)})))
    code = exc.error.code if isinstance(exc, McpError) else None
    return Outcome(type(exc).__name__, "" if code is None else str(code))


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    out: list[BaseException] = []
    for exc in group.exceptions:
        out.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return out


async def call_once(url: str, era: str, tool: str, args: dict[str, Any]) -> Outcome:
    """One call on a new client, and what its caller got (the session's own teardown included)."""
    with anyio.fail_after(HANG_GUARD_S):
        try:
            async with Client(url, mode=era) as client:
                try:
                    return result_outcome(await client.call_tool(tool, args))
                except Exception as exc:
                    return error_outcome(exc)
        except (Exception, BaseExceptionGroup) as exc:
            return error_outcome(exc)


@dataclass(frozen=True)
class Cell:
    server: str
    version: str
    mode: str
    era: str
    case: str
    plain: str
    instrumented: str
    executions: str
    record: str


HEADINGS: Final = Cell(
    "server", "version", "mode", "era", "case", "plain", "instrumented", "executions", "record"
)
CELLS: list[Cell] = []


def table() -> list[str]:
    """The matrix as a plain text table, one line per cell, in the order they ran."""
    rows = [astuple(HEADINGS), *map(astuple, CELLS)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return [
        "  ".join(v.ljust(w) for v, w in zip(row[:-1], widths, strict=True)) + "  " + row[-1] for row in rows
    ]
