"""The app the distro runs start under `opentelemetry-instrument` (tests/support/distros.py): the
fault server on 127.0.0.1 in this very process (so what instruments an mcp server here instruments
it too), a 429 queued for `search` and a cut after `charge` ran, each tool called once through the
installed mcp line's client with canaries in its arguments. Its last line of output is what the
server counted, the session ids it handed out, and what the app saw, as JSON.

Run as `python distro_app.py PORT CANARIES_JSON`.
"""

from __future__ import annotations

import asyncio
import json
import sys

from harness.client import Client, is_error
from harness.faults import DropAfterExecution, Throttle
from harness.server import running_server


async def _calls(url: str, canaries: dict[str, str]) -> dict[str, str]:
    outcomes: dict[str, str] = {}
    async with Client(url, mode="legacy") as client:  # the era of session ids (secrets to redaction)
        result = await client.call_tool("search", {"query": canaries["QUERY"]})
        outcomes["search"] = "tool-error" if is_error(result) else "completed"
        try:
            await client.call_tool("charge", {"amount": 5, "idempotency_key": canaries["KEY"]})
            outcomes["charge"] = "completed"
        except Exception as error:  # the cut: the app sees the SDK's error, the record says the rest
            outcomes["charge"] = type(error).__name__
    return outcomes


def main(argv: list[str]) -> int:
    port, canaries = int(argv[1]), json.loads(argv[2])
    with running_server("streamable", port=port) as server:
        server.faults.add("search", Throttle(retry_after="0"))
        server.faults.add("charge", DropAfterExecution())
        outcomes = asyncio.run(_calls(server.url, canaries))
        executions = {tool: server.counters.executions(tool) for tool in ("search", "charge")}
        sessions = sorted({post.session_id for post in server.counters.post_log() if post.session_id})
    print(json.dumps({"outcomes": outcomes, "executions": executions, "sessions": sessions}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
