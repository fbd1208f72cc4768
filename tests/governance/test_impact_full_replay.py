"""The full impact replay decides each distinct request once: its report must be exactly what
evaluating every run's request in full gives (``replay_each_run``, the obvious way, kept here as
the reference), and runs that differ only in context keys no rule reads must share a decision.

The runs repeat requests the way real traffic does (a new session id each time), and differ in
what the rules read (a user id), in what they do not read (a big note, a nested value), in their
DataParts, and in the shape of their stored context (empty, not an object).
"""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from agents.models import Run
from agents.redaction import redactor
from governance import requests, services
from governance.impact import ImpactReport
from governance.selectors import RunFilter
from llamon_agent.expr.limits import MAX_DATA_BYTES, MAX_DATA_DEPTH
from llamon_agent.tools import AgentRequest
from rules import engine
from rules import services as rule_services
from tests.support.recorded_runs import record_run
from tests.support.rule_sets import build_rule_set

V1 = [
    {
        "name": "r_order",
        "mcp_id": "order-service",
        "tool_name": "get_order",
        "when": '"주문" in query',
        "params": '{"query": query}',
    },
    {
        "name": "r_crm",
        "mcp_id": "customer-crm",
        "tool_name": "get_customer_profile",
        "when": 'ctx.context.get("chatbotId") == "premium-support"',
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
        "name": "r_kb",
        "mcp_id": "knowledge-base",
        "tool_name": "search_docs",
        "when": '"search_docs" in tool_names and "검색" in query',
        "params": '{"q": query}',
    },
]
PREMIUM = {"chatbotId": "premium-support", "userId": "C-7"}


def _nested(levels: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(levels):
        value = [value]
    return value


def _rule(name: str, when: str, params: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "description": "",
        "mcp_id": "knowledge-base",
        "tool_name": "search_docs",
        "when": when,
        "params": params,
        "stop": False,
        "enabled": True,
        **extra,
    }


def edit_params(s):
    s[0]["params"] = '{"query": query, "lang": "ko"}'


def user_matters(s):  # the stop rule now depends on who asks: runs equal but for the userId differ
    s[2]["when"] = '"환불" in query and context.get("userId") != "C-1"'


def reads_another_key(s):
    s.insert(0, _rule("r_tier", '"tier" in context and context["tier"] == "gold"', '{"q": query}'))


def reads_the_whole_context(s):
    s.append(_rule("r_many", "len(context) > 2", '{"q": query, "n": len(context)}'))


def reads_the_data(s):
    s.append(_rule("r_amount", 'data_get("amount", 0) > 100', '{"amount": data_get("amount", 0)}'))


def shows_the_user(s):  # 1, 1.0 and True are equal in Python, not as text
    s.append(_rule("r_user", 'str(context.get("userId")) == "1"', '{"user": context.get("userId")}'))


def fails_on_premium(s):
    s.insert(0, _rule("r_bad", 'context.get("chatbotId") == "premium-support"', '{"x": context["nope"]}'))


def disable_stop(s):
    s[2]["enabled"] = False


def stop_first(s):  # a stop rule added first: the calls recorded after it are gone
    s.insert(0, {**_rule("r_first", '"주문" in query', '{"query": query}'), "stop": True})


def tool_gone(s):  # a tool its server does not offer: an error, not a kept call
    s[0]["tool_name"] = "no_such_tool"


CHANGES = [edit_params, user_matters, reads_another_key, reads_the_whole_context, reads_the_data]
CHANGES += [shows_the_user, fails_on_premium, disable_stop, stop_first, tool_gone]


@pytest.fixture
def recorded(editor, demo_servers):
    rule_set = build_rule_set(editor, "full", V1)
    rule_services.rule_set_publish(actor=editor, rule_set=rule_set, message="v1")
    rule_set.refresh_from_db()
    n = 0
    for repeat in range(3):  # the same requests again, each in a session of its own
        for query, context in [
            ("주문 조회 A-1", {"chatbotId": "basic", "userId": "C-1"}),
            ("주문 조회 A-1", {"chatbotId": "basic", "userId": "C-2"}),
            ("환불 해주세요", {**PREMIUM, "userId": "C-1"}),
            ("환불 해주세요", PREMIUM),
            ("검색 주문", {**PREMIUM, "tier": "gold"}),
            ("검색 주문", {**PREMIUM, "tier": "silver", "extra": 1}),
            ("안녕하세요", {}),
        ]:
            n += 1
            record_run(
                rule_set, query, context={**context, "sessionId": f"s-{n}"}, age=timedelta(hours=repeat + 1)
            )
    # Unread data over the caps (too big, too deep): the pre-step fails on it, unlike on the same
    # request without it.
    record_run(
        rule_set,
        "주문 조회 A-1",
        context={"chatbotId": "basic", "userId": "C-1", "note": "x" * MAX_DATA_BYTES},
    )
    record_run(
        rule_set,
        "주문 조회 A-1",
        context={"chatbotId": "basic", "userId": "C-1", "n": _nested(MAX_DATA_DEPTH + 2)},
    )
    # DataParts and stored contexts of other shapes (as an API client may have sent them).
    for data, context in [
        ([{"amount": 500}], {"userId": "C-1"}),
        ([{"amount": 5}], {"userId": "C-1"}),
        (None, ""),
        (None, []),
        (None, [1, 2]),
        (None, {"userId": None}),
        (None, {"userId": 1}),
        (None, {"userId": 1.0}),
        (None, {"userId": True}),
    ]:
        run = record_run(rule_set, "주문 A-9", context={"sessionId": "x"})
        Run.objects.filter(pk=run.pk).update(a2a_data=data, context=context)
    return rule_set


def window(rule_set) -> RunFilter:
    now = timezone.now()
    return RunFilter(rule_set_name=rule_set.name, since=now - timedelta(days=7), until=now)


def replay_each_run(candidate: list[dict[str, Any]], runs: RunFilter) -> dict[str, Any]:
    """The reference: every run's stored request evaluated in full, one run at a time."""
    compiled = engine.compile_snapshot(candidate)
    backend = engine.dry_backend(engine.servers_by_id(engine.snapshot_mcp_ids(candidate)))
    mask = redactor()
    report = ImpactReport()
    for run in runs.queryset().order_by("created_at", "id"):
        prestep = run.steps.filter(kind="prestep").first()
        if prestep is None or prestep.status not in ("ok", "error"):
            report.skip()
            continue
        steps = run.steps.filter(kind="rule").order_by("seq")
        request = AgentRequest(
            query=run.query, context=run.context or {}, a2a_data=run.a2a_data, a2a_files=run.a2a_files
        )
        outcome = services.run_prestep(compiled, request, backend=backend, dry_run=True)
        report.add(
            run_id=run.pk,
            created_at=run.created_at.isoformat(),
            query=lambda r=run: str(mask(r.query)),
            old=services.old_side([(s.name, s.status, s.mcp_id, s.tool_name, s.input) for s in steps], mask),
            new=services.new_side(outcome, mask),
            mask=mask,
        )
    return report.to_json()


@pytest.mark.django_db
@pytest.mark.parametrize("change", CHANGES, ids=[c.__name__ for c in CHANGES])
def test_the_replay_reports_what_evaluating_every_run_in_full_reports(recorded, change, monkeypatch) -> None:
    evaluated = [0]
    real = services.run_prestep

    def counted(*args: Any, **kwargs: Any) -> Any:
        evaluated[0] += 1
        return real(*args, **kwargs)

    candidate = copy.deepcopy(list(recorded.versions.get(number=1).content))
    change(candidate)
    expected = replay_each_run(candidate, window(recorded))
    monkeypatch.setattr(services, "run_prestep", counted)
    got = services.impact_replay(snapshot=candidate, runs=window(recorded))
    assert {k: got[k] for k in expected} == expected
    assert got["replayed"] == Run.objects.count() and got["changed"] > 0
    # Requests equal in what the rules read were decided once (the reference evaluated each run).
    if change is reads_the_whole_context:
        assert evaluated[0] == got["replayed"]
    else:
        assert evaluated[0] < got["replayed"] - 10


@pytest.mark.django_db
def test_samples_show_every_call_masked_by_the_current_settings(recorded, editor) -> None:
    """Only the calls that differ are masked to count the changes; a sample shows the whole run,
    masked, also the calls recorded before the masks that now hide a customer id."""
    from agents.services import privacy_update

    privacy_update(actor=editor, redaction_patterns=[r"C-\d+"], mask_presets=[], retention_days=30)
    candidate = copy.deepcopy(list(recorded.versions.get(number=1).content))
    edit_params(candidate)
    expected = replay_each_run(candidate, window(recorded))
    got = services.impact_replay(snapshot=candidate, runs=window(recorded))
    assert {k: got[k] for k in expected} == expected
    assert "C-7" in str(list(Run.objects.values_list("steps__input", flat=True))) and "C-7" not in str(got)


def test_the_context_keys_an_expression_reads_are_found_in_its_syntax() -> None:
    reads = requests.expression_reads
    assert reads('context.get("a") == "x" and ctx.context["b"] and "c" not in context') == {"a", "b", "c"}
    assert reads('{"k": context.get("d", ctx.query), "t": "w" in tool_names, "q": query}') == {"d"}
    assert reads('ctx.a2a_data and data_get("x") and len(ctx.mcp_tools) > 0') == set()
    for source in (
        "len(context) > 1",
        'context.get(query) == "x"',  # a key known at run time only
        'context.get("a") or context',
        "ctx.context",
        "ctx",
        'str(ctx) != ""',
        "[v for v in context.values()]",
        'context.get("a", 1, 2)',
        'context.get(key="a")',
        '"a" < "b" in context',
        "(",  # does not compile: not known
    ):
        assert reads(source) is None, source
    rules = [
        {"when": 'context.get("b")', "params": '{"x": context["a"]}'},
        {"when": "len(context)", "params": "{}"},
    ]
    assert requests.context_reads(rules) is None
    rules[1]["enabled"] = False  # a disabled rule reads nothing
    assert requests.context_reads(rules) == ("b", "a")


@pytest.mark.django_db
def test_small_chunks_split_runs_of_one_instant_and_read_each_run_once(recorded) -> None:
    """Chunks narrow the window to themselves (selectors.chunk_runs): the runs of one instant that
    straddle a chunk's end are read by the next one, with their steps, and none twice."""
    Run.objects.update(created_at=timezone.now() - timedelta(hours=2))
    candidate = copy.deepcopy(list(recorded.versions.get(number=1).content))
    edit_params(candidate)
    whole = services.impact_replay(snapshot=candidate, runs=window(recorded))
    small = services.impact_replay(snapshot=candidate, runs=window(recorded), chunk=3)
    whole.pop("duration_ms")
    small.pop("duration_ms")
    assert small == whole
    assert (small["replayed"], small["skipped"]) == (Run.objects.count(), 0)


@pytest.mark.django_db
def test_the_replay_runs_young_collections_only_and_leaves_the_collector_as_it_was(recorded) -> None:
    """Full collections would walk the replay's caches again and again: the collector is kept to
    its young generations while runs are replayed (collected after each chunk), then restored."""
    import gc

    candidate = copy.deepcopy(list(recorded.versions.get(number=1).content))
    edit_params(candidate)
    during: list[bool] = []
    collected: list[int] = []

    def on_collect(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collected.append(info["generation"])

    def on_progress(done: int, total: int) -> None:
        during.append(gc.isenabled())

    was = gc.isenabled()
    gc.callbacks.append(on_collect)
    try:
        gc.enable()
        services.impact_replay(snapshot=candidate, runs=window(recorded), chunk=5, on_progress=on_progress)
        assert gc.isenabled()
        gc.disable()
        services.impact_replay(snapshot=candidate, runs=window(recorded), chunk=5)
        assert not gc.isenabled()  # a caller's choice is kept
    finally:
        gc.callbacks.remove(on_collect)
        if was:
            gc.enable()
    assert during[0] is True and not any(during[1:])  # before the first chunk, then replaying
    assert len(during) > 3 and collected.count(1) >= len(during) - 1  # a young collection a chunk


def test_params_are_stored_and_masked_once_per_text() -> None:
    masked: list[Any] = []

    def mask(value: Any) -> Any:
        masked.append(value)
        return {k: "***" if k == "card" else v for k, v in value.items()}

    stored = services.memo_stored(mask)
    first = stored({"card": "4111", "n": float("nan"), "ids": (1, 2)})
    assert first == {"card": "***", "n": "NaN", "ids": [1, 2]}  # as the step sink stores them
    assert stored({"card": "4111", "n": float("nan"), "ids": [1, 2]}) is first  # the same text
    assert stored({"card": "4112"}) == {"card": "***"} and len(masked) == 2
    assert stored({"n": 1}) is not stored({"n": 1.0})  # texts differ as the values do
