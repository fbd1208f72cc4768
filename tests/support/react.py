"""The agent runtime's test kit: the seed's two rules, a static MCP backend that answers them, a
ReAct tool, an agent spec with a scripted model, and short ways to write requests and tool calls."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langchain_core.tools import tool

from llamon_agent.models import ModelConfig, ScriptedChatModel
from llamon_agent.prestep import DEFAULT_PRESTEP_INSTRUCTION, StaticToolBackend
from llamon_agent.react import AgentSpec
from llamon_agent.tools import AgentRequest, DeterministicContext, deterministic_tool

ORDER = {"order_id": "A-1001", "status": "shipped"}


# --------------------------------------------------------------------------- the seed's rules


@deterministic_tool(mcp_id="order-service")
def route_order_lookup(ctx: DeterministicContext) -> dict | None:
    """'주문 조회' 키워드 감지 시 get_order tool을 확정 호출."""
    if "주문" in ctx.query and "조회" in ctx.query:
        return {"tool_name": "get_order", "params": {"query": ctx.query}}
    return None


@deterministic_tool(mcp_id="customer-crm")
def route_by_chatbot_id(ctx: DeterministicContext) -> dict | None:
    """A2A context의 chatbotId에 따라 CRM lookup을 확정 호출."""
    if ctx.context.get("chatbotId") == "premium-support":
        return {"tool_name": "get_customer_profile", "params": {"customer_id": ctx.context.get("userId")}}
    return None


def fake_mcp(mcp_id: str, tool_name: str, params: dict[str, Any]) -> Any:
    if tool_name == "get_order":
        return {"found": True, "order": ORDER}
    if tool_name == "get_customer_profile":
        return {"customer_id": params["customer_id"], "tier": "premium"}
    raise AssertionError(f"unexpected call {tool_name}")


def backend(call: Callable[[str, str, dict[str, Any]], Any] = fake_mcp) -> StaticToolBackend:
    return StaticToolBackend(
        {"order-service": ["get_order", "list_orders"], "customer-crm": ["get_customer_profile"]}, call=call
    )


# --------------------------------------------------------------------------- ReAct tools


@tool
def list_orders(customer_id: str) -> dict:
    """List a customer's orders."""
    return {"customer_id": customer_id, "orders": [ORDER]}


@tool
def flaky_lookup(order_id: str) -> str:
    """Always fails."""
    raise RuntimeError(f"order {order_id} is locked")


def spec(**overrides: Any) -> AgentSpec:
    fields: dict[str, Any] = {
        "name": "support",
        "system_prompt": DEFAULT_PRESTEP_INSTRUCTION,
        "rules": [route_order_lookup, route_by_chatbot_id],
        "model": ModelConfig(provider="scripted", script=[]),
    }
    fields.update(overrides)
    return AgentSpec(**fields)


def scripted(*replies: dict[str, Any]) -> ScriptedChatModel:
    return ScriptedChatModel(script=list(replies))


def ask(text: str, **context: Any) -> AgentRequest:
    return AgentRequest(query=text, context=dict(context))


def calls_tool(name: str, **args: Any) -> dict[str, Any]:
    return {"content": "", "tool_calls": [{"name": name, "args": args}]}
