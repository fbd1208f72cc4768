"""The product's pages and who may see them: the table the authorization matrix checks
(tests/test_authz_matrix.py) and the form fuzzer walks (tests/test_forms_fuzz.py), and real objects
for the URL patterns that need them.

Values: the status for a GET by that role ("login" = redirect to the login page).
"""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, get_resolver

ROLES = ("anonymous", "viewer", "editor", "admin")
LOGIN = "login"

# url name -> (role declared on the view, {role: expected GET status})
EXPECTED: dict[str, tuple[str, dict[str, int | str]]] = {
    "home": ("viewer", {"anonymous": LOGIN, "viewer": 200, "editor": 200, "admin": 200}),
    "healthz": ("public", {"anonymous": 200, "viewer": 200, "editor": 200, "admin": 200}),
    # /favicon.ico: a permanent redirect to the static icon.
    "favicon": ("public", {"anonymous": 301, "viewer": 301, "editor": 301, "admin": 301}),
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
    "rules:import_tools": ("editor", {"anonymous": LOGIN, "viewer": 403, "editor": 200, "admin": 200}),
    # Agents and runs: viewers read, editors write and start runs, admins set privacy.
    "agents:list": ("viewer", {"anonymous": LOGIN, "viewer": 200, "editor": 200, "admin": 200}),
    "agents:create": ("editor", {"anonymous": LOGIN, "viewer": 403, "editor": 200, "admin": 200}),
    "agents:edit": ("editor", {"anonymous": LOGIN, "viewer": 403, "editor": 200, "admin": 200}),
    "agents:run_list": ("viewer", {"anonymous": LOGIN, "viewer": 200, "editor": 200, "admin": 200}),
    "agents:run_start": ("editor", {"anonymous": LOGIN, "viewer": 403, "editor": 200, "admin": 200}),
    # Without ?a=&b= the compare page sends the user back to the run list.
    "agents:run_compare": ("viewer", {"anonymous": LOGIN, "viewer": 302, "editor": 302, "admin": 302}),
    "agents:run_detail": ("viewer", {"anonymous": LOGIN, "viewer": 200, "editor": 200, "admin": 200}),
    # Evidence: viewers export (every export is audited) and read the printable report.
    "agents:run_export": ("viewer", {"anonymous": LOGIN, "viewer": 200, "editor": 200, "admin": 200}),
    "agents:run_evidence": ("viewer", {"anonymous": LOGIN, "viewer": 200, "editor": 200, "admin": 200}),
    "agents:run_json": ("viewer", {"anonymous": LOGIN, "viewer": 200, "editor": 200, "admin": 200}),
    "agents:run_steps": ("viewer", {"anonymous": LOGIN, "viewer": 200, "editor": 200, "admin": 200}),
    "agents:run_step_value": ("viewer", {"anonymous": LOGIN, "viewer": 200, "editor": 200, "admin": 200}),
    "agents:run_rules": ("viewer", {"anonymous": LOGIN, "viewer": 200, "editor": 200, "admin": 200}),
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
    # Change requests: viewers read; reviewing needs the approver permission (the service checks it).
    "agents:protect": ("admin", {"anonymous": 405, "viewer": 405, "editor": 405, "admin": 405}),
    "agents:change_list": ("viewer", {"anonymous": LOGIN, "viewer": 200, "editor": 200, "admin": 200}),
    "agents:change_detail": ("viewer", {"anonymous": LOGIN, "viewer": 200, "editor": 200, "admin": 200}),
    "agents:change_review": ("viewer", {"anonymous": 405, "viewer": 405, "editor": 405, "admin": 405}),
    "agents:change_withdraw": ("editor", {"anonymous": 405, "viewer": 405, "editor": 405, "admin": 405}),
    "agents:connection_list": ("admin", {"anonymous": LOGIN, "viewer": 403, "editor": 403, "admin": 200}),
    "agents:connection_create": ("admin", {"anonymous": LOGIN, "viewer": 403, "editor": 403, "admin": 200}),
    "agents:connection_edit": ("admin", {"anonymous": LOGIN, "viewer": 403, "editor": 403, "admin": 200}),
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
    "governance:impact_report": ("viewer", {"anonymous": LOGIN, "viewer": 200, "editor": 200, "admin": 200}),
    "governance:change_impact": ("viewer", {"anonymous": 405, "viewer": 405, "editor": 405, "admin": 405}),
    # Savings and suggestions: viewers read, editors mine and make drafts.
    "governance:agent_savings": ("viewer", {"anonymous": LOGIN, "viewer": 200, "editor": 200, "admin": 200}),
    "governance:suggestions_start": (
        "editor",
        {"anonymous": 405, "viewer": 405, "editor": 405, "admin": 405},
    ),
    "governance:suggestions_progress": (
        "viewer",
        {"anonymous": LOGIN, "viewer": 200, "editor": 200, "admin": 200},
    ),
    "governance:suggestion_draft": ("editor", {"anonymous": 405, "viewer": 405, "editor": 405, "admin": 405}),
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
    "user_set_approver": ("admin", {"anonymous": 405, "viewer": 405, "editor": 405, "admin": 405}),
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


# Role order; "public" pages need none.
RANK = {"anonymous": -1, "public": -1, "viewer": 0, "editor": 1, "admin": 2}


def refused_only(name: str, role: str) -> bool:
    """Whether the role is below the one the page declares: such a request can only ever be refused."""
    return RANK[role] < RANK[EXPECTED[name][0]]


def sample_kwargs(make_user) -> dict[str, dict[str, object]]:
    """URL kwargs of real objects for the patterns that need them (the ``sample_kwargs`` fixture)."""
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
    from agents.models import Agent, ModelConnection, Run
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
    from django.utils import timezone

    from agents.models import RunStep

    RunStep.objects.create(run=run, seq=1, kind="tool", name="t", started_at=timezone.now(), output={"n": 1})
    kwargs["agents:run_step_value"] = {"pk": run.pk, "seq": 1}
    kwargs["agents:edit"] = {"pk": agent.pk}
    connection = ModelConnection.objects.create(
        name="matrix", base_url="http://127.0.0.1:9/v1", model_names=["m"]
    )
    kwargs["agents:connection_edit"] = {"pk": connection.pk}
    kwargs.update(
        dict.fromkeys(
            (
                "agents:rollout",
                "agents:rollout_set",
                "agents:rollout_promote",
                "agents:rollout_rollback",
                "agents:shadow_set",
                "agents:protect",
            ),
            {"pk": agent.pk},
        )
    )
    from agents.models import ChangeRequest

    change = ChangeRequest.objects.create(agent=agent, action="rollout.promote", base_revision=agent.revision)
    kwargs.update(
        dict.fromkeys(
            ("agents:change_detail", "agents:change_review", "agents:change_withdraw"), {"pk": change.pk}
        )
    )
    kwargs.update(
        dict.fromkeys(
            (
                "agents:run_detail",
                "agents:run_json",
                "agents:run_steps",
                "agents:run_rules",
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
    kwargs["governance:impact_report"] = {"pk": analysis.pk}
    kwargs["governance:change_impact"] = {"pk": change.pk}
    from governance.models import SuggestionJob

    job = SuggestionJob.objects.create(
        agent=agent, days=1, since=agent.created_at, until=agent.created_at, status="succeeded", result={}
    )
    kwargs["governance:agent_savings"] = kwargs["governance:suggestions_start"] = {"pk": agent.pk}
    kwargs["governance:suggestions_progress"] = {"pk": job.pk}
    kwargs["governance:suggestion_draft"] = {"pk": job.pk, "index": 0}
    from accounts.token_services import token_create

    matrix_token = token_create(actor=author, name="matrix").token
    kwargs["token_revoke"] = {"pk": matrix_token.pk}
    kwargs.update(
        dict.fromkeys(
            ("user_detail", "user_set_role", "user_set_active", "user_set_approver", "user_invite"),
            {"pk": author.pk},
        )
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


def patterns(resolver: URLResolver, namespace: str = "") -> list[tuple[str, URLPattern]]:
    found = []
    for entry in resolver.url_patterns:
        if isinstance(entry, URLResolver):
            inner = f"{namespace}{entry.namespace}:" if entry.namespace else namespace
            found.extend(patterns(entry, inner))
        elif entry.name:
            found.append((f"{namespace}{entry.name}", entry))
        else:
            found.append((f"{namespace}<unnamed {entry.pattern}>", entry))
    return found


def product_patterns() -> list[tuple[str, URLPattern]]:
    return [(name, p) for name, p in patterns(get_resolver()) if not name.startswith(IGNORED_PREFIXES)]
