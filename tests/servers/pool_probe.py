"""What the SDK's MCP pool sees of tests/servers/orders_server.py: its tools, results, a tool error,
a LangChain call and a timed-out call cancelled on the server, as one JSON-ready dict.

tests/engine/test_mcp2_servers.py calls :func:`probe` in-process (the project's mcp 1.x installed)
and runs this file in var/venvs/mcp-2 (mcp 2 installed, ``sdk/src`` on PYTHONPATH), so that both
runs are held to the same expected facts. Run: ``python tests/servers/pool_probe.py SPECS_JSON``
(a list of McpServerSpec dicts); prints ``{"mcp": version, "servers": {mcp_id: facts}}``.
"""

from __future__ import annotations

import json
import sys
import time
from importlib import metadata
from typing import Any

from llamon_agent.mcp.errors import McpError
from llamon_agent.mcp.pool import McpPool
from llamon_agent.mcp.spec import McpServerSpec

CANCEL_WAIT_S = 10.0  # how long the server gets to count the cancelled call (not a speed check)


def _failure(call: Any) -> list[Any]:
    try:
        call()
    except McpError as exc:
        return [type(exc).__name__, str(exc)]
    return ["no error", ""]


def probe(pool: McpPool, server: str) -> dict[str, Any]:
    """The facts of ``server`` (registered in ``pool``) that the tests hold both majors to."""
    tools = {tool.name: tool for tool in pool.list_tools_sync(server)}
    get_order = tools["get_order"]
    facts: dict[str, Any] = {
        "tools": sorted(tools),
        "get_order": {
            "description": get_order.description,
            "required": get_order.inputSchema.get("required"),
            "input": {name: spec.get("type") for name, spec in get_order.inputSchema["properties"].items()},
            "output": {
                name: spec.get("type") for name, spec in (get_order.outputSchema or {})["properties"].items()
            },
        },
        # A scalar return is wrapped by the server as {"result": ...}, and its schema says so.
        "count_orders_output": (tools["count_orders"].outputSchema or {}).get("properties"),
    }
    value, warnings = pool.call_tool_checked_sync(server, "get_order", {"order_id": "A-1"})
    facts["get_order_result"] = [value, warnings]
    count, warnings = pool.call_tool_checked_sync(server, "count_orders", {"status": "shipped"})
    facts["count_orders_result"] = [count, type(count).__name__, warnings]
    facts["protocol_version"] = pool.call_tool_sync(server, "session_facts")["protocol_version"]
    kind, message = _failure(lambda: pool.call_tool_sync(server, "get_order", {"order_id": "Z-9"}))
    facts["tool_error"] = [
        kind,
        f"MCP server '{server}', tool 'get_order': " in message and "no order Z-9" in message,
    ]
    lc_tools = {tool.name: tool for tool in pool.langchain_tools_sync(server)}
    facts["langchain"] = json.loads(lc_tools["get_order"].invoke({"order_id": "B-7"})[0]["text"])["status"]

    before = pool.call_tool_sync(server, "session_facts")["cancelled"]
    facts["timeout"] = _failure(
        lambda: pool.call_tool_sync(server, "slow_answer", {"seconds": 30}, timeout=0.3)
    )
    deadline = time.monotonic() + CANCEL_WAIT_S
    while pool.call_tool_sync(server, "session_facts")["cancelled"] == before and time.monotonic() < deadline:
        time.sleep(0.05)
    facts["cancelled_on_server"] = pool.call_tool_sync(server, "session_facts")["cancelled"] - before
    facts["after_timeout"] = pool.call_tool_sync(server, "slow_answer", {"seconds": 0})
    facts["connects"] = pool.stats_sync(server)["connects"]  # one session throughout
    return facts


def main() -> None:
    specs = [McpServerSpec.model_validate(entry) for entry in json.loads(sys.argv[1])]
    pool = McpPool()
    try:
        for spec in specs:
            pool.register(spec)
        servers = {spec.mcp_id: probe(pool, spec.mcp_id) for spec in specs}
    finally:
        pool.close()
    print(json.dumps({"mcp": metadata.version("mcp"), "servers": servers}))


if __name__ == "__main__":
    main()
