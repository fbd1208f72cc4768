"""The demo servers' tool lists as tests store them, rule shapes beyond the seed's, and a rule set
built through the editor's services (the ``demo_servers`` fixture of tests/conftest.py uses TOOLS)."""

from __future__ import annotations

from typing import Any

from rules import services
from rules.models import RuleSet

TOOLS: dict[str, list[dict[str, Any]]] = {
    "order-service": [
        {
            "name": "get_order",
            "description": "Find an order by free text or id.",
            "input_schema": {
                "type": "object",
                "properties": {"query": {"type": "string"}, "order_id": {"type": "string"}},
            },
        },
        {
            "name": "list_orders",
            "description": "List a customer's orders.",
            "input_schema": {
                "type": "object",
                "properties": {"customer_id": {"type": "string"}, "status": {"type": "string"}},
                "required": ["customer_id"],
            },
        },
    ],
    "customer-crm": [
        {
            "name": "get_customer_profile",
            "description": "A customer's profile.",
            "input_schema": {
                "type": "object",
                "properties": {"customer_id": {"type": "string"}},
                "required": ["customer_id"],
            },
        },
    ],
    "knowledge-base": [
        {
            "name": "search_docs",
            "description": "Search help articles (Korean and English).",
            "input_schema": {
                "type": "object",
                "properties": {"q": {"type": "string"}, "limit": {"type": "integer"}},
                "required": ["q"],
            },
        },
    ],
}

# The seed page's three examples as expressions: the demo's own definitions.

# More shapes: a stop rule, a disabled one, contains_any, data_get, FileParts, a run-time error.
EXTRA_RULES: list[dict[str, Any]] = [
    {
        "name": "route_refund_first",
        "description": 'Refunds end the pre-step ("first match").',
        "mcp_id": "order-service",
        "tool_name": "list_orders",
        "when": 'contains_any(query.lower(), ["refund", "환불"])',
        "params": '{"customer_id": context.get("userId", "anonymous"), "status": "refund"}',
        "stop": True,
    },
    {
        "name": "route_faq_datapart",
        "description": "An FAQ ticket sent as a DataPart.",
        "mcp_id": "knowledge-base",
        "tool_name": "search_docs",
        "when": 'data_get("ticketType") == "faq"',
        "params": '{"q": query, "limit": data_get("limit", 3)}',
    },
    {
        "name": "route_everything_disabled",
        "description": "Would fire on everything, but it is switched off.",
        "mcp_id": "knowledge-base",
        "tool_name": "search_docs",
        "when": "True",
        "params": '{"q": query}',
        "enabled": False,
    },
    {
        "name": "route_first_file",
        "description": "Look up the first attached file's name.",
        "mcp_id": "knowledge-base",
        "tool_name": "search_docs",
        "when": "len(a2a_files or []) > 0",
        "params": '{"q": a2a_files[0].get("name", "")}',
    },
    {
        "name": "route_strict_mode",
        "description": "Fails at run time when the context has no 'mode' (it should use .get()).",
        "mcp_id": "customer-crm",
        "tool_name": "get_customer_profile",
        "when": '"strict" in query.lower() and context["mode"] == "vip"',
        "params": '{"customer_id": context.get("userId", "")}',
    },
]


def build_rule_set(actor: Any, name: str, rules: list[dict[str, Any]], description: str = "") -> RuleSet:
    """A rule set made through the editor's services, rules in the given order."""
    rule_set = services.rule_set_create(actor=actor, name=name, description=description)
    for rule in rules:
        services.rule_create(actor=actor, rule_set=rule_set, **rule)
    rule_set.refresh_from_db()
    return rule_set
