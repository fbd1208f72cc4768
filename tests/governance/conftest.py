"""Fixtures for impact analyses: a seed rule set, its published v1, and runs recorded by the real pre-step.

A recorded run is what a worker leaves behind: the Run row (real input, rule set name and ref) and
the steps the engine's pre-step emits through the product's own step sink (agents.sink.DbStepSink),
masked by the privacy settings in force. Tools are not contacted: the backend answers each call.
"""

from __future__ import annotations

import pytest

from agents.models import Agent
from llamon_web.demo import SEED_RULES
from rules import services as rule_services
from rules.models import RuleSet
from tests.support.rule_sets import build_rule_set


@pytest.fixture
def seed_v1(editor, demo_servers) -> RuleSet:  # noqa: F811
    """The seed's three rules, published as v1 (what the recorded runs ran)."""
    rule_set = build_rule_set(editor, "seed", SEED_RULES)
    rule_services.rule_set_publish(actor=editor, rule_set=rule_set, message="v1")
    rule_set.refresh_from_db()
    return rule_set


@pytest.fixture
def seed_agent(seed_v1) -> Agent:
    return Agent.objects.create(
        name="seed-agent", system_prompt="p", rule_set=seed_v1, rule_set_mode="latest"
    )
