"""The seed's three routing functions, written as expression rules, give the same results."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from llamon_agent.expr import ExpressionRule, build_namespace, expression_rule
from llamon_agent.tools import DeterministicContext, ToolInfo, rule_info

SEED_TOOLS = Path(__file__).resolve().parents[2] / "examples" / "seed_project" / "app" / "tools.py"


def _load_seed() -> ModuleType:
    # A unique module name and no sys.path change: other tests may import their own `app`.
    spec = importlib.util.spec_from_file_location("_llamon_seed_tools_for_expr_tests", SEED_TOOLS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SEED = _load_seed()

# The seed page's conditions and params, pasted unchanged (docs/architecture.md "Rules stored as data").
RULES: dict[str, ExpressionRule] = {
    "route_order_lookup": expression_rule(
        name="route_order_lookup",
        mcp_id="order-service",
        tool_name="get_order",
        when='"주문" in ctx.query and "조회" in ctx.query',
        params='{"query": ctx.query}',
    ),
    "route_by_chatbot_id": expression_rule(
        name="route_by_chatbot_id",
        mcp_id="customer-crm",
        tool_name="get_customer_profile",
        when='ctx.context.get("chatbotId") == "premium-support"',
        params='{"customer_id": ctx.context.get("userId")}',
    ),
    "route_by_available_tool": expression_rule(
        name="route_by_available_tool",
        mcp_id="knowledge-base",
        tool_name="search_docs",
        when='"search_docs" in tool_names and "검색" in ctx.query',
        params='{"q": ctx.query}',
    ),
}

SEARCH = ToolInfo(name="search_docs", description="Search the docs", input_schema={"type": "object"})
OTHER = ToolInfo(name="get_article")


def _ctx(
    query: str,
    context: dict[str, Any] | None = None,
    tools: list[ToolInfo] | None = None,
    a2a_data: list[dict[str, Any]] | None = None,
    a2a_files: list[dict[str, Any]] | None = None,
) -> DeterministicContext:
    return DeterministicContext(
        query=query,
        context={} if context is None else context,
        a2a_data=a2a_data,
        a2a_files=a2a_files,
        mcp_tools=list(tools or []),
    )


PREMIUM = {"chatbotId": "premium-support", "userId": "user-7", "sessionId": "s-1"}

CONTEXTS: list[DeterministicContext] = [
    _ctx("주문 조회 부탁해"),  # the seed page's own test case
    _ctx("날씨 어때?"),  # the seed page's "no match" case
    _ctx("주문조회"),
    _ctx("조회 말고 주문 취소"),
    _ctx("주문 내역"),
    _ctx("조회만"),
    _ctx("order lookup please"),
    _ctx("", PREMIUM),
    _ctx("hello", PREMIUM),
    _ctx("주문 조회 해주세요", PREMIUM),
    _ctx("hello", {"chatbotId": "premium-support"}),  # no userId: params carry None
    _ctx("hello", {"chatbotId": "basic-support", "userId": "user-8"}),
    _ctx("hello", {"chatbotId": "Premium-Support", "userId": "user-9"}),
    _ctx("hello", {"chatbotId": None}),
    _ctx("hello", {"userId": "user-10"}),
    _ctx("문서 검색", tools=[SEARCH]),
    _ctx("문서 검색", tools=[OTHER]),
    _ctx("문서 검색"),
    _ctx("search the docs", tools=[SEARCH]),
    _ctx("검색해서 주문 조회", PREMIUM, tools=[OTHER, SEARCH]),
    _ctx("주문 조회 검색", tools=[SEARCH], a2a_data=[{"chatbotId": "premium-support"}]),
    _ctx("검색", {"chatbotId": "premium-support", "userId": 42}, tools=[SEARCH]),
    _ctx("Order 주문 Status 조회 🙂", a2a_files=[{"name": "a.pdf", "size": 10}]),
    _ctx("  검색  ", {"chatbotId": "premium-support", "userId": {"id": 1, "tier": ["gold"]}}),
]


def test_the_table_is_big_enough() -> None:
    assert len(CONTEXTS) >= 20


@pytest.mark.parametrize("name", list(RULES))
def test_rule_info_matches_the_seed_decorator(name: str) -> None:
    seed_info = rule_info(getattr(SEED, name))
    info = rule_info(RULES[name])
    assert (info.name, info.mcp_id, info.stop) == (seed_info.name, seed_info.mcp_id, seed_info.stop)


@pytest.mark.parametrize("ctx", CONTEXTS, ids=[f"{i}:{c.query[:12]}" for i, c in enumerate(CONTEXTS)])
@pytest.mark.parametrize("name", list(RULES))
def test_expression_rule_gives_the_seed_functions_result(name: str, ctx: DeterministicContext) -> None:
    expected = getattr(SEED, name)(ctx)
    assert RULES[name](ctx) == expected
    # The pre-step's path: one namespace per request and server, shared by its rules.
    assert RULES[name].evaluate_ns(build_namespace(ctx)) == expected


@pytest.mark.parametrize("ctx", CONTEXTS, ids=[f"{i}:{c.query[:12]}" for i, c in enumerate(CONTEXTS)])
def test_the_keyword_hint_never_hides_a_firing_rule(ctx: DeterministicContext) -> None:
    for name, rule in RULES.items():
        keywords = rule_info(rule).keywords
        if getattr(SEED, name)(ctx) is not None and keywords is not None:
            assert any(word in (ctx.query.lower() if low else ctx.query) for word, low in keywords)


def test_every_seed_rule_fires_somewhere_and_skips_somewhere() -> None:
    for name in RULES:
        outcomes = [getattr(SEED, name)(ctx) is None for ctx in CONTEXTS]
        assert any(outcomes) and not all(outcomes), name


def test_keyword_hints_of_the_seed_rules() -> None:
    assert rule_info(RULES["route_order_lookup"]).keywords == frozenset({("주문", False)})
    assert rule_info(RULES["route_by_chatbot_id"]).keywords is None
    assert rule_info(RULES["route_by_available_tool"]).keywords == frozenset({("검색", False)})
