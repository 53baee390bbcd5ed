"""`python -m harness.line_check`: the harness against the installed mcp line's own client, no plugin.

For each app kind it makes one tool call (which the server must count once), then scripts a 429 for
the next call and prints what the plain client made of it. It checks the harness, not the SDK: it
fails when the call is not counted, or the 429 never reaches the server or never surfaces at the
client within a few seconds. What the client makes of a 429 differs by line and transport (see
docs/mcp-lines.md), and is printed so a run on a new mcp version shows it:

- streamable HTTP, mcp 1.x: the transport's task group fails with `httpx.HTTPStatusError` (the
  session dies with it); mcp 2.x: the call fails with `MCPError(-32603)`.
- legacy SSE, both lines: the POST writer stops, the call waits for its read timeout.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import sys
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import anyio
from mcp import ClientSession
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client

from harness.faults import Throttle
from harness.sdk import LINE
from harness.server import APP_KINDS, AppKind, running_server

_READ_TIMEOUT_S = 2.0  # the SSE transport never answers a call whose POST got 429: wait this long
_CALL_DEADLINE_S = 8.0


def leaves(exc: BaseException) -> Iterator[BaseException]:
    """The exceptions an exception group holds, flattened (the exception itself if not a group)."""
    inner = getattr(exc, "exceptions", None)  # an exception group (BaseExceptionGroup needs 3.11)
    if isinstance(inner, tuple):
        for each in inner:
            yield from leaves(each)
    else:
        yield exc


def describe(exc: BaseException) -> str:
    """`module.Type` of each leaf, with the HTTP status or JSON-RPC code it carries."""
    parts = []
    for leaf in leaves(exc):
        text = f"{type(leaf).__module__}.{type(leaf).__qualname__}"
        response = getattr(leaf, "response", None)
        error = getattr(leaf, "error", None)
        if response is not None and hasattr(response, "status_code"):
            text += f"(status {response.status_code})"
        elif error is not None and hasattr(error, "code"):
            text += f"(code {error.code})"
        parts.append(text)
    return ", ".join(parts) if parts else type(exc).__name__


@contextlib.asynccontextmanager
async def session(url: str, app_kind: AppKind) -> AsyncIterator[ClientSession]:
    """An initialized plain `ClientSession` over the transport `app_kind` needs."""
    # mcp 1.x takes the read timeout as a timedelta, 2.x as seconds.
    timeout: Any = datetime.timedelta(seconds=_READ_TIMEOUT_S) if LINE == 1 else _READ_TIMEOUT_S
    opener: Any = sse_client(url) if app_kind == "sse" else streamable_http_client(url)
    async with contextlib.AsyncExitStack() as stack:
        streams = await stack.enter_async_context(opener)  # 1.x's streamable one adds a session-id getter
        s = ClientSession(streams[0], streams[1], read_timeout_seconds=timeout)
        await stack.enter_async_context(s)
        await s.initialize()
        yield s


async def check(app_kind: AppKind) -> tuple[bool, str]:
    """One counted call and one 429 against a fresh server: whether the harness held, and what the
    client saw."""
    with running_server(app_kind) as handle:
        async with session(handle.url, app_kind) as s:
            result = await s.call_tool("search", {"query": "line check"})
        # The wire's name: the field is `isError` on 1.x, `is_error` on 2.x.
        is_error = result.model_dump(by_alias=True, mode="json").get("isError", False)
        counted = handle.counters.executions("search") == 1 and not is_error
        handle.faults.add("search", Throttle(retry_after="1"))
        seen = "nothing: the call succeeded"
        try:
            with anyio.fail_after(_CALL_DEADLINE_S):
                async with session(handle.url, app_kind) as s:
                    await s.call_tool("search", {"query": "throttled"})
        except BaseException as exc:  # what the plain client raises is the finding
            if isinstance(exc, KeyboardInterrupt | SystemExit):
                raise
            seen = describe(exc)
        throttled = any(p.fault == "Throttle" for p in handle.counters.post_log())
        not_run = handle.counters.executions("search") == 1
        ok = counted and throttled and not_run and not seen.startswith("nothing")
        return ok, f"counted={counted} throttled={throttled} 429 -> {seen}"


async def run(kinds: Sequence[AppKind]) -> bool:
    import importlib.metadata

    print(f"mcp {importlib.metadata.version('mcp')} (line {LINE})")
    ok = True
    for kind in kinds:
        held, text = await check(kind)
        ok = ok and held
        print(f"{kind:16} {'ok  ' if held else 'FAIL'} {text}", flush=True)
    return ok


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--app", choices=APP_KINDS, action="append", help="app kinds to check (default: all)")
    args = parser.parse_args(argv)
    kinds: tuple[AppKind, ...] = tuple(args.app) if args.app else APP_KINDS
    return 0 if anyio.run(run, kinds) else 1


if __name__ == "__main__":
    sys.exit(main())
