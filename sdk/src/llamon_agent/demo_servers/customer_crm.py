#!/usr/bin/env python3
"""customer-crm: a demo MCP server that returns customer profiles from demo_data.json.

    python -m llamon_agent.demo_servers.customer_crm                      # stdio
    python -m llamon_agent.demo_servers.customer_crm --http --port 8766   # http://127.0.0.1:8766/mcp

Tools: get_customer_profile(customer_id).
Self-contained on purpose (no shared helper module): each demo server can be copied alone.
"""

from __future__ import annotations

import argparse
import json
import sys
from functools import cache
from pathlib import Path
from typing import Any

try:  # mcp 2 renamed FastMCP to MCPServer; host and port moved from the constructor to run()
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    MCP_2 = True
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import FastMCP as MCPServer  # type: ignore[no-redef]
    from mcp.server.fastmcp.exceptions import ToolError  # type: ignore[no-redef]

    MCP_2 = False

SERVER_NAME = "customer-crm"
DEFAULT_PORT = 8766
DATA_FILE = Path(__file__).with_name("demo_data.json")


@cache
def _data() -> dict[str, Any]:
    return json.loads(DATA_FILE.read_text(encoding="utf-8"))


def get_customer_profile(customer_id: str) -> dict[str, Any]:
    """Return a customer's profile (tier, language, products, consents, notes, order count) by id like C-1001."""
    wanted = customer_id.strip().upper()
    if not wanted:
        # The seed's rule passes ctx.context.get("userId"), which is empty when no userId was sent.
        raise ToolError("get_customer_profile needs a customer_id (like C-1001); none was given.")
    for customer in _data()["customers"]:
        if customer["customer_id"] == wanted:
            orders = [o for o in _data()["orders"] if o["customer_id"] == wanted]
            return {**customer, "order_count": len(orders)}
    raise ToolError(f"Customer {wanted} was not found (ids look like C-1001).")


def build_server(host: str = "127.0.0.1", port: int = DEFAULT_PORT) -> MCPServer:
    """An MCP server with this module's tools (host/port matter only for --http), on mcp 1.x or 2."""
    # WARNING keeps stderr quiet: the server logs every request at INFO. mcp 1.x takes host and
    # port here (its DNS-rebinding protection follows the host); mcp 2 takes them in run().
    server = MCPServer(SERVER_NAME, log_level="WARNING", **({} if MCP_2 else {"host": host, "port": port}))
    server.tool()(get_customer_profile)
    return server


def main(argv: list[str] | None = None) -> None:
    """Run the server over stdio, or over streamable HTTP with --http."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http", action="store_true", help="serve streamable HTTP on /mcp instead of stdio")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    args = parser.parse_args(argv)
    server = build_server(args.host, args.port)
    if args.http:
        print(f"{SERVER_NAME} serving http://{args.host}:{args.port}/mcp", file=sys.stderr, flush=True)
        server.run("streamable-http", **({"host": args.host, "port": args.port} if MCP_2 else {}))
    else:
        server.run(transport="stdio")


if __name__ == "__main__":
    main()
