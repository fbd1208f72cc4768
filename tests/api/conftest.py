"""Fixtures for the API tests: callers of every kind (anonymous, session, token), sample objects, fake DNS.

Host names go through the fake resolver of tests/support/fake_dns.py (never real DNS); stdio
commands are limited by the test settings to examples/ and tests/servers/.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from accounts.token_services import token_create
from tests.support.fake_dns import FAKE_RESOLVER
from tests.support.rule_sets import TOOLS, build_rule_set

ROLES = ("viewer", "editor", "admin")
# Who calls: anonymous, a logged-in browser session of each role, a personal API token of each role.
PRINCIPALS = ("anonymous", *(f"session:{r}" for r in ROLES), *(f"token:{r}" for r in ROLES))


@pytest.fixture(autouse=True)
def _fake_dns(settings) -> None:
    settings.LLAMON_URL_RESOLVER = FAKE_RESOLVER


@dataclass
class Caller:
    """A test client plus the headers that authenticate it; ``call("get", url, json=...)``."""

    client: Client
    headers: dict[str, str] = field(default_factory=dict)
    user: Any = None
    token: str | None = None

    def call(self, method: str, url: str, json: Any = None, **extra: Any) -> Any:
        kwargs: dict[str, Any] = {"headers": {**self.headers, **extra.pop("headers", {})}, **extra}
        if json is not None:
            kwargs.update(data=json, content_type="application/json")
        return getattr(self.client, method.lower())(url, **kwargs)

    def get(self, url: str, **extra: Any) -> Any:
        return self.call("get", url, **extra)

    def post(self, url: str, json: Any = None, **extra: Any) -> Any:
        return self.call("post", url, json=json if json is not None else {}, **extra)

    def patch(self, url: str, json: Any = None, **extra: Any) -> Any:
        return self.call("patch", url, json=json if json is not None else {}, **extra)

    def delete(self, url: str, **extra: Any) -> Any:
        return self.call("delete", url, **extra)


@pytest.fixture
def caller(make_user) -> Callable[[str], Caller]:
    """``caller("token:editor")`` -> a Caller of that kind (see PRINCIPALS); ``caller("session:none")`` has no role."""

    def make(principal: str) -> Caller:
        if principal == "anonymous":
            return Caller(Client())
        kind, role = principal.split(":")
        user = make_user(None if role == "none" else role, f"{kind}-{role}-{uuid.uuid4().hex[:6]}")
        if kind == "session":
            client = Client()
            client.force_login(user)
            return Caller(client, user=user)
        secret = (
            token_create(actor=user, name="tests").secret if role != "none" else _token_without_role(user)
        )
        return Caller(Client(), {"Authorization": f"Bearer {secret}"}, user=user, token=secret)

    return make


def _token_without_role(user: Any) -> str:
    # token_create refuses users without a role; make one with the model for the "no role" case.
    import secrets

    from accounts.models import ApiToken
    from accounts.token_services import token_hash

    prefix = secrets.token_hex(4)
    secret = f"llamon_{prefix}_{secrets.token_urlsafe(32)}"
    ApiToken.objects.create(user=user, name="no-role", prefix=prefix, token_hash=token_hash(secret))
    return secret


@pytest.fixture
def admin_api(caller) -> Caller:
    return caller("token:admin")


@pytest.fixture
def editor_api(caller) -> Caller:
    return caller("token:editor")


@pytest.fixture
def viewer_api(caller) -> Caller:
    return caller("token:viewer")


@pytest.fixture
def api_servers(db) -> dict[str, Any]:
    """The three demo servers with discovered tools, on a loopback port nothing listens on."""
    from servers.models import McpServer

    now = timezone.now()
    return {
        mcp_id: McpServer.objects.create(
            mcp_id=mcp_id, transport="http", url="http://127.0.0.1:9/mcp", tools=tools, tools_refreshed_at=now
        )
        for mcp_id, tools in TOOLS.items()
    }


@pytest.fixture
def sample(api_servers, make_user) -> dict[str, Any]:
    """One of everything, for the path parameters of every operation."""
    from agents.models import Agent, ModelConnection, Run
    from llamon_web.demo import SEED_RULES
    from rules import cases, services

    author = make_user("editor", f"author-{uuid.uuid4().hex[:6]}")
    rule_set = build_rule_set(author, "sample", SEED_RULES[:2])
    version = services.rule_set_publish(actor=author, rule_set=rule_set, message="v1")
    services.rule_create(actor=author, rule_set=rule_set, **SEED_RULES[2])  # the draft now differs from v1
    rule_set.refresh_from_db()
    rule = rule_set.rules.order_by("position").first()
    case = cases.case_create(
        actor=author,
        rule_set=rule_set,
        name="order lookup",
        input={"query": "주문 조회 A-1001"},
        expected={"must_fire": [{"tool_name": "get_order"}]},
    )
    agent = Agent.objects.create(name="sample-agent", system_prompt="p", rule_set=rule_set)
    run = Run.objects.create(agent=agent, agent_name=agent.name, query="q")  # stays queued: nothing enqueued
    served = Run.objects.create(
        agent_name="served", source=Run.Source.SERVED, status=Run.Status.RUNNING, query="q"
    )
    connection = ModelConnection.objects.create(
        name="sample-connection", base_url="http://127.0.0.1:9/v1", model_names=["m"]
    )
    from agents.models import ChangeRequest

    change = ChangeRequest.objects.create(  # already decided: reviewing it again is a 409
        agent=agent, action="rollout.promote", base_revision=agent.revision, state="rejected"
    )
    return {
        "change": change,
        "author": author,
        "connection": connection,
        "server": api_servers["order-service"],
        "servers": api_servers,
        "rule_set": rule_set,
        "version": version,
        "rule": rule,
        "case": case,
        "agent": agent,
        "run": run,
        "served_run": served,
    }


@pytest.fixture
def ingest_caller() -> Callable[[str], Caller]:
    """``ingest_caller("support-bot")`` -> a Caller holding an ingest credential for that served agent."""
    from agents.services import ingest_credential_issue

    def make(agent_name: str) -> Caller:
        _credential, secret = ingest_credential_issue(actor=None, agent_name=agent_name)
        return Caller(Client(), {"Authorization": f"Bearer {secret}"}, token=secret)

    return make
