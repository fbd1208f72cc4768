"""Staged rollout as an editor meets it: start a rollout of v2 on the agent's page, then promote it."""

from __future__ import annotations

import pytest

from agents import services as run_services
from agents.models import Agent, Run
from core.models import AuditEvent
from llamon_agent.tools import AgentRequest
from rules import services as rule_services
from tests.e2e.conftest import screenshot

# reset_sequences: the demo agent gets the same id in every run, so the sessions' buckets (a hash
# of agent id and session id) are the same too: the 10 % share test cannot flake on the draw.
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True, reset_sequences=True),
    pytest.mark.usefixtures("demo"),
]


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


def _sessions(agent: Agent, prefix: str, count: int) -> list[Run]:
    """``count`` runs of new sessions, each executed as a worker executes it (in this process)."""
    runs = []
    for n in range(count):
        run = run_services.run_create(
            actor=None,
            agent=agent,
            request=AgentRequest(query="주문 조회 A-1001", context={"sessionId": f"{prefix}-{n}"}),
        )
        run_services.run_execute(run_id=run.pk)
        runs.append(Run.objects.get(pk=run.pk))
    return runs


@pytest.mark.slow  # 20 s or more in the parallel suite: scheduled first, so the workers finish together
def test_on_the_shipped_demo_a_10_percent_rollout_serves_a_share_and_roll_back_ends_it(
    page, logged_in
) -> None:
    """Issue 28's acceptance: agent in "latest", publish v+1, 10 % rollout, roll back."""
    agent = Agent.objects.get(name="seed-demo")
    assert agent.rule_set_mode == "latest"
    rule_set = agent.rule_set
    before = rule_set.versions.order_by("-number").first()
    rule = rule_set.rules.order_by("position").first()
    rule_services.rule_update(actor=None, rule=rule, revision=rule.revision, description="the fix")

    logged_in("editor")
    page.goto(f"/rules/{rule_set.pk}/versions/")
    # Before the click: publishing goes live for every session of the agent at once.
    assert "seed-demo" in page.inner_text("#publish-goes-live")
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("button:has-text('Publish')")
    page.wait_for_selector("#version-table")
    candidate = rule_set.versions.order_by("-number").first()
    assert candidate.number == before.number + 1

    page.goto(f"/agents/{agent.pk}/rollout")
    assert "each publish goes live for every session at once" in page.inner_text("#rollout-latest-note")
    page.select_option("#id_version", str(candidate.number))
    page.fill("#id_percent", "10")
    page.click("#rollout-form button[type=submit]")
    page.wait_for_selector("#rollout-promote")
    assert f"v{before.number} stays the stable version" in page.inner_text("#messages")
    assert page.inner_text("#rollout-stable") == f"v{before.number}"

    served = _sessions(agent, "during", 50)
    assert all(r.status == Run.Status.SUCCEEDED for r in served), [r.error for r in served]
    on_candidate = [r for r in served if r.rollout_candidate]
    assert all(r.rule_set_ref == f"v{candidate.number}" for r in on_candidate)
    assert all(r.rule_set_ref == f"v{before.number}" for r in served if not r.rollout_candidate)
    assert len(on_candidate) <= 10, f"{len(on_candidate)} of 50 sessions got the candidate"
    # The page, left open, shows the figures per version live (its poller, no reload).
    stable_runs = 50 - len(on_candidate)
    page.wait_for_function(
        "n => document.querySelector('#rollout-served tr.served-stable td:nth-child(3)')?.innerText === String(n)",
        arg=stable_runs,
        timeout=12_000,
    )
    cells = page.locator("#rollout-served tr.served-stable td").all_inner_texts()
    fired = sum(r.prestep_calls > 0 for r in served if not r.rollout_candidate)
    assert cells[0].startswith(f"v{before.number}") and cells[1] == str(stable_runs)
    assert cells[3] == "0 (0.0 %)" and cells[4] == f"{fired} ({round(fired * 100 / stable_runs, 1)} %)"
    candidate_row = page.inner_text("#rollout-served tr.served-candidate")
    assert f"v{candidate.number}" in candidate_row and "no shadow data" in candidate_row
    assert f"waiting: {len(on_candidate)} of 20 runs" in page.inner_text("#rollout-guard-state")
    screenshot(page, "rollout-figures")

    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#rollout-rollback")
    page.wait_for_selector("text=Rolled back")
    after = _sessions(agent, "after", 10) + _sessions(agent, "during", 10)  # new and known sessions
    assert [r.rollout_candidate for r in after] == [False] * 20
    assert {r.rule_set_ref for r in after} == {f"v{before.number}"}
