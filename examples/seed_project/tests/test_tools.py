# The seed page's two test functions, unchanged ("테스트 전략").
from llamon_agent.tools import DeterministicContext
from app.tools import route_order_lookup


def test_route_matches_on_keyword():
    ctx = DeterministicContext(
        query="주문 조회 부탁해",
        context={},
        a2a_data=None,
        a2a_files=None,
        mcp_tools=[],
    )
    result = route_order_lookup(ctx)
    assert result == {"tool_name": "get_order", "params": {"query": "주문 조회 부탁해"}}


def test_route_skips_when_no_match():
    ctx = DeterministicContext(
        query="날씨 어때?",
        context={}, a2a_data=None, a2a_files=None, mcp_tools=[],
    )
    assert route_order_lookup(ctx) is None
