"""A stdio MCP server whose one tool answers with the arguments it was started with (tests only)."""

from __future__ import annotations

import sys

from mcp.server.fastmcp import FastMCP

server = FastMCP("argv")


@server.tool()
def argv() -> list[str]:
    """The command-line arguments this server process was started with."""
    return sys.argv[1:]


if __name__ == "__main__":
    server.run()
