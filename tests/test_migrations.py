"""Upgrades keep what people made: a database written before a move reads the same after it."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from accounts.models import ApiToken, UserInvite, UserProfile
from accounts.roles import user_roles
from accounts.token_services import token_authenticate, token_hash
from core.models import AuditEvent

BEFORE_THE_MOVE = [("llamon_web", "0004_user_profile_invite"), ("accounts", None), ("core", None)]


def _migrate(targets: list[tuple[str, str | None]]):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state([t for t in targets if t[1] is not None]).apps


@pytest.mark.django_db(transaction=True)
def test_people_and_the_audit_log_survive_the_move_out_of_the_project_package() -> None:
    old = _migrate(BEFORE_THE_MOVE)  # the tables as the code before the move left them
    User = old.get_model("auth", "User")
    Group = old.get_model("auth", "Group")
    OldToken = old.get_model("llamon_web", "ApiToken")
    OldAudit = old.get_model("llamon_web", "AuditEvent")
    OldProfile = old.get_model("llamon_web", "UserProfile")
    OldInvite = old.get_model("llamon_web", "UserInvite")

    kim = User.objects.create(username="kim", password="!")
    kim.groups.add(Group.objects.get_or_create(name="editor")[0])
    secret = "llamon_abcd1234_" + "x" * 43
    OldToken.objects.create(user=kim, name="ci", prefix="abcd1234", token_hash=token_hash(secret))
    OldProfile.objects.create(user=kim, language="ko")
    OldInvite.objects.create(user=kim, token_hash="0" * 64, expires_at=timezone.now())
    OldAudit.objects.create(
        actor=kim,
        actor_name="kim",
        action="api_token.create",
        object_type="llamon_web.apitoken",
        object_id="1",
    )
    OldAudit.objects.create(
        actor=None, actor_name="system", action="user.create", object_type="auth.user", object_id=str(kim.pk)
    )

    _migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())

    person = get_user_model().objects.get(username="kim")
    assert user_roles(person) == {"viewer", "editor"}
    token = ApiToken.objects.get(user=person)
    assert (token.name, token.prefix) == ("ci", "abcd1234")
    assert UserProfile.objects.get(user=person).language == "ko"
    assert UserInvite.objects.filter(user=person).count() == 1
    assert token_authenticate(secret) == (person, token)  # the old token still signs its user in
    events = AuditEvent.objects.order_by("id")
    assert [(e.action, e.object_type) for e in events] == [
        ("api_token.create", "accounts.apitoken"),
        ("user.create", "auth.user"),
    ]
    assert events[0].actor == person


@pytest.mark.django_db(transaction=True)
def test_agents_keep_their_endpoint_as_legacy_values_until_a_connection_pairs_it() -> None:
    """Issue 28: the free base URL + key variable of an agent stop being used to connect."""
    old = _migrate([("agents", "0011_runstep_order_by_column")])
    OldAgent = old.get_model("agents", "Agent")
    common = {"system_prompt": "p", "model_name": "m"}
    OldAgent.objects.create(
        name="remote",
        model_provider="openai-compatible",
        model_base_url="http://127.0.0.1:9/v1",
        model_api_key_env="OPENAI_API_KEY",
        **common,
    )
    OldAgent.objects.create(
        name="offline",
        model_provider="offline",
        model_base_url="http://127.0.0.1:9/v1",
        model_api_key_env="OPENAI_API_KEY",
        **common,
    )

    _migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())

    from agents.checks import agent_model_problem
    from agents.models import Agent

    remote, offline = Agent.objects.get(name="remote"), Agent.objects.get(name="offline")
    assert (remote.legacy_base_url, remote.legacy_api_key_env) == ("http://127.0.0.1:9/v1", "OPENAI_API_KEY")
    assert remote.model_connection is None
    assert "an admin must assign a connection" in agent_model_problem(remote)
    assert (offline.legacy_base_url, offline.legacy_api_key_env) == ("", "")  # it never used them
    assert agent_model_problem(offline) is None


@pytest.mark.django_db(transaction=True)
def test_a_rollout_running_on_latest_gets_its_stable_version_pinned() -> None:
    """Issue 28: a rollout started on "latest" before the stable version was explicit."""
    old = _migrate([("agents", "0012_model_connections")])
    RuleSet = old.get_model("rules", "RuleSet")
    Version = old.get_model("rules", "RuleSetVersion")
    OldAgent = old.get_model("agents", "Agent")
    rule_set = RuleSet.objects.create(name="rs")
    v1, v2 = (
        Version.objects.create(rule_set=rule_set, number=n, content=[], content_hash=str(n) * 64)
        for n in (1, 2)
    )
    rolling = OldAgent.objects.create(
        name="rolling",
        system_prompt="p",
        rule_set=rule_set,
        rule_set_mode="latest",
        rollout_version=v2,
        rollout_percent=10,
    )
    idle = OldAgent.objects.create(name="idle", system_prompt="p", rule_set=rule_set, rule_set_mode="latest")

    _migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())

    from agents.models import Agent

    rolling, idle = Agent.objects.get(pk=rolling.pk), Agent.objects.get(pk=idle.pk)
    assert (rolling.rule_set_mode, rolling.pinned_version_id, rolling.rollout_version_id) == (
        "pinned",
        v1.pk,
        v2.pk,
    )
    assert rolling.rollout_guard_error_percent is None  # nobody chose a guard for it
    assert (idle.rule_set_mode, idle.pinned_version_id, idle.rollout_guard_error_percent) == (
        "latest",
        None,
        20,
    )
