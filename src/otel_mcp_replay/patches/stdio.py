"""The stdio transport's seam: `mcp.client.stdio.stdio_client` yields the session's streams; the
write stream is watched so a tool call's record carries its JSON-RPC id. Nothing is repeated on
stdio: a repeat would need a new process, a new session."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import asynccontextmanager
from typing import Any

from otel_mcp_replay.call import CURRENT_CALL
from otel_mcp_replay.declaration import COMPATIBILITY
from otel_mcp_replay.law import target_of
from otel_mcp_replay.lines import LINE
from otel_mcp_replay.patches.carrier import StreamProxy
from otel_mcp_replay.telemetry import TOOLS_CALL_METHOD

_REQUEST: Any = LINE.jsonrpc_request()


class _OutboundWatch(StreamProxy):
    async def send(self, item: Any) -> None:
        message: Any = getattr(item, "message", None)
        message = getattr(message, "root", message)  # 1.x wraps it in a RootModel
        if isinstance(message, _REQUEST) and message.method == TOOLS_CALL_METHOD:
            call = CURRENT_CALL.get()
            if call is not None and call.request_id is None:
                # Read as the HTTP seam reads a body: one Target, its tool and its id.
                params = getattr(message, "params", None)
                target = target_of(
                    {"method": message.method, "id": message.id, "params": params}, COMPATIBILITY
                )
                if target.tool == call.tool:
                    call.bind(target.request_id)
        await self.__wrapped__.send(item)


def stdio_client(
    wrapped: Callable[..., Any], instance: object, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    @asynccontextmanager
    async def watched() -> Any:
        async with wrapped(*args, **kwargs) as (read_stream, write_stream):
            yield read_stream, _OutboundWatch(write_stream)

    return watched()
