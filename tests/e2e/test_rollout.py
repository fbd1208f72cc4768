"""Staged rollout as an editor meets it: start a rollout of v2 on the agent's page, then promote it."""

from __future__ import annotations

import pytest

from agents.models import Agent
from core.models import AuditEvent
from rules import services as rule_services
from tests.e2e.conftest import screenshot

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("demo")]


def test_start_a_rollout_then_promote_it(page, logged_in) -> None:
    agent = Agent.objects.get(name="seed-demo")
    rule_set = agent.rule_set
    rule = rule_set.rules.order_by("position").first()
    rule_services.rule_update(actor=None, rule=rule, revision=rule.revision, description="v2 wording")
    rule_set.refresh_from_db()
    v2 = rule_services.rule_set_publish(actor=None, rule_set=rule_set, message="v2")

    logged_in("editor")
    page.goto("/agents/")
    page.click(f"a[href='/agents/{agent.pk}/rollout']")
    assert "No rollout" in page.inner_text("#rollout-state")
    page.select_option("#id_version", str(v2.number))
    page.fill("#id_percent", "25")
    page.fill("#id_chatbot_ids", "premium-support\nbeta-bot")
    page.click("#rollout-form button[type=submit]")
    page.wait_for_selector("#rollout-promote")
    state = page.inner_text("#rollout-state")
    assert f"v{v2.number}" in state and "25 %" in state and "beta-bot" in state
    screenshot(page, "staged-rollout")

    # A hostile share is refused in place, and the running rollout is kept.
    page.fill("#id_percent", "250")
    page.eval_on_selector("#id_percent", "el => el.removeAttribute('max')")  # past the browser's own check
    page.click("#rollout-form button[type=submit]")
    assert "Ensure this value is less than or equal to 100" in page.inner_text("#rollout-form")
    assert Agent.objects.get(pk=agent.pk).rollout_percent == 25

    page.goto(f"/agents/{agent.pk}/rollout")
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#rollout-promote")
    page.wait_for_selector("text=Promoted")
    assert "No rollout" in page.inner_text("#rollout-state")
    assert page.inner_text("#rollout-stable") == f"v{v2.number}"
    agent.refresh_from_db()
    assert (agent.rule_set_mode, agent.pinned_version, agent.rollout_version) == ("pinned", v2, None)
    assert AuditEvent.objects.filter(action="agent.rollout.promote", object_id=str(agent.pk)).exists()
