"""Fixtures for the agents app: a rule set with two published versions and an agent pinned to the first."""

from __future__ import annotations

from typing import Any

import pytest

from agents.models import Agent
from llamon_web.demo import SEED_RULES
from rules import services as rule_services
from rules.models import RuleSetVersion
from tests.support.rule_sets import build_rule_set


@pytest.fixture
def author(make_user) -> Any:
    return make_user("editor")


@pytest.fixture
def versions(author, demo_servers) -> tuple[RuleSetVersion, RuleSetVersion]:
    """v1: the seed rules; v2: the same plus a rule that also looks the order up by userId."""
    rule_set = build_rule_set(author, "rollout", SEED_RULES)
    v1 = rule_services.rule_set_publish(actor=author, rule_set=rule_set)
    rule_services.rule_create(
        actor=author,
        rule_set=rule_set,
        name="order_by_user",
        mcp_id="order-service",
        tool_name="get_order",
        when='"주문" in ctx.query',
        params='{"query": ctx.context.get("userId", "none")}',
    )
    rule_set.refresh_from_db()
    v2 = rule_services.rule_set_publish(actor=author, rule_set=rule_set)
    return v1, v2


@pytest.fixture
def agent(versions) -> Agent:
    v1, _ = versions
    return Agent.objects.create(
        name="rollout-agent",
        system_prompt="p",
        rule_set=v1.rule_set,
        rule_set_mode="pinned",
        pinned_version=v1,
    )
