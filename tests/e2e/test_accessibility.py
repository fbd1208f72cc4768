"""Accessibility and small screens: axe-core on every page at 1440 and 390 px, keyboard focus after htmx swaps.

axe-core (tests/e2e/vendor/axe.min.js, MPL-2.0, see the README there) runs in the real page with the
WCAG 2.0 A/AA and 2.1 AA rules; any "serious" or "critical" violation fails. At 390 px the page must
not scroll sideways (wide tables scroll inside their own container). The pages come from the URL
patterns: a GET page that is neither visited here nor excluded with a reason fails
``test_every_page_pattern_is_visited_or_excluded``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.core.management import call_command
from django.urls import URLPattern, URLResolver, get_resolver

from tests.e2e.conftest import screenshot

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True), pytest.mark.timeout(300)]

AXE_SOURCE = (Path(__file__).parent / "vendor" / "axe.min.js").read_text(encoding="utf-8")
AXE_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
FAILING_IMPACTS = ("serious", "critical")
WIDTHS = (1440, 390)


@dataclass(frozen=True)
class Visit:
    """One page to check: how to build its address from the demo objects, and its screenshot name if any."""

    path: Callable[[dict], str]
    shot: str | None = None


# URL name -> the page visited (as an admin, who sees every control). Extra states (a tester run,
# the 403 page, the login page) are visited in the test itself.
PAGES: dict[str, Visit] = {
    "home": Visit(lambda o: "/", shot="home"),
    "servers:list": Visit(lambda o: "/mcp/", shot="servers-list"),
    "servers:create": Visit(lambda o: "/mcp/new/"),
    "servers:detail": Visit(lambda o: f"/mcp/{o['server'].pk}/", shot="server-detail"),
    "servers:edit": Visit(lambda o: f"/mcp/{o['server'].pk}/edit/"),
    "servers:call": Visit(lambda o: f"/mcp/{o['server'].pk}/call/?tool=get_order", shot="tool-call"),
    "servers:delete": Visit(lambda o: f"/mcp/{o['server'].pk}/delete/"),
    "rules:list": Visit(lambda o: "/rules/"),
    "rules:editor": Visit(
        lambda o: f"/rules/{o['rule_set'].pk}/?rule={o['rule'].pk}", shot="rule-set-editor"
    ),
    "rules:versions": Visit(lambda o: f"/rules/{o['rule_set'].pk}/versions/"),
    "rules:diff": Visit(lambda o: f"/rules/{o['rule_set'].pk}/versions/diff?a=1&b=draft"),
    "rules:cases": Visit(lambda o: f"/rules/{o['rule_set'].pk}/cases/"),
    "rules:import": Visit(lambda o: "/rules/import"),
    "rules:import_tools": Visit(lambda o: "/rules/import/tools-py"),
    "rules:audit": Visit(lambda o: "/rules/audit/"),
    "agents:list": Visit(lambda o: "/agents/"),
    "agents:create": Visit(lambda o: "/agents/new"),
    "agents:edit": Visit(lambda o: f"/agents/{o['agent'].pk}/edit"),
    "agents:run_list": Visit(lambda o: "/agents/runs/", shot="run-list"),
    "agents:run_start": Visit(lambda o: "/agents/runs/new"),
    "agents:run_detail": Visit(lambda o: f"/agents/runs/{o['runs'][0].pk}/", shot="run-detail"),
    "agents:run_compare": Visit(lambda o: f"/agents/runs/compare?a={o['runs'][0].pk}&b={o['runs'][1].pk}"),
    "agents:privacy": Visit(lambda o: "/agents/privacy"),
    "agents:run_evidence": Visit(lambda o: "/agents/runs/evidence"),
    "agents:connection_list": Visit(lambda o: "/agents/connections/"),
    "agents:connection_create": Visit(lambda o: "/agents/connections/new"),
    "agents:rollout": Visit(lambda o: f"/agents/{o['agent'].pk}/rollout"),
    "agents:change_list": Visit(lambda o: "/agents/changes/"),
    "agents:change_detail": Visit(lambda o: f"/agents/changes/{o['change'].pk}/"),
    "governance:impact_new": Visit(lambda o: f"/governance/rule-sets/{o['rule_set'].pk}/impact/"),
    "governance:rule_health": Visit(lambda o: f"/governance/rule-sets/{o['rule_set'].pk}/health/"),
    "governance:agent_savings": Visit(lambda o: f"/governance/agents/{o['agent'].pk}/savings/"),
    "users": Visit(lambda o: "/users/"),
    "user_detail": Visit(lambda o: f"/users/{o['admin'].pk}/"),
    "tokens": Visit(lambda o: "/tokens/", shot="tokens"),
}
# URL name -> why it is not a page of its own to check.
EXCLUDED: dict[str, str] = {
    "login": "visited logged out, before the others (see the test)",
    "logout": "POST only",
    "healthz": "JSON for load balancers, not a page",
    "favicon": "a redirect to the static icon, not a page",
    "rules:create": "POST only",
    "rules:rule_create": "POST only",
    "rules:rule_update": "POST only",
    "rules:rule_delete": "POST only",
    "rules:rule_toggle": "POST only",
    "rules:rule_move": "POST only (its result is checked by the focus test)",
    "rules:reorder": "POST only",
    "rules:validate": "POST only (htmx fragment inside the editor)",
    "rules:expression_check": "POST only (JSON for the expression editor)",
    "rules:tool_info": "htmx fragment swapped into the editor, checked there",
    "agents:run_rules": "htmx fragment of the run page's pre-step step, checked there (see the test)",
    "rules:test": "POST only (the tester's results are checked in the editor after a test)",
    "rules:publish": "POST only",
    "rules:restore": "POST only",
    "rules:case_create": "POST only",
    "rules:case_update": "POST only",
    "rules:case_delete": "POST only",
    "rules:export_json": "a JSON download, not a page",
    "rules:export_tools": "a Python download, not a page",
    "servers:refresh": "POST only",
    "agents:run_steps": "htmx fragment polled into the run detail page, checked there",
    "agents:run_step_value": "needs a step value over 256 KB; exercised by tests/agents/test_run_value_paging.py",
    "agents:run_cancel": "POST only",
    "agents:run_export": "a file download (CSV or JSON Lines), not a page",
    "agents:run_json": "a file download (a run as JSON), not a page",
    "agents:connection_edit": "the connection form of connection_create, with a connection's values",
    "agents:run_rerun": "POST only",
    "agents:run_save_case": "POST only",
    "token_create": "POST only",
    "token_revoke": "POST only",
    "agents:rollout_set": "POST only",
    "agents:rollout_promote": "POST only",
    "agents:rollout_rollback": "POST only",
    "agents:shadow_set": "POST only",
    "agents:protect": "POST only",
    "agents:change_review": "POST only",
    "agents:change_withdraw": "POST only",
    "user_set_approver": "POST only",
    "agents:run_open_in_tester": "POST only (its result is the rule set editor, checked)",
    "agents:run_replay": "POST only",
    "governance:impact_start": "POST only",
    "governance:change_impact": "POST only (its result is the change request's page, checked)",
    "governance:impact_report": "htmx fragment loaded into a change request's page",
    "governance:impact_progress": "htmx fragment polled into an analysis page",
    "governance:suggestions_start": "POST only",
    "governance:suggestion_draft": "POST only (its result is the rule set editor, checked)",
    "governance:suggestions_progress": "htmx fragment polled into the savings page",
    "governance:impact_detail": "needs a finished analysis; its page is exercised by tests/e2e/test_impact.py",
    "invite_accept": "needs a fresh one-time link; exercised by tests/e2e/test_users.py",
    "language_set": "POST only",
    "user_create": "POST only",
    "user_invite": "POST only",
    "user_set_active": "POST only",
    "user_set_role": "POST only",
    "user_token_revoke": "POST only",
}
IGNORED_PREFIXES = ("admin:", "api:")  # Django's admin (staff only) and the JSON API are not product pages


def _pattern_names(resolver: URLResolver, namespace: str = "") -> list[str]:
    names = []
    for entry in resolver.url_patterns:
        if isinstance(entry, URLResolver):
            names += _pattern_names(entry, f"{namespace}{entry.namespace}:" if entry.namespace else namespace)
        elif isinstance(entry, URLPattern):
            names.append(f"{namespace}{entry.name or f'<unnamed {entry.pattern}>'}")
    return [n for n in names if not n.startswith(IGNORED_PREFIXES)]


def test_every_page_pattern_is_visited_or_excluded() -> None:
    names = set(_pattern_names(get_resolver()))
    missing = sorted(names - set(PAGES) - set(EXCLUDED))
    stale = sorted((set(PAGES) | set(EXCLUDED)) - names)
    assert not missing, (
        f"add these URL patterns to PAGES (checked with axe) or EXCLUDED (with a reason): {missing}"
    )
    assert not stale, f"these entries name no URL pattern any more: {stale}"
    assert not set(PAGES) & set(EXCLUDED)


def axe_problems(page, label: str, width: int) -> list[str]:
    """Run axe-core in the page; one readable line per serious/critical violation, plus sideways overflow."""
    # (preload: false: axe's CSS preload copies a shadow root's stylesheets into a <style> element, which
    # the CSP refuses; no rule of the WCAG tags run here needs it.)
    # page.evaluate runs through the DevTools protocol, which the page's CSP (script-src 'self') does
    # not govern; an injected <script> tag would be refused (and reported) by the CSP.
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.evaluate(AXE_SOURCE)
    result = page.evaluate(
        """async tags => {
            const r = await axe.run(document, {runOnly: {type: "tag", values: tags}, resultTypes: ["violations"],
                                               preload: false});
            return r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,
                nodes: v.nodes.map(n => ({target: n.target.join(" "), summary: n.failureSummary}))}));
        }""",
        AXE_TAGS,
    )
    problems = [
        f"{label} @{width}px: the CSP refused {refused}"
        for refused in page.evaluate("window.__cspRefused || []")
    ]
    for violation in result:
        if violation["impact"] not in FAILING_IMPACTS:
            continue
        for node in violation["nodes"]:
            summary = " ".join((node["summary"] or "").split())[:220]
            problems.append(
                f"{label} @{width}px: {violation['impact']} {violation['id']} ({violation['help']}) "
                f"at {node['target']}: {summary}"
            )
    if width <= 390:
        scroll = page.evaluate("document.documentElement.scrollWidth")
        if scroll > width:
            wide = page.evaluate(
                """w => [...document.querySelectorAll('body *')]
                    .filter(e => e.getBoundingClientRect().right > w + 1)
                    .filter(e => !e.parentElement || e.parentElement.getBoundingClientRect().right <= w + 1)
                    .slice(0, 5).map(e => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') +
                                     (e.className && typeof e.className === 'string' ? '.' + e.className.split(' ').join('.') : ''))""",
                width,
            )
            problems.append(
                f"{label} @{width}px: the page is {scroll}px wide (overflowing: {', '.join(wide)})"
            )
    return problems


@pytest.fixture
def demo_objects(make_user) -> dict:
    """The demo (servers, seed rule set, agent) with two finished runs, a published version and a token."""
    from accounts.token_services import token_create
    from agents.models import Agent, Run
    from agents.services import run_execute
    from rules import services as rule_services
    from rules.models import RuleSet
    from servers import pool as rules_pool
    from servers.models import McpServer

    call_command("load_demo", verbosity=0)  # lists the stdio servers' tools and queues the demo runs
    try:
        for run in Run.objects.filter(status=Run.Status.QUEUED).order_by("pk"):
            run_execute(run_id=run.pk)  # the worker's task body, run here: real MCP servers, scripted model
    finally:
        rules_pool.web_pool_close()
    rule_set = RuleSet.objects.get(name="seed-rules")
    admin = make_user("admin", username="a11y-admin")
    if not rule_set.versions.exists():
        rule_services.rule_set_publish(actor=admin, rule_set=rule_set)
    first = rule_set.rules.order_by("position").first()
    rule_services.rule_move(actor=admin, rule=first, direction="down", revision=rule_set.revision)
    token_create(actor=admin, name="ci")
    from agents.models import ChangeRequest

    agent = Agent.objects.get(name="seed-demo")
    change = ChangeRequest.objects.create(
        agent=agent,
        action="agent.update",
        base_revision=agent.revision,
        reason="Pin the version the audit signed off.",
        requested_by_name="someone",
        diff={"fields": [{"field": "rule_set_mode", "before": "latest", "after": "pinned"}]},
    )
    runs = list(Run.objects.order_by("pk"))
    assert len(runs) >= 2 and all(r.finished for r in runs), [(r.pk, r.status) for r in runs]
    return {
        "admin": admin,
        "server": McpServer.objects.get(mcp_id="order-service"),
        "rule_set": rule_set,
        "rule": rule_set.rules.order_by("position").first(),
        "agent": agent,
        "change": change,
        "runs": runs,
    }


def _login(page, username: str) -> None:
    page.goto("/accounts/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", "pw")
    page.click("button[type=submit]")
    page.wait_for_url(lambda url: "/accounts/login" not in url)


def _at_every_width(page, label: str, shot: str | None = None) -> list[str]:
    """axe (and, narrow, the sideways overflow) on the page as it is, at each width in turn: one load
    per page, the layout reflowed by the resize (media queries apply at once)."""
    problems: list[str] = []
    for i, width in enumerate(WIDTHS):
        if i:
            page.set_viewport_size({"width": width, "height": 900})
            page.wait_for_timeout(200)  # a11y.js marks the boxes that now scroll, 150 ms after a resize
        problems += axe_problems(page, label, width)
        if shot:
            screenshot(page, f"a11y-{shot}-{width}")
    page.set_viewport_size({"width": WIDTHS[0], "height": 900})
    return problems


@pytest.mark.slow
def test_every_page_has_no_serious_axe_violation_and_fits_every_width(page, demo_objects, make_user) -> None:
    page.set_viewport_size({"width": WIDTHS[0], "height": 900})
    # Which style or script the CSP refused, and where from (the console message does not say).
    page.add_init_script(
        "window.__cspRefused = []; document.addEventListener('securitypolicyviolation', e => "
        "window.__cspRefused.push(e.violatedDirective + ' ' + e.sample + ' at ' + e.sourceFile + ':' + e.lineNumber))"
    )
    problems: list[str] = []

    page.goto("/accounts/login/")
    problems += _at_every_width(page, "login")
    _login(page, demo_objects["admin"].username)

    for name, visit in PAGES.items():
        response = page.goto(visit.path(demo_objects))
        assert response is not None and response.status == 200, f"{name}: {response and response.status}"
        page.wait_for_load_state("networkidle")
        problems += _at_every_width(page, name, visit.shot)

    # The editor after a tester run: the results table and the LLM block swapped in by htmx.
    page.goto(PAGES["rules:editor"].path(demo_objects))
    page.fill("#id_t-query", "주문 조회 부탁해 A-1001")
    page.locator("#tester-table tr[data-rule='route_order_lookup'] .status-fired").wait_for()
    page.wait_for_load_state("networkidle")
    problems += _at_every_width(page, "rules:editor (tester results)")

    # The run page with its pre-step step's rules table opened (loaded by htmx).
    page.goto(PAGES["agents:run_detail"].path(demo_objects))
    page.locator("details.prestep-rules-details summary").first.click()
    page.locator(".prestep-rules table.rules-table").first.wait_for()
    problems += _at_every_width(page, "agents:run_detail (pre-step rules)")

    # The 403 page, as a viewer.
    page.context.clear_cookies()
    _login(page, make_user("viewer").username)
    response = page.goto("/mcp/new/")
    assert response is not None and response.status == 403
    problems += _at_every_width(page, "403")

    assert not problems, f"{len(problems)} accessibility problems:\n" + "\n".join(problems)


def test_keyboard_focus_stays_on_the_moved_rules_button(page, logged_in) -> None:
    from playwright.sync_api import expect

    from rules.models import RuleSet

    call_command("load_demo", "--no-refresh", "--no-runs", verbosity=0)
    rule_set = RuleSet.objects.get(name="seed-rules")
    first, second, third = rule_set.rules.order_by("position")
    logged_in("editor")
    page.goto(f"/rules/{rule_set.pk}/")
    rules = page.locator("#rule-list li.rule")

    # Keyboard only: focus the first rule's "down" button and press Enter; the list is redrawn by htmx.
    page.locator(f"#rule-{first.pk} button[value=down]").focus()
    page.keyboard.press("Enter")
    expect(rules.nth(1)).to_have_id(f"rule-{first.pk}")
    expect(rules.nth(1).locator("button[value=down]")).to_be_focused()
    assert list(rule_set.rules.order_by("position").values_list("pk", flat=True)) == [
        second.pk,
        first.pk,
        third.pk,
    ]

    # Moved to the end, its "down" button is disabled: focus goes to its "up" button, not to the page.
    page.keyboard.press("Enter")
    expect(rules.nth(2)).to_have_id(f"rule-{first.pk}")
    expect(rules.nth(2).locator("button[value=up]")).to_be_focused()

    # And up again from the keyboard, focus staying on that "up" button.
    page.keyboard.press("Enter")
    expect(rules.nth(1)).to_have_id(f"rule-{first.pk}")
    expect(rules.nth(1).locator("button[value=up]")).to_be_focused()


def test_a_second_enter_right_after_the_list_is_redrawn_moves_the_rule_again_in_place(
    page, logged_in
) -> None:
    # The rule list settles at once: with htmx's 20 ms settle delay, its new move buttons belonged to
    # plain forms for that long, and an Enter then posted the whole page (focus lost to the reload).
    from playwright.sync_api import expect

    from rules.models import RuleSet

    call_command("load_demo", "--no-refresh", "--no-runs", verbosity=0)
    rule_set = RuleSet.objects.get(name="seed-rules")
    first = rule_set.rules.order_by("position").first()
    logged_in("editor")
    page.goto(f"/rules/{rule_set.pk}/")
    loads: list[str] = []
    page.on("load", lambda: loads.append(page.url))
    rules = page.locator("#rule-list li.rule")
    page.locator(f"#rule-{first.pk} button[value=down]").focus()
    page.keyboard.press("Enter")
    page.wait_for_function(
        "id => document.querySelectorAll('#rule-list li.rule')[1].id === id"
        " && document.activeElement.id === id + '-down'",
        arg=f"rule-{first.pk}",
    )
    page.keyboard.press("Enter")  # at once, as a keyboard user repeating the key does
    expect(rules.nth(2)).to_have_id(f"rule-{first.pk}")
    expect(rules.nth(2).locator("button[value=up]")).to_be_focused()
    assert loads == []  # both moves were htmx requests: no page load


@pytest.mark.slow
def test_flash_messages_disabled_rules_and_wide_diffs_in_both_languages(
    browser, live_server, demo_objects
) -> None:
    """States the demo never reaches, in English and Korean: a page with a flash message, a rule set
    with a disabled rule, a version diff with a long value. No serious axe violation (listitem,
    contrast), no sideways overflow at 1440 px, and no English change label in the Korean diff."""
    from rules.models import Rule

    rule = Rule.objects.filter(rule_set=demo_objects["rule_set"]).order_by("position").first()
    Rule.objects.filter(pk=rule.pk).update(enabled=False, params='{"query": "' + "긴 값 " * 120 + '"}')
    problems: list[str] = []
    for locale, saved in (("en-US", "Saved agent"), ("ko-KR", "저장")):
        context = browser.new_context(
            base_url=live_server.url, viewport={"width": 1440, "height": 900}, locale=locale
        )
        context.set_default_timeout(15_000)
        page = context.new_page()
        try:
            _login(page, demo_objects["admin"].username)
            page.goto(f"/agents/{demo_objects['agent'].pk}/edit")
            page.click("#agent-form button[type=submit]")
            page.wait_for_url("**/agents/")
            assert saved in page.locator("#messages").inner_text(), page.locator("#messages").inner_text()
            problems += axe_problems(page, f"{locale} flash message", 1440)
            page.goto(f"/rules/{demo_objects['rule_set'].pk}/?rule={rule.pk}")
            assert page.locator(".rule.is-disabled").count() == 1
            problems += axe_problems(page, f"{locale} disabled rule", 1440)
            page.goto(f"/rules/{demo_objects['rule_set'].pk}/versions/diff?a=1&b=draft")
            problems += axe_problems(page, f"{locale} wide diff", 1440)
            scroll = page.evaluate("document.documentElement.scrollWidth")
            if scroll > 1440:
                problems.append(f"{locale} wide diff: the page is {scroll}px wide at 1440 px")
            labels = page.locator("#diff .tag").all_inner_texts()
            assert labels, "the diff shows no change"
            if locale == "ko-KR":
                english = [label for label in labels if label in ("added", "removed", "changed", "moved")]
                if english:
                    problems.append(f"English change labels in the Korean diff: {english}")
        finally:
            context.close()
    assert not problems, f"{len(problems)} accessibility problems:\n" + "\n".join(problems)
