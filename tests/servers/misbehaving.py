"""An MCP server whose tools misbehave on request, for the pool's tests and benchmark.

Run: ``python tests/servers/misbehaving.py`` (stdio) or ``... --http PORT`` (streamable HTTP
on 127.0.0.1:PORT, endpoint ``/mcp``). ``--extra-tools N`` lists N more tools, each with a
``--tool-description-bytes`` long description (a server whose tool list is too big to store);
``--start-delay S`` waits S seconds before it serves (a server slow to start).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from typing import Any

from mcp.server.fastmcp import Context, FastMCP
from mcp.types import ImageContent
from typing_extensions import TypedDict

mcp = FastMCP("misbehaving")


@mcp.tool()
def add(a: int, b: int) -> dict[str, Any]:
    """Well-behaved: add two integers."""
    return {"sum": a + b}


@mcp.tool()
def echo(value: str) -> str:
    """Return the value unchanged."""
    return value


@mcp.tool(structured_output=False)
def echo_text(value: str) -> str:
    """Return the value as text content only (no output schema, no structured content)."""
    return value


@mcp.tool()
def whoami() -> dict[str, Any]:
    """The server's pid and the names of its environment variables."""
    return {"pid": os.getpid(), "env": sorted(os.environ)}


@mcp.tool()
async def hang(seconds: float) -> str:
    """Sleep without blocking the server (a cancellable hang)."""
    await asyncio.sleep(seconds)
    return "woke up"


@mcp.tool()
def hang_blocking(seconds: float) -> str:
    """Sleep inside the server's event loop: the whole server freezes."""
    time.sleep(seconds)
    return "woke up"


@mcp.tool()
def exit_now(code: int = 3) -> str:
    """Exit the process in the middle of the call: no reply is ever sent."""
    sys.stdout.flush()
    os._exit(code)


@mcp.tool()
def malformed(ctx: Context, kind: str = "bad_result") -> Any:
    """Answer with something the client cannot parse.

    ``bad_result``: a JSON-RPC reply whose result is not a tools/call result (stdio only);
    ``broken_json``: a truncated JSON line carrying this request's id (stdio only);
    ``bad_image``: an image block whose data is not base64 (any transport).
    """
    if kind == "bad_image":
        return [ImageContent(type="image", data="!!! not base64 !!!", mimeType="image/png")]
    request_id = ctx.request_id
    rid = json.dumps(int(request_id) if request_id.isdigit() else request_id)
    if kind == "bad_result":
        line = json.dumps({"jsonrpc": "2.0", "id": "RID", "result": {"content": "not a list"}})
    else:
        line = '{"jsonrpc": "2.0", "id": "RID", "result": {"content": [{"type": "te'
    line = line.replace('"RID"', rid)
    sys.stdout.buffer.write(line.encode() + b"\n")
    sys.stdout.buffer.flush()
    return "the real reply (ignored: the client already got the malformed one)"


@mcp.tool()
def count(n: int) -> int:
    """Return n: a scalar structured result ({"result": n}, the wrapper its output schema declares)."""
    return n


class Total(TypedDict):
    total: int


@mcp.tool()
def off_schema(ctx: Context) -> Total:
    """Declare ``{"total": integer}`` and answer ``{"total": "twelve"}`` (stdio only): a server whose
    result breaks its own output schema, which FastMCP itself never sends (it checks its results)."""
    rid = json.dumps(int(ctx.request_id) if ctx.request_id.isdigit() else ctx.request_id)
    result = {
        "content": [{"type": "text", "text": '{"total": "twelve"}'}],
        "structuredContent": {"total": "twelve"},
    }
    line = json.dumps({"jsonrpc": "2.0", "id": "RID", "result": result}).replace('"RID"', rid)
    sys.stdout.buffer.write(line.encode() + b"\n")
    sys.stdout.buffer.flush()
    return {"total": 12}  # the real reply (ignored: the client already took the one above)


@mcp.tool()
def flood(n_bytes: int) -> str:
    """Return a string of n_bytes characters."""
    return "x" * n_bytes


@mcp.tool(structured_output=False)
def flood_text(n_bytes: int) -> str:
    """Return n_bytes characters as text content only (one copy on the wire, no structured twin)."""
    return "x" * n_bytes


@mcp.tool()
def stderr_noise(lines: int = 200) -> str:
    """Write many lines to stderr, then answer normally."""
    for i in range(lines):
        print(f"noise line {i} " + "#" * 80, file=sys.stderr)
    sys.stderr.flush()
    return "ok"


@mcp.tool()
def fail(message: str = "it broke") -> str:
    """Raise: the client gets an isError result."""
    raise ValueError(message)


def _extra_tool(value: str = "") -> str:
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP on 127.0.0.1:PORT")
    parser.add_argument("--extra-tools", type=int, default=0, metavar="N", help="list N more tools")
    parser.add_argument("--tool-description-bytes", type=int, default=20, metavar="B")
    parser.add_argument(
        "--start-delay", type=float, default=0, metavar="S", help="wait S seconds before serving"
    )
    args = parser.parse_args()
    time.sleep(args.start_delay)  # a slow start (a server with thousands of tools): the handshake waits
    for i in range(args.extra_tools):
        mcp.add_tool(_extra_tool, name=f"extra_{i:05d}", description="d" * args.tool_description_bytes)
    if args.http:
        mcp.settings.host = "127.0.0.1"
        mcp.settings.port = args.http
        mcp.settings.log_level = "WARNING"
        mcp.run(transport="streamable-http")
    else:
        mcp.run(transport="stdio")


if __name__ == "__main__":
    main()
