"""What the framework tests that live in environments of their own share (test_adk.py,
test_strands.py): the calls they make, the app's declaration, and the server's transport.
It imports no framework: each of those files runs only where its framework is installed."""

from __future__ import annotations

from typing import Any

from harness.server import ServerHandle

# Generous: a call that hangs fails the test in 20 s instead of holding the run.
DEADLINE_S = 20
SEARCH = ("search", {"query": "q"})
EMAIL = ("send_email", {"to": "ops@example.com", "body": "hello"})
SEARCH_RESULT = "3 results for 'q'"
# The plugin's words for a changing call cut after it ran, and for its repeat refused.
MAY_HAVE_RUN = "may have run on the server"
NOT_SENT = "was not sent: the same call failed moments ago"


def declared(server: ServerHandle, tools: dict[str, Any], **settings: Any) -> dict[str, Any]:
    """An app-authorized declaration for the URL the app connects to (for SSE, the /sse URL)."""
    return {server.url: {"policy": "app-authorized", "tools": tools, **settings}}


def is_sse(server: ServerHandle) -> bool:
    return server.app_kind == "sse"


def posted_status(server: ServerHandle) -> int:
    """The status of an accepted POST: SSE accepts a message with 202 and answers on the stream."""
    return 202 if is_sse(server) else 200
