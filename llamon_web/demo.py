"""The demo: the example MCP servers, the seed's rule set with its cases, an agent and its first runs.

Idempotent: running it again changes nothing that is already there.
"""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from llamon_agent import demo_servers
from rules.models import RuleSet
from servers.models import McpServer
from servers.services import mcp_server_upsert

EXAMPLES = Path(demo_servers.__file__).parent  # the SDK ships them: installed, not in the checkout
DEMO_HTTP_PORT = 8765
SEED_RULE_SET = "seed-rules"
DEMO_AGENT = "seed-demo"

DEMO_SERVERS: list[dict[str, Any]] = [
    {
        "mcp_id": "order-service",
        "description": "Demo orders: get_order, list_orders (stdio).",
        "script": "order_service.py",
    },
    {
        "mcp_id": "customer-crm",
        "description": "Demo customer profiles: get_customer_profile (stdio).",
        "script": "customer_crm.py",
    },
    {
        "mcp_id": "knowledge-base",
        "description": "Demo help articles in Korean and English: search_docs (stdio).",
        "script": "knowledge_base.py",
    },
]

# The seed page's three examples ("규칙 작성 예시"), as expressions: their conditions paste in unchanged.
SEED_RULES: list[dict[str, Any]] = [
    {
        "name": "route_order_lookup",
        "description": "'주문 조회' 키워드 감지 시 get_order tool을 확정 호출.",
        "mcp_id": "order-service",
        "tool_name": "get_order",
        "when": '"주문" in ctx.query and "조회" in ctx.query',
        "params": '{"query": ctx.query}',
    },
    {
        "name": "route_by_chatbot_id",
        "description": "A2A context의 chatbotId에 따라 CRM lookup을 확정 호출.",
        "mcp_id": "customer-crm",
        "tool_name": "get_customer_profile",
        "when": 'ctx.context.get("chatbotId") == "premium-support"',
        "params": '{"customer_id": ctx.context.get("userId")}',
    },
    {
        "name": "route_by_available_tool",
        "description": "mcp_tools에서 이름으로 동적 선택 후 호출.",
        "mcp_id": "knowledge-base",
        "tool_name": "search_docs",
        "when": '"search_docs" in tool_names and "검색" in ctx.query',
        "params": '{"q": ctx.query}',
    },
]


def _fire(mcp_id: str, tool: str, params: dict[str, Any], match: str = "exact") -> dict[str, Any]:
    return {"mcp_id": mcp_id, "tool_name": tool, "params": params, "match": match}


def _none_of(*tools: str) -> list[dict[str, Any]]:
    return [{"tool_name": t} for t in tools]


SEED_CASES: list[dict[str, Any]] = [
    {
        "name": "주문 조회 (Korean order lookup)",
        "input": {"query": "주문 조회 부탁해 A-1001"},
        "expected": {
            "must_fire": [_fire("order-service", "get_order", {"query": "주문 조회 부탁해 A-1001"})],
            "must_not_fire": _none_of("search_docs"),
        },
    },
    {
        "name": "small talk fires nothing",
        "input": {"query": "날씨 어때?"},
        "expected": {
            "must_fire": [],
            "must_not_fire": _none_of("get_order", "get_customer_profile", "search_docs"),
        },
    },
    {
        "name": "English order lookup is left to the LLM",
        "input": {"query": "Can you look up my order A-1002?"},
        "expected": {"must_fire": [], "must_not_fire": _none_of("get_order")},
    },
    {
        "name": "premium-support chatbot loads the CRM profile",
        "input": {
            "query": "Where is my refund?",
            "context": {"chatbotId": "premium-support", "userId": "C-1001"},
        },
        "expected": {
            "must_fire": [_fire("customer-crm", "get_customer_profile", {"customer_id": "C-1001"})],
            "must_not_fire": _none_of("get_order"),
        },
    },
    {
        "name": "other chatbots skip the CRM",
        "input": {
            "query": "Where is my refund?",
            "context": {"chatbotId": "basic-support", "userId": "C-1001"},
        },
        "expected": {"must_fire": [], "must_not_fire": _none_of("get_customer_profile")},
    },
    {
        "name": "검색 goes to the knowledge base",
        "input": {"query": "환불 정책 검색해줘"},
        "expected": {
            "must_fire": [_fire("knowledge-base", "search_docs", {"q": "환불 정책 검색해줘"})],
            "must_not_fire": _none_of("get_order"),
        },
    },
    {
        "name": "order lookup and search both fire, in rule order",
        "input": {"query": "주문 조회 내역 검색"},
        "expected": {
            "must_fire": [
                _fire("order-service", "get_order", {"query": "주문 조회 내역 검색"}),
                _fire("knowledge-base", "search_docs", {}, "partial"),
            ],
            "must_not_fire": [],
        },
    },
    {
        "name": "premium order lookup calls two servers",
        "input": {
            "query": "주문 A-1003 조회",
            "context": {"chatbotId": "premium-support", "userId": "C-1002"},
        },
        "expected": {
            "must_fire": [
                _fire("order-service", "get_order", {"query": "주문 A-1003 조회"}),
                _fire("customer-crm", "get_customer_profile", {"customer_id": "C-1002"}),
            ],
            "must_not_fire": _none_of("search_docs"),
        },
    },
    {
        "name": "chatbotId in a DataPart is not the context (seed rule reads the context)",
        "input": {
            "query": "hello",
            "context": {"userId": "C-1003"},
            "a2a_data": [{"chatbotId": "premium-support"}],
        },
        "expected": {"must_fire": [], "must_not_fire": _none_of("get_customer_profile")},
    },
]

# One finished run per seed example, visible right after `make run` (the worker runs them).
SEED_RUNS: list[dict[str, Any]] = [
    {"query": "주문 조회 부탁해 A-1001", "context": {"userId": "C-1001", "sessionId": "demo-1"}},
    {
        "query": "Where is my refund?",
        "context": {"chatbotId": "premium-support", "userId": "C-1002", "sessionId": "demo-2"},
    },
    {"query": "카드 분실 신고 방법 검색해줘", "context": {"userId": "C-1003", "sessionId": "demo-3"}},
]


def demo_load(*, http_port: int = DEMO_HTTP_PORT, refresh_tools: bool = True, runs: bool = True) -> list[str]:
    """Register the demo (idempotent); returns lines describing what was added or kept."""
    from accounts.services import system_user_ensure

    actor = system_user_ensure()
    report = [
        f"{'added' if created else 'kept'} MCP server {mcp_id}" for mcp_id, created in _servers(http_port)
    ]
    if refresh_tools:
        report += _refresh_tools(actor)
    rule_set, created = _seed_rule_set(actor)
    report.append(
        f"{'added' if created else 'kept'} rule set {rule_set.name} with {rule_set.cases.count()} test cases"
    )
    agent, created = _seed_agent(actor, rule_set)
    report.append(f"{'added' if created else 'kept'} agent {agent.name}")
    if runs and not agent.runs.exists():
        report += _seed_runs(actor, agent)
    return report


def _servers(http_port: int) -> list[tuple[str, bool]]:
    done = []
    for entry in DEMO_SERVERS:
        _, created = mcp_server_upsert(
            actor=None,
            mcp_id=entry["mcp_id"],
            description=entry["description"],
            transport="stdio",
            command=sys.executable,
            args=[str(EXAMPLES / entry["script"])],
            timeout_s=30.0,
        )
        done.append((entry["mcp_id"], created))
    _, created = mcp_server_upsert(
        actor=None,
        mcp_id="order-service-http",
        description="The order service over streamable HTTP (started by `make run`).",
        transport="http",
        url=f"http://127.0.0.1:{http_port}/mcp",
        timeout_s=30.0,
    )
    done.append(("order-service-http", created))
    return done


def _refresh_tools(actor: Any) -> list[str]:
    """List the stdio demo servers' tools once (dry runs and static checks need them)."""
    from servers.services import McpServerError, mcp_server_refresh_tools

    lines = []
    for server in McpServer.objects.filter(
        mcp_id__in=[s["mcp_id"] for s in DEMO_SERVERS], tools_refreshed_at__isnull=True
    ):
        try:
            mcp_server_refresh_tools(actor=actor, server=server)
            lines.append(f"listed the tools of {server.mcp_id}: {', '.join(t['name'] for t in server.tools)}")
        except McpServerError as exc:
            lines.append(f"could not list the tools of {server.mcp_id}: {exc.message}")
    return lines


def demo_http_tools(*, timeout_s: float = 30.0) -> str:
    """List the tools of the demo's HTTP server once it answers (`make run` starts it beside the web
    server, after the demo is loaded), unless they are listed already. Returns the line to log."""
    from accounts.services import system_user_ensure
    from servers.services import McpServerError, mcp_server_refresh_tools

    server = McpServer.objects.filter(mcp_id="order-service-http").first()
    if server is None or (server.tools and server.tools_refreshed_at is not None):
        return ""
    address = urlsplit(server.url)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection((address.hostname, address.port or 80), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                return f"could not list the tools of {server.mcp_id}: nothing answers at {server.url} yet"
            time.sleep(0.2)
    try:
        mcp_server_refresh_tools(actor=system_user_ensure(), server=server)
    except McpServerError as exc:
        return f"could not list the tools of {server.mcp_id}: {exc.message}"
    return f"listed the tools of {server.mcp_id}: {', '.join(t['name'] for t in server.tools)}"


def _seed_rule_set(actor: Any) -> tuple[RuleSet, bool]:
    from rules import services
    from rules.cases import case_create

    existing = RuleSet.objects.filter(name=SEED_RULE_SET).first()
    if existing is not None:
        return existing, False
    rule_set = services.rule_set_create(
        actor=actor, name=SEED_RULE_SET, description="The seed page's three routing examples, as expressions."
    )
    for rule in SEED_RULES:
        services.rule_create(actor=actor, rule_set=rule_set, **rule)
    for case in SEED_CASES:
        case_create(actor=actor, rule_set=rule_set, **case)
    services.rule_set_publish(actor=actor, rule_set=rule_set, message="The seed's examples")
    return rule_set, True


def _seed_agent(actor: Any, rule_set: RuleSet) -> tuple[Any, bool]:
    from agents.models import Agent
    from agents.services import agent_save
    from llamon_agent.prestep import DEFAULT_PRESTEP_INSTRUCTION

    existing = Agent.objects.filter(name=DEMO_AGENT).first()
    if existing is not None:
        return existing, False
    agent = Agent(
        name=DEMO_AGENT,
        description="Answers from the pre-step results with the offline model (no network).",
        system_prompt=f"You are a customer-support agent for an online shop.\n{DEFAULT_PRESTEP_INSTRUCTION}",
        rule_set=rule_set,
        rule_set_mode="latest",
        model_provider="offline",
        output_masks=["card_number", "email"],
    )
    return agent_save(actor=actor, agent=agent), True


def _seed_runs(actor: Any, agent: Any) -> list[str]:
    from agents.services import run_create
    from llamon_agent.tools import AgentRequest

    runs = [run_create(actor=actor, agent=agent, request=AgentRequest(**entry)) for entry in SEED_RUNS]
    return [f"queued demo run {run.pk}: {run.query}" for run in runs]
