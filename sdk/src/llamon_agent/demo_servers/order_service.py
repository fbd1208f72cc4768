#!/usr/bin/env python3
"""order-service: a demo MCP server that looks up orders in demo_data.json.

    python -m llamon_agent.demo_servers.order_service                      # stdio
    python -m llamon_agent.demo_servers.order_service --http --port 8765   # http://127.0.0.1:8765/mcp

Tools: get_order(query="", order_id=""), list_orders(customer_id, status="").
Self-contained on purpose (no shared helper module): each demo server can be copied alone.
"""

from __future__ import annotations

import argparse
import json
import re
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

SERVER_NAME = "order-service"
DEFAULT_PORT = 8765
DATA_FILE = Path(__file__).with_name("demo_data.json")
ORDER_STATUSES = ("processing", "shipped", "delivered", "cancelled")
# Not \b: in Korean text ("주문A-1001") the id touches Hangul letters, which \w also matches.
ORDER_ID_RE = re.compile(r"(?<![A-Za-z0-9])([A-Za-z])-(\d{4})(?!\d)")


@cache
def _data() -> dict[str, Any]:
    return json.loads(DATA_FILE.read_text(encoding="utf-8"))


def _orders_by_id() -> dict[str, dict[str, Any]]:
    return {order["order_id"]: order for order in _data()["orders"]}


def get_order(query: str = "", order_id: str = "") -> dict[str, Any]:
    """Look up one order by its id (like "A-1001"), given directly or found in the query text.

    A query that mentions no order id returns found=false with a hint (ask the customer for the
    id); an order id that does not exist is an error.
    """
    wanted = order_id.strip().upper()
    if not wanted:
        if not query.strip():
            raise ToolError("get_order needs an order_id (like A-1001) or a query that contains one")
        match = ORDER_ID_RE.search(query)
        if match is None:
            # A pre-step rule sends the whole query ("주문 조회 부탁해"); failing the run because the
            # customer has not typed the id yet would be unhelpful, so say so instead.
            return {
                "found": False,
                "order": None,
                "message": "질의에 주문번호가 없습니다 (예: A-1001). / No order id (like A-1001) in the query.",
            }
        wanted = f"{match.group(1).upper()}-{match.group(2)}"
    order = _orders_by_id().get(wanted)
    if order is None:
        raise ToolError(f"Order {wanted} was not found. Check the id (orders look like A-1001).")
    return {"found": True, "order": order}


def list_orders(customer_id: str, status: str = "") -> dict[str, Any]:
    """List a customer's orders, newest first, optionally only those with one status."""
    customer_id = customer_id.strip().upper()
    if customer_id not in {c["customer_id"] for c in _data()["customers"]}:
        raise ToolError(f"Customer {customer_id or '(empty)'} was not found (ids look like C-1001).")
    status = status.strip().lower()
    if status and status not in ORDER_STATUSES:
        raise ToolError(
            f"Unknown status {status!r}: use one of {', '.join(ORDER_STATUSES)} or leave it empty."
        )
    orders = [
        order
        for order in _data()["orders"]
        if order["customer_id"] == customer_id and (not status or order["status"] == status)
    ]
    orders.sort(key=lambda order: order["ordered_at"], reverse=True)
    return {"customer_id": customer_id, "status": status or None, "count": len(orders), "orders": orders}


def build_server(host: str = "127.0.0.1", port: int = DEFAULT_PORT) -> MCPServer:
    """An MCP server with this module's tools (host/port matter only for --http), on mcp 1.x or 2."""
    # WARNING keeps stderr quiet: the server logs every request at INFO. mcp 1.x takes host and
    # port here (its DNS-rebinding protection follows the host); mcp 2 takes them in run().
    server = MCPServer(SERVER_NAME, log_level="WARNING", **({} if MCP_2 else {"host": host, "port": port}))
    server.tool()(get_order)
    server.tool()(list_orders)
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
