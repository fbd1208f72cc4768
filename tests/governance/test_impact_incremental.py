"""Incremental impact replay (governance.incremental): for every kind of rule change the report is
exactly the full replay's, while most runs are decided from what they recorded.

Each case records runs of v1 through the real engine and the product's step sink, then replays a
candidate both ways (``incremental=False``: every run in full). ``decided`` counts the runs the
incremental path decided without a full replay: the speed-up is real only if it is not zero, and
where the rules are not independent (stop rules, the request's cost budget, the tool lists,
changed masks) it must fall back to the full replay and still agree.
"""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from agents.models import Run
from governance import incremental, services
from governance.selectors import RunFilter
from llamon_agent.settings import cost_budgets
from rules import services as rule_services
from servers.models import McpServer
from tests.support.recorded_runs import record_run
from tests.support.rule_sets import build_rule_set

pytestmark = pytest.mark.django_db

V1 = [
    {
        "name": "r_order",
        "mcp_id": "order-service",
        "tool_name": "get_order",
        "when": '"주문" in query',
        "params": '{"query": query}',
    },
    {
        "name": "r_kb",
        "mcp_id": "knowledge-base",
        "tool_name": "search_docs",
        "when": '"검색" in query',
        "params": '{"q": query, "limit": 3}',
    },
    {
        "name": "r_crm",
        "mcp_id": "customer-crm",
        "tool_name": "get_customer_profile",
        "when": 'context.get("chatbotId") == "premium-support"',
        "params": '{"customer_id": context.get("userId")}',
    },
    {
        "name": "r_stop",
        "mcp_id": "order-service",
        "tool_name": "list_orders",
        "stop": True,
        "when": '"환불" in query',
        "params": '{"customer_id": context.get("userId", "anon")}',
    },
    {
        "name": "r_after",
        "mcp_id": "knowledge-base",
        "tool_name": "search_docs",
        "when": '"배송" in query',
        "params": '{"q": "배송"}',
    },
    {
        "name": "r_tools",
        "mcp_id": "knowledge-base",
        "tool_name": "search_docs",
        "when": '"search_docs" in tool_names and "문의" in query',
        "params": '{"q": query}',
    },
]
PREMIUM = {"chatbotId": "premium-support", "userId": "C-7"}
BASIC = {"chatbotId": "basic", "userId": "C-9"}
REQUESTS = [
    ("주문 조회 A-1001", BASIC),
    ("주문 검색 해줘", PREMIUM),
    ("환불 해주세요", PREMIUM),
    ("환불 배송 주문", BASIC),
    ("배송 문의", BASIC),
    ("검색 문의 배송", PREMIUM),
    ("안녕하세요", BASIC),
    ("안녕하세요", PREMIUM),
    ("고마워요", {}),
    ("주문 환불 검색 배송 문의", PREMIUM),
]


@pytest.fixture
def v1(editor, demo_servers):
    rule_set = build_rule_set(editor, "inc", V1)
    rule_services.rule_set_publish(actor=editor, rule_set=rule_set, message="v1")
    rule_set.refresh_from_db()
    for n, (query, context) in enumerate(REQUESTS):
        record_run(rule_set, query, context={**context, "sessionId": f"s-{n}"})
    return rule_set


@pytest.fixture
def decided(monkeypatch) -> list[int]:
    """Counts the runs the incremental path decided (a spy on the real method, which still runs)."""
    count = [0]
    real = incremental.IncrementalPlan.replay

    def spy(self, **kwargs: Any):
        decision = real(self, **kwargs)
        count[0] += decision is not None
        return decision

    monkeypatch.setattr(incremental.IncrementalPlan, "replay", spy)
    return count


def both_ways(rule_set, candidate: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    now = timezone.now()
    runs = RunFilter(rule_set_name=rule_set.name, since=now - timedelta(days=7), until=now)
    full = services.impact_replay(snapshot=candidate, runs=runs, incremental=False)
    fast = services.impact_replay(snapshot=candidate, runs=runs)
    full.pop("duration_ms")
    fast.pop("duration_ms")
    return full, fast


def v1_snapshot(rule_set) -> list[dict[str, Any]]:
    return copy.deepcopy(list(rule_set.versions.get(number=1).content))


def by_name(snapshot: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(r for r in snapshot if r["name"] == name)


def edit_when(s):
    by_name(s, "r_kb")["when"] = '"검색" in query or "문의" in query'


def edit_params(s):
    by_name(s, "r_order")["params"] = '{"query": query, "lang": "ko"}'


def reorder(s):  # r_after before the stop rule: it now fires on runs that stopped before it
    s.insert(3, s.pop(4))


def disable(s):
    by_name(s, "r_crm")["enabled"] = False


def add_stop_first(s):  # a new stop rule ahead of the rest: later kept rules must not fire any more
    s.insert(
        0,
        {
            "name": "r_new",
            "description": "",
            "mcp_id": "order-service",
            "tool_name": "get_order",
            "when": '"주문" in query',
            "params": '{"order": query}',
            "stop": True,
            "enabled": True,
        },
    )


def remove_stop(s):  # without the stop rule, r_after is reached by runs that never evaluated it
    s.remove(by_name(s, "r_stop"))


def change_server(s):
    rule = by_name(s, "r_kb")
    rule["mcp_id"], rule["tool_name"], rule["params"] = "order-service", "get_order", '{"query": query}'


def add_failing_first(s):  # fails on premium requests: the kept calls after it are not made
    s.insert(
        0,
        {
            "name": "r_bad",
            "description": "",
            "mcp_id": "customer-crm",
            "tool_name": "get_customer_profile",
            "when": 'context.get("chatbotId") == "premium-support"',
            "params": '{"x": context["nope"]}',
            "stop": False,
            "enabled": True,
        },
    )


def everything(s):
    for change in (edit_when, edit_params, disable, add_failing_first, reorder):
        change(s)


CHANGES = [
    edit_when,
    edit_params,
    reorder,
    disable,
    add_stop_first,
    remove_stop,
    change_server,
    add_failing_first,
    everything,
]


@pytest.mark.parametrize("change", CHANGES, ids=[c.__name__ for c in CHANGES])
def test_each_kind_of_change_gives_the_full_replays_report(v1, decided, change) -> None:
    candidate = v1_snapshot(v1)
    change(candidate)
    full, fast = both_ways(v1, candidate)
    assert fast == full
    assert full["replayed"] == len(REQUESTS)
    assert full["changed"] > 0
    assert decided[0] > 0  # most runs did not need the full replay


def test_replaying_the_served_version_decides_every_run_from_what_it_recorded(v1, decided) -> None:
    full, fast = both_ways(v1, v1_snapshot(v1))
    assert fast == full
    assert (full["unchanged"], decided[0]) == (len(REQUESTS), len(REQUESTS))


def test_a_stop_rule_added_first_removes_the_kept_calls_after_it(v1, decided) -> None:
    """Independence wrongly assumed (kept calls merged without the candidate's stop) would keep
    r_kb's call on "주문 검색 해줘": the full replay does not make it."""
    candidate = v1_snapshot(v1)
    add_stop_first(candidate)
    full, fast = both_ways(v1, candidate)
    assert fast == full
    groups = {g["rule"]: g for g in full["rules"]}
    assert groups["r_kb"]["removed"] >= 1 and groups["r_new"]["added"] >= 1


def test_a_spent_request_budget_couples_rules_so_those_runs_are_replayed_in_full(
    v1, decided, monkeypatch
) -> None:
    """With a tiny request budget two added costly rules leave nothing for the kept ones after
    them: they fail in the full replay. Keeping their recorded calls would report no error."""
    candidate = v1_snapshot(v1)
    words = ", ".join(f'"w{i:03d}"' for i in range(300))  # about 600 units per evaluation
    for n in (1, 2):
        candidate.insert(
            0,
            {
                "name": f"r_costly{n}",
                "description": "",
                "mcp_id": "order-service",
                "tool_name": "get_order",
                "when": f"contains_any(query, [{words}]) or len(query) != len(query)",  # never indexed
                "params": "{}",
                "stop": False,
                "enabled": True,
            },
        )
    monkeypatch.setenv("LLAMON_EXPR_COST_BUDGET", "1000")
    monkeypatch.setenv("LLAMON_REQUEST_COST_BUDGET", "1000")
    cost_budgets.cache_clear()
    try:
        full, fast = both_ways(v1, candidate)
    finally:
        monkeypatch.undo()
        cost_budgets.cache_clear()
    assert fast == full
    assert full["kinds"]["error"] > 0  # the kept rules after the costly ones ran out of budget
    assert decided[0] == 0


def test_a_tool_gone_from_its_server_is_an_error_not_a_kept_call(v1, decided) -> None:
    kb = McpServer.objects.get(mcp_id="knowledge-base")
    kb.tools = [t for t in kb.tools if t["name"] != "search_docs"] + [{"name": "other", "input_schema": {}}]
    kb.save()
    candidate = v1_snapshot(v1)
    edit_params(candidate)
    full, fast = both_ways(v1, candidate)
    assert fast == full
    groups = {g["rule"]: g for g in full["rules"]}
    assert groups["r_kb"]["error"] >= 1  # r_kb calls a tool the server no longer has
    assert "r_tools" in groups  # reads tool_names: "search_docs" is not there any more
    assert decided[0] > 0


def test_an_unbound_candidate_server_replays_every_run_in_full(v1, decided) -> None:
    McpServer.objects.filter(mcp_id="customer-crm").update(enabled=False)
    candidate = v1_snapshot(v1)
    edit_params(candidate)
    full, fast = both_ways(v1, candidate)
    assert fast == full
    assert full["kinds"]["error"] == len(REQUESTS)
    assert decided[0] == 0


def test_runs_masked_under_other_privacy_settings_are_replayed_in_full(v1, decided, editor) -> None:
    from agents.services import privacy_update

    privacy_update(actor=editor, redaction_patterns=[r"A-\d+"], mask_presets=[], retention_days=30)
    candidate = v1_snapshot(v1)
    edit_params(candidate)
    full, fast = both_ways(v1, candidate)
    assert fast == full
    assert decided[0] == 0  # every run was stored before the masks changed
    assert "A-1001" not in str(full)


def test_runs_recorded_under_the_current_masks_are_decided_incrementally(
    editor, demo_servers, decided
) -> None:
    from agents.services import privacy_update

    privacy_update(actor=editor, redaction_patterns=[], mask_presets=["email"], retention_days=30)
    rule_set = build_rule_set(editor, "inc", V1)
    rule_services.rule_set_publish(actor=editor, rule_set=rule_set, message="v1")
    rule_set.refresh_from_db()
    for n, (query, context) in enumerate(REQUESTS):
        record_run(
            rule_set, f"{query} kim@example.com", context={**context, "sessionId": f"s-{n}"}, age=timedelta(0)
        )
    candidate = v1_snapshot(rule_set)
    edit_params(candidate)
    full, fast = both_ways(rule_set, candidate)
    assert fast == full
    assert decided[0] > 0
    assert "kim@example.com" not in str(full)


def test_runs_whose_served_rules_are_unknown_are_replayed_in_full(v1, decided) -> None:
    Run.objects.update(rule_set_hash="0" * 64, rule_set_version=None)
    candidate = v1_snapshot(v1)
    edit_params(candidate)
    full, fast = both_ways(v1, candidate)
    assert fast == full
    assert decided[0] == 0


def test_runs_of_the_draft_are_found_by_their_hash(editor, demo_servers, decided) -> None:
    rule_set = build_rule_set(editor, "inc", V1)
    rule_services.rule_set_publish(actor=editor, rule_set=rule_set, message="v1")
    rule_set.refresh_from_db()
    draft = copy.deepcopy(list(rule_set.versions.get(number=1).content))
    disable(draft)  # the draft the runs ran: not a published version
    rule_services.rule_update(
        actor=editor, rule=rule_set.rules.get(name="r_crm"), revision=None, enabled=False
    )
    for n, (query, context) in enumerate(REQUESTS):
        record_run(rule_set, query, context={**context, "sessionId": f"s-{n}"}, snapshot=draft)
    candidate = copy.deepcopy(draft)
    edit_params(candidate)
    full, fast = both_ways(rule_set, candidate)
    assert fast == full
    assert decided[0] > 0


def test_context_keys_reads_only_literal_keys() -> None:
    rule = {"when": 'context.get("a") == "x" and ctx.context["b"]', "params": "{'k': context.get('c', 1)}"}
    assert incremental.context_keys([rule]) == ("a", "b", "c")
    for when in (
        "len(context) > 1",
        'context.get(query) == "x"',
        'data_get("a") == 1',
        "a2a_data is None",
        'context.get("a") or context',
    ):
        assert incremental.context_keys([{"when": when, "params": "{}"}]) is None, when


@pytest.mark.parametrize("incremental_on", [True, False])
def test_small_chunks_split_runs_of_one_instant_and_read_each_run_once(v1, incremental_on) -> None:
    """Chunks narrow the window to themselves (selectors.chunk_runs): the runs of one instant that
    straddle a chunk's end are read by the next one, with their steps, and none twice."""
    Run.objects.update(created_at=timezone.now() - timedelta(hours=2))
    candidate = v1_snapshot(v1)
    edit_params(candidate)
    now = timezone.now()
    runs = RunFilter(rule_set_name=v1.name, since=now - timedelta(days=7), until=now)
    whole = services.impact_replay(snapshot=candidate, runs=runs, incremental=incremental_on)
    small = services.impact_replay(snapshot=candidate, runs=runs, chunk=3, incremental=incremental_on)
    whole.pop("duration_ms")
    small.pop("duration_ms")
    assert small == whole
    assert (small["replayed"], small["skipped"]) == (len(REQUESTS), 0)


def user_matters(s):  # the stop rule now depends on who asks: runs equal but for the userId differ
    by_name(s, "r_stop")["when"] = '"환불" in query and context.get("userId") != "C-1"'


@pytest.mark.parametrize(
    "change", [*CHANGES, user_matters], ids=[c.__name__ for c in [*CHANGES, user_matters]]
)
def test_runs_that_repeat_a_request_are_decided_once_and_each_counted_as_the_full_replay_counts_it(
    editor, demo_servers, decided, change
) -> None:
    """Runs equal in what decides them (the query, the context keys the changed rules read, the
    recorded steps) are decided once; a run that differs in a key a changed rule reads is not."""
    rule_set = build_rule_set(editor, "rep", V1)
    rule_services.rule_set_publish(actor=editor, rule_set=rule_set, message="v1")
    rule_set.refresh_from_db()
    for n in range(3):
        for query, context in REQUESTS:
            user = {"userId": f"C-{n}"} if context else {}
            record_run(rule_set, query, context={**context, **user, "sessionId": f"s-{n}-{query}"})
    candidate = v1_snapshot(rule_set)
    change(candidate)
    full, fast = both_ways(rule_set, candidate)
    assert fast == full and full["replayed"] == 3 * len(REQUESTS)
    if (
        change is edit_params
    ):  # r_order reads the query only: runs recording the same steps share one decision
        assert 0 < decided[0] <= full["replayed"] - 8  # 30 without the memo
    if change is user_matters:  # refunds asked by C-1 no longer stop; the same asked by others do
        assert full["changed"] == 3  # the three requests with "환불", asked by C-1


def _nested(levels: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize("unread", ["deep", "large"])
def test_a_request_whose_unread_data_breaks_the_namespace_is_never_decided_from_an_equal_looking_one(
    editor, demo_servers, decided, unread
) -> None:
    """Two runs equal in the query and in every context key the rules read; the second also carries
    data no rule reads but the pre-step still copies: nested deeper than the expression caps allow,
    or (a served run, stored without the product's size check) larger than they allow. The
    candidate's new rule must fail on it, although the first run's decision is remembered.

    What keeps the remembered decisions sound: the pre-step builds the request's namespace (its
    probe) even when no rule is a candidate, so such a run recorded a failed pre-step and is
    replayed in full. Without the probe the second run would look like the first."""
    from llamon_agent.expr.limits import MAX_DATA_BYTES, MAX_DATA_DEPTH

    rule_set = build_rule_set(editor, "caps", V1)
    rule_services.rule_set_publish(actor=editor, rule_set=rule_set, message="v1")
    rule_set.refresh_from_db()
    context = {"chatbotId": "basic", "userId": "C-1"}
    extra = _nested(MAX_DATA_DEPTH + 2) if unread == "deep" else "x" * MAX_DATA_BYTES
    first = record_run(rule_set, "날씨 알려줘", context=context, age=timedelta(hours=2))
    second = record_run(rule_set, "날씨 알려줘", context={**context, "notes": extra})
    assert first.steps.filter(kind="prestep", status="ok").exists()
    assert second.steps.filter(kind="prestep", status="error").exists()  # the probe failed on it
    candidate = v1_snapshot(rule_set)
    candidate.append(
        {
            "name": "r_weather",
            "description": "",
            "mcp_id": "knowledge-base",
            "tool_name": "search_docs",
            "when": '"날씨" in query',
            "params": '{"q": query, "user": context.get("userId")}',
            "stop": False,
            "enabled": True,
        }
    )
    full, fast = both_ways(rule_set, candidate)
    assert fast == full
    weather = next(g for g in full["rules"] if g["rule"] == "r_weather")
    assert weather["added"] == 1  # the first run; the second fails again, before any rule decides


def test_when_the_changed_rules_must_be_evaluated_for_most_runs_the_rest_are_replayed_in_full(
    v1, decided, monkeypatch
) -> None:
    """Nothing repeats and a changed rule is a candidate of every request: deciding incrementally
    costs a pre-step per run plus the merge, so after WARMUP runs the plan gives up, and the report
    is still the full replay's."""
    monkeypatch.setattr(incremental, "WARMUP", 3)
    candidate = v1_snapshot(v1)
    by_name(candidate, "r_crm")["params"] = '{"customer_id": context.get("userId"), "vip": True}'
    full, fast = both_ways(v1, candidate)
    assert fast == full
    assert 0 < decided[0] <= 3  # at most WARMUP runs decided incrementally, then given up
    monkeypatch.setattr(incremental, "WARMUP", 1_000)
    decided[0] = 0
    assert services.impact_replay(
        snapshot=candidate,
        runs=RunFilter(rule_set_name=v1.name, since=timezone.now() - timedelta(days=7), until=timezone.now()),
    )["replayed"] == len(REQUESTS)
    assert decided[0] > 3  # not given up before WARMUP
