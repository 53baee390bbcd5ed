"""Leak probes: open file descriptors, client connections, running tasks, each read after a run
settles (a bounded wait for a condition, never a verdict on a clock)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import time
from collections.abc import Callable
from typing import Any

import anyio

from otel_mcp_replay.patches.sse import SseStream

FD_SLACK = 4  # descriptors a run may leave open for the interpreter's own reasons


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def client_connections(port: int) -> int:
    """Open client sockets to 127.0.0.1:`port` (ESTABLISHED or CLOSE_WAIT: still held by a client)."""
    count = 0
    with open("/proc/net/tcp", encoding="ascii") as table:
        next(table)
        for line in table:
            fields = line.split()
            remote, state = fields[2], fields[3]
            host, _, remote_port = remote.partition(":")
            if host == "0100007F" and int(remote_port, 16) == port and state in ("01", "08"):
                count += 1
    return count


def task_names() -> list[str]:
    return sorted(repr(task.get_coro()) for task in asyncio.all_tasks())


async def settled(predicate: Callable[[], bool], timeout: float = 3.0) -> bool:
    """Poll `predicate` until it holds or `timeout` passes (collecting garbage between polls)."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() > deadline:
            return False
        gc.collect()
        await anyio.sleep(0.05)


@contextlib.asynccontextmanager
async def no_leaks(what: str) -> Any:
    """Around a block that starts and stops its own servers and clients: afterwards the process
    holds no more file descriptors (small slack), asyncio tasks or SSE waiters than before."""
    gc.collect()
    fds_before = open_fds()
    tasks_before = len(asyncio.all_tasks())
    yield
    assert await settled(lambda: len(asyncio.all_tasks()) <= tasks_before), (
        f"{what}: asyncio tasks left behind: {task_names()}"
    )
    assert await settled(lambda: open_fds() <= fds_before + FD_SLACK), (
        f"{what}: file descriptors leaked: {fds_before} before, {open_fds()} after"
    )
    # Every legacy-SSE connection still in memory (garbage not yet collected included) holds no
    # call awaiting its answer.
    waiting = sum(len(o.waiting) for o in gc.get_objects() if type(o) is SseStream)
    assert not waiting, f"{what}: the SSE waiters hold {waiting} entries"
