"""The served A2A app in process: a react runner for it, its JSON-RPC requests, and a seed-like rule."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx

from llamon_agent.models import ModelConfig
from llamon_agent.prestep import StaticToolBackend
from llamon_agent.react import AgentSpec
from llamon_agent.serve import ReactRunner
from llamon_agent.tools import DeterministicContext, deterministic_tool


@deterministic_tool(mcp_id="order-service")
def route_order(ctx: DeterministicContext) -> dict | None:
    if "주문" in ctx.query:
        return {"tool_name": "get_order", "params": {"query": ctx.query}}
    return None


@deterministic_tool(mcp_id="missing-server")
def route_missing(ctx: DeterministicContext) -> dict | None:
    return None


def react_runner(rules: list[Any]) -> ReactRunner:
    """A served react agent (offline model) whose order-service answers every call."""
    spec = AgentSpec(
        name="demo", system_prompt="Be brief.", rules=rules, model=ModelConfig(provider="offline")
    )
    backend = StaticToolBackend(
        {"order-service": ["get_order"]},
        call=lambda mcp_id, tool, params: {"order": "A-1001", "status": "shipped"},
    )
    return ReactRunner(spec, backend, [])


def post_a2a(app: Any, payload: dict[str, Any], headers: dict[str, str] | None = None) -> dict[str, Any]:
    """POST a JSON-RPC payload to the A2A app in process; the JSON answer."""

    async def go() -> dict[str, Any]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8001") as client:
            response = await client.post("/", json=payload, headers=headers or {})
            assert response.status_code == 200, response.text
            return response.json()

    return asyncio.run(go())


def a2a_v03_send(text: str, **metadata: Any) -> dict[str, Any]:
    """An A2A 0.3 ``message/send`` request with the text and a chatbotId DataPart."""
    message = {
        "kind": "message",
        "role": "user",
        "messageId": uuid.uuid4().hex,
        "parts": [{"kind": "text", "text": text}, {"kind": "data", "data": {"chatbotId": "premium-support"}}],
        "metadata": metadata,
    }
    return {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message}}
