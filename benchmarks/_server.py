"""The benchmarks' MCP server, in its own process (its CPU never shares the client's GIL).

`python -m benchmarks._server [--faults mixed] [--seed N]` serves the demo server on 127.0.0.1 with
`Counters(log_limit=0)` (a long run keeps no POST log) and TCP_NODELAY on its connections (see
`_no_delay`), prints `MCP_URL=<endpoint>` as its first
line, and serves until its stdin closes. `--faults mixed` draws a fault for each `search` call from a
seeded rule (see MIXED_FAULTS); the default is no faults.
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import sys
from collections.abc import Sequence

from harness.faults import (
    DropAfterExecution,
    Fault,
    FaultPlan,
    RandomFaults,
    Status,
    Throttle,
)
from harness.server import Counters, ServerHandle, running_server

# What a long run's `search` calls meet, by weight: mostly answers, some 429s the app lets the
# plugin repeat at once, some 503s (never repeated), a few cuts after the tool ran (the network kind).
MIXED_FAULTS: tuple[tuple[Fault | None, float], ...] = (
    (None, 0.85),
    (Throttle("0"), 0.10),
    (Status(503), 0.04),
    (DropAfterExecution(), 0.01),
)


def _no_delay(handle: ServerHandle) -> None:
    """Turn Nagle off for every connection the server accepts from now on.

    running_server binds `socket.socket(AF_INET, SOCK_STREAM)`, whose protocol number is 0, and
    asyncio sets TCP_NODELAY only on sockets whose protocol is IPPROTO_TCP: so each response's
    second write waits for the client's delayed ACK, ~40 ms per request on a kept-alive
    connection. On Linux an accepted socket inherits TCP_NODELAY from its listening socket.
    """
    for server in handle._uvicorn.servers:
        for listening in server.sockets:
            listening.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--faults", choices=("none", "mixed"), default="none")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    plan = FaultPlan()
    if args.faults == "mixed":
        plan.set_rule(RandomFaults(args.seed, MIXED_FAULTS, tools=["search"]))
    with running_server("streamable", fault_plan=plan, counters=Counters(log_limit=0)) as handle:
        _no_delay(handle)
        print(f"MCP_URL={handle.url}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            sys.stdin.read()  # the parent closes our stdin to stop us
        print(f"posts: {handle.counters.total_posts}", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
