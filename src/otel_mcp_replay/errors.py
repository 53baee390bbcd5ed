"""The errors a caller can get from this plugin, each said so that an app, and a model that reads
it, can act on it.

All are the installed mcp's own error class, so code that already handles the SDK's errors keeps
working; no message carries a value from the call (no arguments, no endpoint path, no key).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from otel_mcp_replay.lines import LINE

if TYPE_CHECKING:  # checked against 2.x; at run time, whichever line is installed
    from mcp.shared.exceptions import MCPError
else:
    MCPError = LINE.error_base()  # `McpError` on 1.x

# JSON-RPC's codes, the same on both lines (mcp_types on 2.x, mcp.types on 1.x).
CONNECTION_CLOSED: Final = -32000
INVALID_REQUEST: Final = -32600
INTERNAL_ERROR: Final = -32603
# The 2026-07-28 era's rejection of a tools/call whose mirrored headers the server's listing does not
# match (mcp_types/jsonrpc.py): the SDK's Client re-lists the tools and resends once.
HEADER_MISMATCH: Final = -32020


def _init(error: MCPError, code: int, message: str, data: Any = None) -> None:
    MCPError.__init__(error, *LINE.error_args(code, message, data))


class UnknownEffectError(MCPError):
    """The tool call failed after a request that got no answer: it may have run on the server.

    `__cause__` is the final error the call met. `task_id`: the call's request was answered with a
    task (SEP-2663) whose status could not be read: the task exists, and polling it (`tasks/get`,
    never refused) says how it ended. It is the app's, never exported (a server may use task ids as
    bearer tokens), and never in the message.
    """

    def __init__(self, tool: str, *, task_id: str | None = None) -> None:
        if task_id is None:
            message = (
                f"The tool call {tool!r} failed without an answer, so it MAY HAVE RUN on the server. "
                "Do not call it again as it is: first check whether it took effect."
            )
        else:
            message = (
                f"The tool call {tool!r} started a task on the server, and its status could not be "
                "read: the task exists and MAY HAVE RUN, or still be running. Do not call the tool "
                "again (that starts another task): poll the task instead (this error's task_id)."
            )
        _init(self, CONNECTION_CLOSED, message)
        self.tool = tool
        self.task_id = task_id


class ReplayUnavailableError(MCPError):
    """The app-authorized policy needs every answer matched to its request; this connection cannot.

    Raised before the request is sent, so the tool did not run.
    """

    def __init__(self, tool: str, *, unreadable: bool = False) -> None:
        if unreadable:  # no call passes the law unread (the contract: no size lifts the law)
            message = (
                f"The tool call {tool!r} was not sent, so it did not run: its request body could not be "
                "read (a streamed body, or JSON that cannot be parsed), and no tool call is sent "
                "without the replay law reading it."
            )
        else:
            message = (
                f"The tool call {tool!r} was not sent, so it did not run: the app-authorized replay "
                "policy needs a connection whose answers can be matched to their requests (streamable "
                "HTTP, or an SSE stream opened after instrument())."
            )
        _init(self, INVALID_REQUEST, message)
        self.tool = tool


class RepeatRefusedError(MCPError):
    """The same call of a changing tool failed with its effect unknown a moment ago: not sent again.

    Raised before anything is sent, so this call did not run. `__cause__` is None. `sdk_resend`:
    what was refused is the SDK's own resend of the app's one call, after the server rejected its
    first send with HEADER_MISMATCH (mcp 2.x, 2026-07-28): the message says so, and what to do.
    """

    def __init__(self, tool: str, *, sdk_resend: bool = False) -> None:
        if sdk_resend:
            message = (
                f"The tool call {tool!r} was sent once and rejected with HEADER_MISMATCH (this client "
                "had not listed the tool, or its schema changed); the SDK's own resend was not sent, "
                "because the first send's effect is unknown and the tool makes changes. Check whether "
                "it took effect. To let the SDK's recovery through: list the tools before calling, "
                "carry the idempotency key, or call inside otel_mcp_replay.repeat_confirmed()."
            )
        else:
            message = (
                f"The tool call {tool!r} was not sent: the same call failed moments ago and MAY HAVE "
                "RUN. Check whether it took effect before calling it again; to repeat it deliberately, "
                "call it inside otel_mcp_replay.repeat_confirmed()."
            )
        _init(self, INVALID_REQUEST, message)
        self.tool = tool
        self.sdk_resend = sdk_resend


class RefusedError(MCPError):
    """The server refused the request (an HTTP status that is not success) and it was not repeated.

    Raised on the legacy SSE transport, where the SDK alone would lose the status and the session;
    `status` is the HTTP status, also in the error's `data`.
    """

    def __init__(self, status: int) -> None:
        _init(self, INTERNAL_ERROR, f"The server refused the request: HTTP {status}", {"status": status})
        self.status = status


def lost_answer() -> MCPError:
    """The SDK's own error for a 2xx response that ended without its JSON-RPC answer, as mcp 2.x
    raises it (mcp 1.x raises none: its call waits). Never a server's word."""
    return MCPError(*LINE.error_args(CONNECTION_CLOSED, "The response ended without the JSON-RPC answer"))


def foreign_task_answer() -> MCPError:
    """What a `tasks/get` answer naming another task than the one polled is: no status of this one
    (the cause of the poller's UnknownEffectError). Never names either task."""
    return MCPError(*LINE.error_args(INTERNAL_ERROR, "The tasks/get answer named another task"))


# Their public names: what a span's error.type and a traceback say (`otel_mcp_replay.UnknownEffectError`).
for _public in (UnknownEffectError, ReplayUnavailableError, RepeatRefusedError):
    _public.__module__ = "otel_mcp_replay"


def type_name(error: BaseException) -> str:
    """The fully qualified name of an error's type (a builtin's bare): never its message, which may
    quote what the server echoed of the call."""
    kind = type(error)
    module = kind.__module__
    return kind.__qualname__ if module == "builtins" else f"{module}.{kind.__qualname__}"
