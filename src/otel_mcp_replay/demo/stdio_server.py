"""The demo MCP server over stdio: `python -m otel_mcp_replay.demo.stdio_server` (for the stdio tests)."""

from __future__ import annotations

from otel_mcp_replay.demo.server import build_server


def main() -> None:
    build_server().run("stdio")


if __name__ == "__main__":
    main()
