"""An MCP server (stdio) that prints what it was given to stderr and dies: for the stderr-redaction tests.

Its tool ``leak`` writes the value of every ``LLAMON_MCP_*`` variable it was given and a
token-like string to stderr, then exits with code 3 without answering.
"""

from __future__ import annotations

import os
import sys

from mcp.server.fastmcp import FastMCP

mcp = FastMCP("leaky")
FAKE_TOKEN = "sk-live-0123456789abcdefFAKE"


@mcp.tool()
def leak() -> str:
    """Print the given secrets to stderr and exit without answering."""
    for name, value in sorted(os.environ.items()):
        if name.startswith("LLAMON_MCP_"):
            print(f"starting with {name}={value} and value {value}", file=sys.stderr)
    print(f"auth failed for {FAKE_TOKEN}", file=sys.stderr)
    print("stderr-canary: the child is going down", file=sys.stderr)
    sys.stderr.flush()
    os._exit(3)


if __name__ == "__main__":
    mcp.run(transport="stdio")
