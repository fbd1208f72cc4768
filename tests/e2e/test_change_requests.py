"""Approvals in the browser: an editor's rollout on a protected agent waits for a second person."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.test import Client

from accounts.roles import approver_set
from agents import services
from agents.models import Agent
from llamon_web.demo import SEED_RULES
from rules import services as rule_services
from tests.e2e.conftest import screenshot
from tests.support.rule_sets import build_rule_set

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("demo_servers"),
]


def test_a_rollout_on_a_protected_agent_applies_once_a_second_person_approves(
    page, logged_in, make_user, live_server
) -> None:
    rule_set = build_rule_set(None, "seed-rules", SEED_RULES)
    v1 = rule_services.rule_set_publish(actor=None, rule_set=rule_set, message="v1")
    agent = Agent.objects.create(
        name="seed-demo", system_prompt="p", rule_set=rule_set, rule_set_mode="pinned", pinned_version=v1
    )
    rule = rule_set.rules.order_by("position").first()
    rule_services.rule_update(actor=None, rule=rule, revision=rule.revision, description="v2 wording")
    v2 = rule_services.rule_set_publish(actor=None, rule_set=rule_set, message="v2")
    services.agent_protect(actor=make_user("admin"), agent=agent, protected=True, approvals_required=1)

    logged_in("editor")
    page.goto(f"/agents/{agent.pk}/rollout")
    assert "protected" in page.inner_text("#rollout-protected")
    page.select_option("#id_version", str(v2.number))
    page.fill("#id_percent", "10")
    page.fill("#id_change_reason", "v2 rewords the order lookup; impact analysis shows no changed calls")
    page.click("#rollout-form button[type=submit]")
    page.wait_for_selector("#change-state")
    assert "change request #" in page.inner_text("main") and page.inner_text("#change-state") == "pending"
    assert page.locator("#change-approve").count() == 0  # the requester cannot approve
    assert Agent.objects.get(pk=agent.pk).rollout_version_id is None

    approver = make_user("viewer")
    approver_set(user=approver, approver=True)
    client = Client()
    client.force_login(approver)
    cookie = client.cookies[settings.SESSION_COOKIE_NAME]
    page.context.add_cookies([{"name": cookie.key, "value": cookie.value, "url": live_server.url}])
    page.reload()
    page.fill("#id_comment", "Checked the diff and the impact analysis.")
    screenshot(page, "change-request")
    page.click("#change-approve")
    page.wait_for_selector("text=the change is applied")
    assert page.inner_text("#change-state") == "applied"
    agent.refresh_from_db()
    assert (agent.rollout_version, agent.rollout_percent) == (v2, 10)


@pytest.mark.parametrize("language", ["en", "ko"])
def test_an_approver_sees_the_count_reads_the_share_and_the_impact_and_approves(
    page, make_user, live_server, language
) -> None:
    from accounts.services import language_set
    from agents.errors import ChangeRequested
    from agents.models import ChangeRequest
    from governance.models import ImpactAnalysis
    from governance.services import impact_execute

    rule_set = build_rule_set(None, "seed-rules", SEED_RULES)
    v1 = rule_services.rule_set_publish(actor=None, rule_set=rule_set, message="v1")
    agent = Agent.objects.create(
        name="seed-demo", system_prompt="p", rule_set=rule_set, rule_set_mode="pinned", pinned_version=v1
    )
    rule = rule_set.rules.order_by("position").first()
    rule_services.rule_update(actor=None, rule=rule, revision=rule.revision, description="v2 wording")
    services.agent_protect(actor=make_user("admin"), agent=agent, protected=True, approvals_required=1)
    author = make_user("editor")
    with pytest.raises(ChangeRequested):
        services.rollout_publish(
            actor=author, agent=agent, percent=25, chatbot_ids=["bot-a"], change_reason="v2 rewords a rule"
        )
    change = ChangeRequest.objects.get()

    approver = make_user("viewer")
    approver_set(user=approver, approver=True)
    client = Client()
    client.force_login(approver)
    cookie = client.cookies[settings.SESSION_COOKIE_NAME]
    page.context.add_cookies([{"name": cookie.key, "value": cookie.value, "url": live_server.url}])
    language_set(user=approver, language=language)
    page.goto("/")
    assert page.locator("html").get_attribute("lang") == language
    assert page.inner_text("#nav-inbox-count") == "1"
    assert page.inner_text("#nav-inbox").startswith("승인" if language == "ko" else "Approvals")
    screenshot(page, f"change-inbox-{language}", element=page.locator("header"))
    page.click("#nav-inbox")
    page.click(f"a[href='/agents/changes/{change.pk}/']")
    page.wait_for_selector("#change-diff")
    diff = page.inner_text("#change-diff")
    assert "rollout_percent" in diff and "25" in diff and "bot-a" in diff
    page.click("#change-impact-run")
    page.wait_for_selector("#change-impact-report")
    impact_execute(analysis_id=ImpactAnalysis.objects.get().pk)  # what the worker does
    page.reload()
    page.wait_for_selector("#change-impact-report #impact-summary")
    assert page.locator("#impact-replayed").count() == 1
    screenshot(page, f"change-request-impact-{language}")
    page.fill("#id_comment", "확인했습니다." if language == "ko" else "Read the share and the impact.")
    page.click("#change-approve")
    page.wait_for_selector("#change-state")
    change.refresh_from_db()
    assert change.state == "applied"
    agent.refresh_from_db()
    assert agent.rollout_percent == 25 and agent.rollout_chatbot_ids == ["bot-a"]
    assert page.locator("#nav-inbox-count").count() == 0


def _login_as(page, live_server, user) -> None:
    client = Client()
    client.force_login(user)
    cookie = client.cookies[settings.SESSION_COOKIE_NAME]
    page.context.clear_cookies()
    page.context.add_cookies([{"name": cookie.key, "value": cookie.value, "url": live_server.url}])


@pytest.mark.parametrize("language", ["en", "ko"])
def test_making_an_approver_waits_for_a_second_person_who_approves_it(
    page, make_user, live_server, language
) -> None:
    """While an agent is protected, an admin's grant of the approver permission is a change request:
    the users page leads to it, the admin cannot approve it, an independent approver does."""
    from accounts.roles import is_approver
    from accounts.services import language_set

    rule_set = build_rule_set(None, "seed-rules", SEED_RULES)
    v1 = rule_services.rule_set_publish(actor=None, rule_set=rule_set, message="v1")
    agent = Agent.objects.create(
        name="seed-demo", system_prompt="p", rule_set=rule_set, rule_set_mode="pinned", pinned_version=v1
    )
    admin = make_user("admin")
    services.agent_protect(actor=admin, agent=agent, protected=True, approvals_required=1)
    person = make_user("viewer", username="kim.minji")
    approver = make_user("viewer")
    approver_set(user=approver, approver=True)
    for user in (admin, approver):
        language_set(user=user, language=language)

    _login_as(page, live_server, admin)
    page.goto(f"/users/{person.pk}/")
    page.click("#approver-form button[type=submit]")
    page.wait_for_selector("#change-state")
    text = page.inner_text("main")
    assert ("권한 부여에도 두 사람" if language == "ko" else "granting power takes four eyes") in text
    assert "kim.minji" in page.inner_text("h1") and page.locator("#change-approve").count() == 0
    screenshot(page, f"change-grant-request-{language}")
    assert not is_approver(type(person).objects.get(pk=person.pk))

    _login_as(page, live_server, approver)
    page.goto("/")
    assert page.inner_text("#nav-inbox-count") == "1"
    page.click("#nav-inbox")
    page.click("td a[href^='/agents/changes/']")
    page.wait_for_selector("#change-approve")
    assert "user.set_approver" in page.inner_text("#change-summary")
    page.click("#change-approve")
    page.wait_for_selector("#change-state")
    assert page.locator("#nav-inbox-count").count() == 0
    assert is_approver(type(person).objects.get(pk=person.pk))
