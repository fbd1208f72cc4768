# The seed page's three routing functions, unchanged (seed/000_9a17dbcadfbf3490.txt, "규칙 작성 예시").
# The page lists only route_order_lookup in its first example's DETERMINISTIC_TOOLS; here all three
# are registered, in the page's order, so that none is reported as "never called".
from llamon_agent.tools import deterministic_tool, DeterministicContext


@deterministic_tool(mcp_id="order-service")
def route_order_lookup(ctx: DeterministicContext) -> dict | None:
    """'주문 조회' 키워드 감지 시 get_order tool을 확정 호출."""
    if "주문" in ctx.query and "조회" in ctx.query:
        return {
            "tool_name": "get_order",
            "params": {"query": ctx.query},
        }
    return None  # 매치 안 됨 → ReAct로 위임


@deterministic_tool(mcp_id="customer-crm")
def route_by_chatbot_id(ctx: DeterministicContext) -> dict | None:
    """A2A context의 chatbotId에 따라 CRM lookup을 확정 호출."""
    chatbot_id = ctx.context.get("chatbotId")
    if chatbot_id == "premium-support":
        return {
            "tool_name": "get_customer_profile",
            "params": {"customer_id": ctx.context.get("userId")},
        }
    return None


@deterministic_tool(mcp_id="knowledge-base")
def route_by_available_tool(ctx: DeterministicContext) -> dict | None:
    """mcp_tools에서 이름으로 동적 선택 후 호출."""
    tool_names = {t.name for t in ctx.mcp_tools}
    if "search_docs" in tool_names and "검색" in ctx.query:
        return {"tool_name": "search_docs", "params": {"q": ctx.query}}
    return None


DETERMINISTIC_TOOLS = [
    route_order_lookup,
    route_by_chatbot_id,
    route_by_available_tool,
]
