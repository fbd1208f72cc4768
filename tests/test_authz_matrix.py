"""Every URL pattern x {anonymous, viewer, editor, admin} against an expected table.

A URL pattern missing from EXPECTED fails the test: each new page must declare who may see it.
Values: the status for a GET by that role ("login" = redirect to the login page).
"""

from __future__ import annotations

import pytest
from django.urls import URLPattern, URLResolver, get_resolver, reverse

pytestmark = pytest.mark.django_db

ROLES = ("anonymous", "viewer", "editor", "admin")
LOGIN = "login"

# url name -> (role declared on the view, {role: expected GET status})
EXPECTED: dict[str, tuple[str, dict[str, int | str]]] = {
    "home": ("viewer", {"anonymous": LOGIN, "viewer": 200, "editor": 200, "admin": 200}),
    "healthz": ("public", {"anonymous": 200, "viewer": 200, "editor": 200, "admin": 200}),
    # An authenticated user asking for the login page is sent on to the home page.
    "login": ("public", {"anonymous": 200, "viewer": 302, "editor": 302, "admin": 302}),
    "logout": ("public", {"anonymous": 405, "viewer": 405, "editor": 405, "admin": 405}),
    "servers:list": ("viewer", {"anonymous": LOGIN, "viewer": 200, "editor": 200, "admin": 200}),
    # Rule workbench: viewers read, editors write (POST-only views answer a GET with 405).
    "rules:list": ("viewer", {"anonymous": LOGIN, "viewer": 200, "editor": 200, "admin": 200}),
    "rules:create": ("editor", {"anonymous": 405, "viewer": 405, "editor": 405, "admin": 405}),
    "rules:audit": ("viewer", {"anonymous": LOGIN, "viewer": 200, "editor": 200, "admin": 200}),
    "rules:editor": ("viewer", {"anonymous": LOGIN, "viewer": 200, "editor": 200, "admin": 200}),
    "rules:rule_create": ("editor", {"anonymous": 405, "viewer": 405, "editor": 405, "admin": 405}),
    "rules:rule_update": ("editor", {"anonymous": 405, "viewer": 405, "editor": 405, "admin": 405}),
    "rules:rule_delete": ("editor", {"anonymous": 405, "viewer": 405, "editor": 405, "admin": 405}),
    "rules:rule_toggle": ("editor", {"anonymous": 405, "viewer": 405, "editor": 405, "admin": 405}),
    "rules:rule_move": ("editor", {"anonymous": 405, "viewer": 405, "editor": 405, "admin": 405}),
    "rules:reorder": ("editor", {"anonymous": 405, "viewer": 405, "editor": 405, "admin": 405}),
    "rules:validate": ("editor", {"anonymous": 405, "viewer": 405, "editor": 405, "admin": 405}),
    "rules:expression_check": ("editor", {"anonymous": 405, "viewer": 405, "editor": 405, "admin": 405}),
    "rules:tool_info": ("viewer", {"anonymous": LOGIN, "viewer": 200, "editor": 200, "admin": 200}),
    "rules:test": ("viewer", {"anonymous": 405, "viewer": 405, "editor": 405, "admin": 405}),
    "rules:versions": ("viewer", {"anonymous": LOGIN, "viewer": 200, "editor": 200, "admin": 200}),
    "rules:publish": ("editor", {"anonymous": 405, "viewer": 405, "editor": 405, "admin": 405}),
    "rules:diff": ("viewer", {"anonymous": LOGIN, "viewer": 200, "editor": 200, "admin": 200}),
    "rules:restore": ("editor", {"anonymous": 405, "viewer": 405, "editor": 405, "admin": 405}),
    # MCP servers: viewers read (rule authors need the tools), editors may call a tool (as the live
    # tester's "execute" does), every change is for admins (a stdio server is a command this app runs).
    # servers:refresh is POST-only but checks the role before the method: a GET by an admin is 405.
    "servers:create": ("admin", {"anonymous": LOGIN, "viewer": 403, "editor": 403, "admin": 200}),
    "servers:detail": ("viewer", {"anonymous": LOGIN, "viewer": 200, "editor": 200, "admin": 200}),
    "servers:edit": ("admin", {"anonymous": LOGIN, "viewer": 403, "editor": 403, "admin": 200}),
    "servers:refresh": ("admin", {"anonymous": LOGIN, "viewer": 403, "editor": 403, "admin": 405}),
    "servers:call": ("editor", {"anonymous": LOGIN, "viewer": 403, "editor": 200, "admin": 200}),
    "servers:delete": ("admin", {"anonymous": LOGIN, "viewer": 403, "editor": 403, "admin": 200}),
    # Regression cases, export and import.
    "rules:cases": ("viewer", {"anonymous": LOGIN, "viewer": 200, "editor": 200, "admin": 200}),
    "rules:case_create": ("editor", {"anonymous": 405, "viewer": 405, "editor": 405, "admin": 405}),
    "rules:case_delete": ("editor", {"anonymous": 405, "viewer": 405, "editor": 405, "admin": 405}),
    "rules:case_update": ("editor", {"anonymous": 405, "viewer": 405, "editor": 405, "admin": 405}),
    "rules:export_json": ("viewer", {"anonymous": LOGIN, "viewer": 200, "editor": 200, "admin": 200}),
    "rules:export_tools": ("viewer", {"anonymous": LOGIN, "viewer": 200, "editor": 200, "admin": 200}),
    "rules:import": ("editor", {"anonymous": LOGIN, "viewer": 403, "editor": 200, "admin": 200}),
    # Agents and runs: viewers read, editors write and start runs, admins set privacy.
    "agents:list": ("viewer", {"anonymous": LOGIN, "viewer": 200, "editor": 200, "admin": 200}),
    "agents:create": ("editor", {"anonymous": LOGIN, "viewer": 403, "editor": 200, "admin": 200}),
    "agents:edit": ("editor", {"anonymous": LOGIN, "viewer": 403, "editor": 200, "admin": 200}),
    "agents:run_list": ("viewer", {"anonymous": LOGIN, "viewer": 200, "editor": 200, "admin": 200}),
    "agents:run_start": ("editor", {"anonymous": LOGIN, "viewer": 403, "editor": 200, "admin": 200}),
    # Without ?a=&b= the compare page sends the user back to the run list.
    "agents:run_compare": ("viewer", {"anonymous": LOGIN, "viewer": 302, "editor": 302, "admin": 302}),
    "agents:run_detail": ("viewer", {"anonymous": LOGIN, "viewer": 200, "editor": 200, "admin": 200}),
    "agents:run_steps": ("viewer", {"anonymous": LOGIN, "viewer": 200, "editor": 200, "admin": 200}),
    "agents:run_cancel": ("editor", {"anonymous": 405, "viewer": 405, "editor": 405, "admin": 405}),
    "agents:run_rerun": ("editor", {"anonymous": 405, "viewer": 405, "editor": 405, "admin": 405}),
    "agents:run_replay": ("editor", {"anonymous": 405, "viewer": 405, "editor": 405, "admin": 405}),
    "agents:run_save_case": ("editor", {"anonymous": 405, "viewer": 405, "editor": 405, "admin": 405}),
    # Loads a run's (masked) input into the user's own tester session: a viewer may, by POST only.
    "agents:run_open_in_tester": ("viewer", {"anonymous": 405, "viewer": 405, "editor": 405, "admin": 405}),
    # Staged rollout and shadow mode: viewers see the page, editors change it.
    "agents:rollout": ("viewer", {"anonymous": LOGIN, "viewer": 200, "editor": 200, "admin": 200}),
    "agents:rollout_set": ("editor", {"anonymous": 405, "viewer": 405, "editor": 405, "admin": 405}),
    "agents:rollout_promote": ("editor", {"anonymous": 405, "viewer": 405, "editor": 405, "admin": 405}),
    "agents:rollout_rollback": ("editor", {"anonymous": 405, "viewer": 405, "editor": 405, "admin": 405}),
    "agents:shadow_set": ("editor", {"anonymous": 405, "viewer": 405, "editor": 405, "admin": 405}),
    "agents:privacy": ("admin", {"anonymous": LOGIN, "viewer": 403, "editor": 403, "admin": 200}),
    # Impact analyses: viewers read the form page and every analysis, editors start one.
    "governance:impact_new": ("viewer", {"anonymous": LOGIN, "viewer": 200, "editor": 200, "admin": 200}),
    "governance:impact_start": ("editor", {"anonymous": 405, "viewer": 405, "editor": 405, "admin": 405}),
    "governance:rule_health": ("viewer", {"anonymous": LOGIN, "viewer": 200, "editor": 200, "admin": 200}),
    "governance:impact_detail": ("viewer", {"anonymous": LOGIN, "viewer": 200, "editor": 200, "admin": 200}),
    "governance:impact_progress": (
        "viewer",
        {"anonymous": LOGIN, "viewer": 200, "editor": 200, "admin": 200},
    ),
    # API tokens: every user with a role manages their own (revoking someone else's token is a 404).
    "tokens": ("viewer", {"anonymous": LOGIN, "viewer": 200, "editor": 200, "admin": 200}),
    "token_create": ("viewer", {"anonymous": 405, "viewer": 405, "editor": 405, "admin": 405}),
    "token_revoke": ("viewer", {"anonymous": 405, "viewer": 405, "editor": 405, "admin": 405}),
    # Users and roles: admins only. The invitation page is public (its secret is the key): an
    # unknown link is a 404 for everyone. Each user keeps their own language choice.
    "users": ("admin", {"anonymous": LOGIN, "viewer": 403, "editor": 403, "admin": 200}),
    "user_create": ("admin", {"anonymous": 405, "viewer": 405, "editor": 405, "admin": 405}),
    "user_detail": ("admin", {"anonymous": LOGIN, "viewer": 403, "editor": 403, "admin": 200}),
    "user_set_role": ("admin", {"anonymous": 405, "viewer": 405, "editor": 405, "admin": 405}),
    "user_set_active": ("admin", {"anonymous": 405, "viewer": 405, "editor": 405, "admin": 405}),
    "user_invite": ("admin", {"anonymous": 405, "viewer": 405, "editor": 405, "admin": 405}),
    "user_token_revoke": ("admin", {"anonymous": 405, "viewer": 405, "editor": 405, "admin": 405}),
    "invite_accept": ("public", {"anonymous": 404, "viewer": 404, "editor": 404, "admin": 404}),
    "language_set": ("viewer", {"anonymous": 405, "viewer": 405, "editor": 405, "admin": 405}),
}
# POST-only pages: who may POST (anonymous -> login, a role below -> 403). Checked with an empty body.
POST_ROLES: dict[str, str] = {
    name: role
    for name, (role, table) in EXPECTED.items()
    if all(v == 405 for v in table.values()) and role != "public"
}
# Django's own admin is guarded by is_staff and is not part of the product's pages; the API
# (namespace "api") has its own matrix over every operation in tests/api/test_api_authz_matrix.py.
IGNORED_PREFIXES = ("admin:", "api:")


@pytest.fixture
def sample_kwargs(make_user) -> dict[str, dict[str, object]]:
    """URL kwargs of real objects for the patterns that need them."""
    from rules import services
    from servers.models import McpServer

    server = McpServer.objects.create(mcp_id="matrix", transport="http", url="http://127.0.0.1:9/mcp")
    author = make_user("editor")
    rule_set = services.rule_set_create(actor=author, name="matrix")
    rule = services.rule_create(
        actor=author, rule_set=rule_set, name="r", mcp_id="matrix", tool_name="t", when="True", params="{}"
    )
    version = services.rule_set_publish(actor=author, rule_set=rule_set)
    set_kw = {"pk": rule_set.pk}
    rule_kw = {"pk": rule_set.pk, "rule_pk": rule.pk}
    kwargs: dict[str, dict[str, object]] = dict.fromkeys(
        (
            "rules:editor",
            "rules:rule_create",
            "rules:reorder",
            "rules:validate",
            "rules:expression_check",
            "rules:tool_info",
            "rules:test",
            "rules:versions",
            "rules:publish",
            "rules:diff",
        ),
        set_kw,
    )
    kwargs.update(
        dict.fromkeys(
            ("rules:rule_update", "rules:rule_delete", "rules:rule_toggle", "rules:rule_move"), rule_kw
        )
    )
    kwargs["rules:restore"] = {"pk": rule_set.pk, "number": version.number}
    from agents.models import Agent, Run
    from rules.models import TestCase

    kwargs.update(
        dict.fromkeys(("rules:cases", "rules:case_create", "rules:export_json", "rules:export_tools"), set_kw)
    )
    case = TestCase.objects.create(
        rule_set=rule_set, name="c", input={"query": "q"}, expected={"must_fire": []}
    )
    kwargs["rules:case_delete"] = {"pk": rule_set.pk, "case_pk": case.pk}
    kwargs["rules:case_update"] = {"pk": rule_set.pk, "case_pk": case.pk}
    agent = Agent.objects.create(name="matrix", system_prompt="p", rule_set=rule_set)
    run = Run.objects.create(agent=agent, agent_name="matrix", query="q")  # stays queued: nothing is enqueued
    kwargs["agents:edit"] = {"pk": agent.pk}
    kwargs.update(
        dict.fromkeys(
            ("agents:rollout", "agents:rollout_set", "agents:rollout_promote", "agents:rollout_rollback",
             "agents:shadow_set"),
            {"pk": agent.pk},
        )
    )  # fmt: skip
    kwargs.update(
        dict.fromkeys(
            (
                "agents:run_detail",
                "agents:run_steps",
                "agents:run_cancel",
                "agents:run_rerun",
                "agents:run_replay",
                "agents:run_save_case",
                "agents:run_open_in_tester",
            ),
            {"pk": run.pk},
        )
    )
    from governance.services import impact_start

    analysis = impact_start(actor=None, enqueue=False, rule_set=rule_set, version="draft", days=1)
    kwargs["governance:impact_new"] = kwargs["governance:impact_start"] = {"pk": rule_set.pk}
    kwargs["governance:rule_health"] = {"pk": rule_set.pk}
    kwargs["governance:impact_detail"] = kwargs["governance:impact_progress"] = {"pk": analysis.pk}
    from llamon_web.token_services import token_create

    matrix_token = token_create(actor=author, name="matrix").token
    kwargs["token_revoke"] = {"pk": matrix_token.pk}
    kwargs.update(
        dict.fromkeys(("user_detail", "user_set_role", "user_set_active", "user_invite"), {"pk": author.pk})
    )
    kwargs["user_token_revoke"] = {"pk": author.pk, "token_pk": matrix_token.pk}
    kwargs["invite_accept"] = {"secret": "x" * 43}
    # MCP server pages take the server's pk.
    kwargs.update(
        dict.fromkeys(
            ("servers:detail", "servers:edit", "servers:refresh", "servers:call", "servers:delete"),
            {"pk": server.pk},
        )
    )
    return kwargs


def _patterns(resolver: URLResolver, namespace: str = "") -> list[tuple[str, URLPattern]]:
    found = []
    for entry in resolver.url_patterns:
        if isinstance(entry, URLResolver):
            inner = f"{namespace}{entry.namespace}:" if entry.namespace else namespace
            found.extend(_patterns(entry, inner))
        elif entry.name:
            found.append((f"{namespace}{entry.name}", entry))
        else:
            found.append((f"{namespace}<unnamed {entry.pattern}>", entry))
    return found


def _product_patterns() -> list[tuple[str, URLPattern]]:
    return [(name, p) for name, p in _patterns(get_resolver()) if not name.startswith(IGNORED_PREFIXES)]


def test_every_url_pattern_is_in_the_table() -> None:
    names = {name for name, _ in _product_patterns()}
    missing = sorted(names - set(EXPECTED))
    stale = sorted(set(EXPECTED) - names)
    assert not missing, f"add these URL patterns to EXPECTED with their role: {missing}"
    assert not stale, f"these EXPECTED entries have no URL pattern any more: {stale}"


def test_every_view_declares_the_role_in_the_table() -> None:
    for name, pattern in _product_patterns():
        declared = getattr(pattern.callback, "required_role", None)
        assert declared == EXPECTED[name][0], (
            f"{name}: view declares {declared!r}, table says {EXPECTED[name][0]!r}"
        )


@pytest.mark.parametrize("role", ROLES)
def test_each_role_gets_the_expected_response(role: str, client, make_user, sample_kwargs) -> None:
    if role != "anonymous":
        client.force_login(make_user(role))
    failures = []
    for name, _ in _product_patterns():
        url = reverse(name, kwargs=sample_kwargs.get(name))
        response = client.get(url)
        expected = EXPECTED[name][1][role]
        if expected == LOGIN:
            ok = response.status_code == 302 and response["Location"].startswith(reverse("login"))
        else:
            ok = response.status_code == expected
        if not ok:
            failures.append(f"{name} as {role}: got {response.status_code}, expected {expected}")
    assert not failures, "\n".join(failures)


def test_a_user_without_any_role_is_refused_everywhere_but_public_pages(
    client, make_user, sample_kwargs
) -> None:
    client.force_login(make_user(None))
    for name, _ in _product_patterns():
        if EXPECTED[name][0] == "public":
            continue
        url = reverse(name, kwargs=sample_kwargs.get(name))
        response = client.post(url) if name in POST_ROLES else client.get(url)
        assert response.status_code == 403, name


@pytest.mark.parametrize("role", ROLES)
def test_post_only_pages_refuse_roles_below_their_own(role: str, client, make_user, sample_kwargs) -> None:
    if role != "anonymous":
        client.force_login(make_user(role))
    rank = {"anonymous": -1, "viewer": 0, "editor": 1, "admin": 2}
    failures = []
    for name, needed in POST_ROLES.items():
        response = client.post(reverse(name, kwargs=sample_kwargs.get(name)))
        if role == "anonymous":
            ok = response.status_code == 302 and response["Location"].startswith(reverse("login"))
        elif rank[role] < rank[needed]:
            ok = response.status_code == 403
        else:
            ok = response.status_code not in (
                302,
                403,
                405,
            )  # allowed in: validation or a redirect of its own
            ok = ok or (response.status_code == 302 and not response["Location"].startswith(reverse("login")))
        if not ok:
            failures.append(f"POST {name} as {role}: got {response.status_code}")
    assert not failures, "\n".join(failures)
