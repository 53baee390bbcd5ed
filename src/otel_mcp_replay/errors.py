"""The two errors a caller can get from this plugin, and only under the app-authorized policy.

Both are `MCPError`s, so code that already handles the SDK's errors keeps working; neither message
carries a value from the call (no arguments, no endpoint path, no key).
"""

from __future__ import annotations

from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, INVALID_REQUEST


class UnknownEffectError(MCPError):
    """The tool call failed after an attempt that got no answer: it may have run on the server.

    `__cause__` is the final error the call met.
    """

    def __init__(self, tool: str) -> None:
        super().__init__(
            CONNECTION_CLOSED,
            f"tool call {tool!r} failed without an answer for every attempt: it may have run on the server",
        )
        self.tool = tool


class ReplayUnavailableError(MCPError):
    """The app-authorized policy needs every answer matched to its request; this connection cannot.

    Raised before the request is sent, so the tool did not run.
    """

    def __init__(self, tool: str) -> None:
        super().__init__(
            INVALID_REQUEST,
            f"tool call {tool!r} not sent: the app-authorized replay policy needs a transport whose "
            "answers can be matched to their requests (streamable HTTP, or SSE opened after instrument())",
        )
        self.tool = tool
