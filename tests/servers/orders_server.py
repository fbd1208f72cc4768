"""An MCP server for testing the pool against both majors of the mcp Python SDK: written for mcp 2
(``MCPServer``), it also runs on mcp 1.x (``FastMCP``, the same tools and answers).

On mcp 2 it runs in var/venvs/mcp-2 (tests/support/side_venvs.py); on mcp 1.x with the project's
own python. Run: ``var/venvs/mcp-2/bin/python tests/servers/orders_server.py`` (stdio) or
``... --http PORT`` (streamable HTTP on 127.0.0.1:PORT, endpoint ``/mcp``; ``--stateless`` for a
server that keeps no session).
"""

from __future__ import annotations

import argparse
import asyncio

from pydantic import BaseModel

try:  # mcp 2
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    MCP_2 = True
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import Context
    from mcp.server.fastmcp import FastMCP as MCPServer
    from mcp.server.fastmcp.exceptions import ToolError

    MCP_2 = False

mcp = MCPServer("orders", log_level="WARNING")

_ORDERS = {"A-1": ("shipped", 2, 39.5), "B-7": ("pending", 1, 12.0)}
_cancelled: list[float] = []


class Order(BaseModel):
    order_id: str
    status: str
    items: int
    total: float


@mcp.tool()
def get_order(order_id: str) -> Order:
    """Look an order up by its id."""
    if order_id not in _ORDERS:
        raise ToolError(f"no order {order_id}")  # its message reaches the client; any other error is masked
    status, items, total = _ORDERS[order_id]
    return Order(order_id=order_id, status=status, items=items, total=total)


@mcp.tool()
def count_orders(status: str) -> int:
    """How many orders have this status."""
    return sum(1 for order in _ORDERS.values() if order[0] == status)


@mcp.tool()
async def slow_answer(seconds: float) -> str:
    """Answer after ``seconds`` (without blocking the server); a cancelled wait is counted."""
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        _cancelled.append(seconds)
        raise
    return "done"


@mcp.tool()
def session_facts(ctx: Context) -> dict[str, object]:
    """The protocol version this call was made under and how many slow answers were cancelled."""
    version = getattr(ctx, "protocol_version", None)  # mcp 2
    if version is None:  # mcp 1.x: what the client asked for in its handshake
        version = ctx.session.client_params.protocolVersion
    return {"protocol_version": version, "cancelled": len(_cancelled)}


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP on 127.0.0.1:PORT")
    parser.add_argument("--stateless", action="store_true", help="HTTP without sessions")
    args = parser.parse_args()
    if args.http and MCP_2:
        mcp.run("streamable-http", host="127.0.0.1", port=args.http, stateless_http=args.stateless)
    elif args.http:
        mcp.settings.host, mcp.settings.port, mcp.settings.stateless_http = (
            "127.0.0.1",
            args.http,
            args.stateless,
        )
        mcp.run("streamable-http")
    else:
        mcp.run()
