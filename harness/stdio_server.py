"""The demo MCP server over stdio: `python -m harness.stdio_server` (for the stdio tests)."""

from __future__ import annotations

from harness.server import build_server


def main() -> None:
    build_server().run("stdio")


if __name__ == "__main__":
    main()
