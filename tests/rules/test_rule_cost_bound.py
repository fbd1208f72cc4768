"""The workbench refuses a rule whose cost is not bounded within the per-rule limit when it is
saved, and a rule set whose rules together are over the request limit when it is published, in
English and Korean (docs/expressions.md, "Cost bound")."""

from __future__ import annotations

import pytest
from django.utils import timezone, translation

from llamon_agent import settings as llamon_settings
from rules import services
from rules.errors import RuleError
from rules.models import RuleSetVersion
from servers.models import McpServer

pytestmark = pytest.mark.django_db


@pytest.fixture
def rule_set(make_user):
    McpServer.objects.create(
        mcp_id="order-service",
        transport="http",
        url="http://127.0.0.1:9/mcp",
        tools=[{"name": "get_order", "description": "", "input_schema": {"type": "object"}}],
        tools_refreshed_at=timezone.now(),
    )
    editor = make_user("editor")
    rs = services.rule_set_create(actor=editor, name="orders")
    for i in range(3):
        services.rule_create(
            actor=editor,
            rule_set=rs,
            name=f"words_{i}",
            mcp_id="order-service",
            tool_name="get_order",
            when=f"len(query.split()) > {i}",  # ~134,000 units at worst: within a rule's limit
            params='{"q": query[:50]}',
        )
    return editor, rs


@pytest.fixture
def small_request_limit(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("LLAMON_REQUEST_COST_BUDGET", "300000")
    llamon_settings.cost_budgets.cache_clear()
    yield
    monkeypatch.delenv("LLAMON_REQUEST_COST_BUDGET")
    llamon_settings.cost_budgets.cache_clear()


@pytest.mark.parametrize(
    "language,expected",
    [
        ("en", "over the limit of 2,000,000 units a rule: 'sorted(query + query)' costs up to"),
        ("ko", "규칙당 한도 2,000,000 단위를 넘습니다: 'sorted(query + query)' 부분이 최대"),
    ],
)
def test_a_rule_over_the_per_rule_limit_is_refused_when_saved(rule_set, language: str, expected: str) -> None:
    editor, rs = rule_set
    with translation.override(language), pytest.raises(RuleError) as info:
        services.rule_create(
            actor=editor,
            rule_set=rs,
            name="sorts",
            mcp_id="order-service",
            tool_name="get_order",
            when="len(sorted(query + query)) > len(sorted(query + query)) and len(query.split()) > 2",
            params="{}",
        )
    assert info.value.field == "when"
    assert expected in str(info.value)
    assert ("line 1, column 5" if language == "en" else "1행 5열") in str(info.value)  # at sorted(
    assert not rs.rules.filter(name="sorts").exists()


def test_a_rule_set_within_the_request_limit_is_published(rule_set) -> None:
    editor, rs = rule_set
    assert services.rule_set_publish(actor=editor, rule_set=rs).number == 1


@pytest.mark.parametrize(
    "language,expected",
    [
        ("en", "This rule set cannot be published: the rules together may cost up to"),
        ("ko", "이 규칙 세트는 게시할 수 없습니다: 규칙들을 합치면"),
    ],
)
def test_a_rule_set_over_the_request_limit_is_refused_at_publish(
    rule_set, small_request_limit, language: str, expected: str
) -> None:
    editor, rs = rule_set
    with translation.override(language), pytest.raises(RuleError) as info:
        services.rule_set_publish(actor=editor, rule_set=rs)
    assert expected in str(info.value)
    assert "300,000" in str(info.value) and "words_0 (" in str(info.value)
    assert not RuleSetVersion.objects.filter(rule_set=rs).exists()


@pytest.fixture
def higher_rule_limit(monkeypatch: pytest.MonkeyPatch):
    """A rule saved while the per-rule limit was 10x higher (as before an upgrade whose estimator
    prices it higher): the limit then comes back to its default."""
    monkeypatch.setenv("LLAMON_EXPR_COST_BUDGET", "10000000")
    llamon_settings.cost_budgets.cache_clear()
    yield lambda: (monkeypatch.delenv("LLAMON_EXPR_COST_BUDGET"), llamon_settings.cost_budgets.cache_clear())
    llamon_settings.cost_budgets.cache_clear()


@pytest.mark.parametrize(
    "language,expected",
    [
        ("en", "This rule set cannot be published: rule sorts: when: line 1, column 5: this expression"),
        ("ko", "이 규칙 세트는 게시할 수 없습니다: 규칙 sorts: when: 1행 5열"),
    ],
)
def test_a_stored_rule_over_the_limit_still_runs_is_warned_and_blocks_only_a_new_version(
    rule_set, higher_rule_limit, language: str, expected: str
) -> None:
    from rules.checks import rule_set_problems
    from rules.engine import compile_snapshot, rule_set_snapshot, servers_by_id

    editor, rs = rule_set
    services.rule_create(
        actor=editor,
        rule_set=rs,
        name="sorts",
        mcp_id="order-service",
        tool_name="get_order",
        when="len(sorted(query + query)) > len(sorted(query + query))",
        params="{}",
    )
    higher_rule_limit()  # back to the default limit: the stored rule is now over it
    snapshot = rule_set_snapshot(rs)
    compiled = compile_snapshot(snapshot)  # a stored rule is never refused when compiled
    outcome = compiled.rules[-1].evaluate_ns  # it runs (metered) on an ordinary request
    from llamon_agent.expr import build_namespace
    from llamon_agent.tools import DeterministicContext

    assert outcome(build_namespace(DeterministicContext(query="주문 조회"))) is None  # ran: not fired
    with translation.override(language):
        warned = rule_set_problems(snapshot, servers_by_id(["order-service"]))["sorts"]
        assert [p.code for p in warned] == ["cost_over"] and "2,000,000" in warned[0].message
        with pytest.raises(RuleError) as info:
            services.rule_set_publish(actor=editor, rule_set=rs)
    assert expected in str(info.value)
    assert not RuleSetVersion.objects.filter(rule_set=rs).exists()
