"""Per-call latency of MCP tool calls: pooled sessions vs the adapters' session-per-call default.

    .venv/bin/python benchmarks/bench_mcp.py [--pooled 200] [--default 20]

Same server, the demo order-service (sdk/src/llamon_agent/demo_servers/order_service.py, tool
``get_order`` on order A-1001: a JSON object, so structured content checked against its output
schema, as real tools return), same interpreter, one call at a time. Prints p50/p99 per way of calling and the ratio of the default's p50 to the pool's.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from llamon_agent.mcp import McpPool, McpServerSpec  # noqa: E402

SERVER = ROOT / "sdk" / "src" / "llamon_agent" / "demo_servers" / "order_service.py"
TOOL, ARGS = "get_order", {"order_id": "A-1001"}


def _percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _timed_sync(call: Callable[[], object], n: int) -> list[float]:
    call()  # warm-up: the session opens here, not in the samples
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        call()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


async def _timed_async(call: Callable[[], Awaitable[object]], n: int) -> list[float]:
    await call()
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        await call()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start_http_server() -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    process = subprocess.Popen(
        [sys.executable, str(SERVER), "--http", "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(200):
        try:
            httpx.get(url, timeout=0.5)
            return process, url
        except httpx.HTTPError:
            time.sleep(0.1)
    process.kill()
    raise SystemExit("the HTTP benchmark server did not start")


def bench_pooled(n: int) -> dict[str, list[float]]:
    """Pooled stdio (sync facade and LangChain tool) and pooled HTTP."""
    pool = McpPool()
    process, url = _start_http_server()
    try:
        pool.register(
            McpServerSpec(mcp_id="bench", transport="stdio", command=sys.executable, args=[str(SERVER)])
        )
        pool.register(McpServerSpec(mcp_id="bench-http", transport="http", url=url))
        out = {
            "pooled stdio (call_tool_sync)": _timed_sync(lambda: pool.call_tool_sync("bench", TOOL, ARGS), n),
            # The server page's call: raw + normalized result, the wiretap keeping its JSON-RPC messages.
            "pooled stdio (call_tool_traced_sync, wire=[])": _timed_sync(
                lambda: pool.call_tool_traced_sync("bench", TOOL, ARGS, wire=[]), n
            ),
        }
        tool = next(t for t in pool.langchain_tools_sync("bench") if t.name == TOOL)
        out["pooled stdio (LangChain tool.invoke)"] = _timed_sync(lambda: tool.invoke(ARGS), n)
        out["pooled stdio (async, asyncio.run loop)"] = asyncio.run(
            _timed_async(lambda: pool.call_tool("bench", TOOL, ARGS), n)
        )
        out["pooled HTTP (call_tool_sync)"] = _timed_sync(
            lambda: pool.call_tool_sync("bench-http", TOOL, ARGS), n
        )
        return out
    finally:
        pool.close()
        process.kill()
        process.wait()


def bench_default(n: int) -> list[float]:
    """langchain-mcp-adapters' default: MultiServerMCPClient(...).get_tools(), a new session per call."""
    from langchain_mcp_adapters.client import MultiServerMCPClient

    async def run() -> list[float]:
        client = MultiServerMCPClient(
            {"bench": {"transport": "stdio", "command": sys.executable, "args": [str(SERVER)]}}
        )
        tool = next(t for t in await client.get_tools() if t.name == TOOL)
        return await _timed_async(lambda: tool.ainvoke(ARGS), n)

    return asyncio.run(run())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pooled", type=int, default=200, help="calls per pooled variant")
    parser.add_argument("--default", type=int, default=20, help="calls with the adapters' default")
    args = parser.parse_args()

    rows = bench_pooled(args.pooled)
    rows[f"adapters default (new stdio session per call), n={args.default}"] = bench_default(args.default)

    print(f"{'way of calling':58} {'n':>5} {'p50 ms':>9} {'p99 ms':>9} {'mean ms':>9}")
    for name, samples in rows.items():
        print(
            f"{name:58} {len(samples):>5} {_percentile(samples, 0.5):>9.2f} "
            f"{_percentile(samples, 0.99):>9.2f} {statistics.fmean(samples):>9.2f}"
        )
    pooled = _percentile(rows["pooled stdio (call_tool_sync)"], 0.5)
    default = _percentile(next(v for k, v in rows.items() if k.startswith("adapters default")), 0.5)
    ratio = default / pooled
    print(f"\np50 ratio, adapters default / pooled stdio: {ratio:,.0f}x (target >= 100x)")


if __name__ == "__main__":
    main()
