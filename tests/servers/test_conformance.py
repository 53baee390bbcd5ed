"""The conformance matrix: the law against MCP servers this project did not write (issue 40).

Each cell is one server in one mode (harness/conformance.py's MATRIX: the TypeScript SDK 1.x and
v2, the Go SDK, rmcp, fastmcp and the Java SDK, each in its modes, and nginx gzipping in front of
some), one protocol era it speaks, and one case: a clean call, a 429 then a 200, a cut before the request
arrived, a cut after the tool ran then a blind repeat on a new client, a tool error (`isError`), the
server's JSON-RPC error, a large answer. The case runs plain (no plugin), then instrumented
(app-authorized, `search` declared repeatable on a throttle or a cut, `charge` declared changing),
and where the server answered, under compatibility too. Faults are injected on the TCP connection in
front of everything; executions are counted by the server. Each cell asserts: the instrumented
caller gets what the plain one got where plain works (the same result, the same error class and
code), the records are true, and the server ran the tool as often as expected. Its row goes to the
table printed at the end of the run (tests/servers/conftest.py).

The servers are built by scripts/conformance-servers (a stage of ./scripts/test, cached by version);
when they are not built every test here fails, never skips.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from tests.support import matrix as m
from tests.support.telemetry import Telemetry, records

from harness import conformance as c
from harness.client import ERAS, http
from otel_mcp_replay import RepeatRefusedError, UnknownEffectError

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300)]

TOOLS_CALL = b'"tools/call"'
THROTTLED = (
    b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 0\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
)
_TAGS = itertools.count(1)


def _cells() -> list[Any]:
    return [
        pytest.param(mode, era, case, id=f"{mode.name}/{era}/{case}")
        for mode in c.MATRIX
        for era in mode.eras
        if era in ERAS
        for case in m.CASES
    ]


@pytest.fixture(scope="session")
def built() -> dict[str, str]:
    try:
        return c.builds()
    except c.BuildsMissing as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="module")
def servers(built: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The server of the cell: started when a cell first needs it, stopped when a cell needs another
    (the cells run in the matrix's order, mode by mode) or when the module ends."""
    current: dict[str, Any] = {}

    def server_for(mode: c.ServerMode) -> c.RunningServer:
        if current.get("mode") != mode:
            stop()
            stack = contextlib.ExitStack()
            work = tmp_path_factory.mktemp(mode.name.replace("+", "-"))
            current.update(mode=mode, stack=stack, server=stack.enter_context(c.running(mode, built, work)))
        server: c.RunningServer = current["server"]
        return server

    def stop() -> None:
        if current:
            current.pop("stack").close()
            current.clear()

    try:
        yield {"for": server_for}
    finally:
        stop()


def _arm(server: c.RunningServer, case: str) -> None:
    if case == m.THROTTLE:
        server.proxy.cut_next(forward_request=False, match=TOOLS_CALL, answer=THROTTLED)
    elif case == m.CUT_BEFORE:
        server.proxy.cut_next(forward_request=False, match=TOOLS_CALL)
    elif case == m.CUT_AFTER:
        server.proxy.cut_next(after_response_bytes=0, match=TOOLS_CALL)


async def _executed(server: c.RunningServer, tool: str, before: int, expected: int) -> int:
    """The tool's executions since `before`, once they reach `expected` (a tool cut after it ran may
    finish after its caller heard of the cut) or the guard ends; the count decides, the guard only
    bounds the wait. Any other run was counted before its answer reached the caller."""
    with anyio.move_on_after(10):
        while server.executions().get(tool, 0) - before < expected:
            await anyio.sleep(0.02)
    return server.executions().get(tool, 0) - before


@pytest.fixture
def tool_call_statuses(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The statuses the HTTP client gets for the tools/call POSTs it sends, while the test lets it
    watch (the plain run only: `monkeypatch.undo()`): what came, to hold the record to."""
    seen: list[int] = []
    send = http.AsyncClient.send

    async def watched(self: Any, request: Any, **kwargs: Any) -> Any:
        response = await send(self, request, **kwargs)
        if request.method == "POST" and TOOLS_CALL in request.content:
            seen.append(response.status_code)
        return response

    monkeypatch.setattr(http.AsyncClient, "send", watched)
    return seen


async def _run(
    server: c.RunningServer, era: str, case: str, args: dict[str, Any], expected: int
) -> tuple[list[m.Outcome], int]:
    tool = m.TOOL[case]
    before = server.executions().get(tool, 0)
    _arm(server, case)
    outcomes = [await m.call_once(server.url, era, tool, args)]
    assert server.proxy.armed == 0, "the fault was not used by the call"
    if case == m.CUT_AFTER:
        # The tool ran; the caller did not hear. A retry layer above repeats it blindly, on a new client.
        await _executed(server, tool, before, 1)
        outcomes.append(await m.call_once(server.url, era, tool, args))
    return outcomes, await _executed(server, tool, before, expected)


def _row(
    mode: c.ServerMode,
    era: str,
    case: str,
    outcomes: tuple[list[m.Outcome], list[m.Outcome], list[m.Outcome]],
    executions: list[int],
    found: list[dict[str, Any]],
    wrong: list[str],
) -> m.Cell:
    plain, got, compat = (" then ".join(map(str, runs)) for runs in outcomes)
    if compat and compat != got:
        got += f" (compatibility: {compat})"
    record = f"true: {m.facts(found)}" if not wrong else "FALSE: " + "; ".join(wrong)
    mode_name = mode.name.removeprefix(f"{mode.server}-")  # (a server's name may hold a hyphen)
    return m.Cell(
        mode.server, mode.version, mode_name, era, case, plain, got, "/".join(map(str, executions)), record
    )


@pytest.mark.parametrize(("mode", "era", "case"), _cells())
async def test_cell(
    mode: c.ServerMode,
    era: str,
    case: str,
    servers: dict[str, Any],
    telemetry: Telemetry,
    instrument: Any,
    tool_call_statuses: list[int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = servers["for"](mode)
    args = m.arguments(case, next(_TAGS))
    plain_runs, instrumented_runs = m.EXECUTIONS[case]
    plain, plain_ran = await _run(server, era, case, args, plain_runs)
    monkeypatch.undo()  # the plain run's HTTP client watched; the plugin's runs unwatched
    instrument(servers=m.declaration(server.url))
    telemetry.exporter.clear()
    got, ran = await _run(server, era, case, args, instrumented_runs)
    found = records(telemetry)
    wrong = m.record_errors(case, found, tool_call_statuses)
    executions, expected = [plain_ran, ran], [plain_runs, instrumented_runs]
    compat: list[m.Outcome] = []
    if case in m.PLAIN_WORKS:
        # Compatibility too where the server answered: the caller gets what the SDK alone gives.
        instrument(servers=m.declaration(server.url, "compatibility"))
        telemetry.exporter.clear()
        compat, compat_ran = await _run(server, era, case, args, instrumented_runs)
        executions.append(compat_ran)
        expected.append(instrumented_runs)
        wrong += [f"compatibility {e}" for e in m.record_errors(case, records(telemetry), tool_call_statuses)]
    m.CELLS.append(_row(mode, era, case, (plain, got, compat), executions, found, wrong))
    assert executions == expected, "executions (plain, app-authorized, compatibility)"
    assert not wrong, f"the record is not true: {wrong}"
    if case in m.PLAIN_WORKS:
        assert got == plain, "the instrumented caller got something else than the plain one"
        assert compat == plain, "under compatibility the caller got something else than the plain one"
    elif case == m.CUT_AFTER:
        assert [o.kind for o in got] == [UnknownEffectError.__name__, RepeatRefusedError.__name__]
    else:  # repeated by the declaration: what a clean call gets
        assert got == [m.Outcome("result", f"found {args['query']}")]


def test_the_table_names_the_versions_the_build_script_builds(built: dict[str, str]) -> None:
    assert dict(pair.split("=") for pair in built["VERSIONS"].split()) == c.VERSIONS


def test_the_matrix_covers_every_server_and_gzip() -> None:
    """The matrix names every server, each in more than one mode, and nginx in front of each."""
    servers = {mode.server for mode in c.MATRIX}
    assert servers == set(c.VERSIONS)
    for server in servers:
        assert len({mode.mode for mode in c.MATRIX if mode.server == server}) > 1
        assert any(mode.gzip for mode in c.MATRIX if mode.server == server)
