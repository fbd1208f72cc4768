"""The impact diff (governance.impact): calls added, removed and changed, grouped by rule. No database."""

from __future__ import annotations

from governance.impact import (
    MAX_RULE_GROUPS,
    OTHER_RULES,
    SAMPLES_PER_RULE,
    Call,
    ImpactReport,
    RuleChange,
    Side,
    changed_param_keys,
    run_diff,
)


def side(calls: dict[str, tuple[str, str, object]] | None = None, error_rule=None, error=None) -> Side:
    return Side({rule: Call(*call) for rule, call in (calls or {}).items()}, error_rule, error)


ORDER = ("orders", "get_order", {"order_id": "A-1", "lang": "ko"})


def test_the_same_calls_are_no_change() -> None:
    assert run_diff(side({"route": ORDER}), side({"route": ORDER})) == []


def test_a_call_only_the_candidate_makes_is_added_and_one_it_drops_is_removed() -> None:
    old = side({"route": ORDER})
    new = side({"faq": ("kb", "search", {"q": "x"})})
    assert run_diff(old, new) == [RuleChange("route", "removed"), RuleChange("faq", "added")]


def test_changed_params_name_the_keys_that_differ() -> None:
    new = side({"route": ("orders", "get_order", {"order_id": "A-2", "lang": "ko", "extra": 1})})
    assert run_diff(side({"route": ORDER}), new) == [RuleChange("route", "changed", ("order_id", "extra"))]


def test_a_different_tool_or_server_is_a_change_of_the_rule() -> None:
    new = side({"route": ("orders2", "find_order", ORDER[2])})
    assert run_diff(side({"route": ORDER}), new) == [RuleChange("route", "changed", ("(tool)", "(server)"))]


def test_params_that_are_not_objects_compare_whole() -> None:
    assert changed_param_keys([1], [2]) == ("(params)",)
    assert changed_param_keys({"a": None}, {}) == ("a",)  # a key set to null is not a missing key
    assert changed_param_keys({"a": 1}, {"a": 1}) == ()


def test_a_candidate_error_is_reported_once_at_its_rule_not_also_as_a_removal() -> None:
    old = side({"route": ORDER})
    new = side({}, error_rule="route", error="확정 호출된 MCP 단계에서 오류가 발생했습니다: route: boom")
    assert run_diff(old, new) == [RuleChange("route", "error")]


def test_an_error_the_recorded_run_had_too_is_no_change_and_one_it_no_longer_has_is_fixed() -> None:
    assert run_diff(side(error_rule="r"), side(error_rule="r")) == []
    assert run_diff(side(error_rule="r"), side({"r": ORDER})) == [
        RuleChange("r", "added"),
        RuleChange("r", "fixed"),
    ]


def test_the_report_groups_changes_by_rule_with_counts_keys_and_samples() -> None:
    report = ImpactReport()
    mask = lambda value: value  # noqa: E731
    for run_id in range(1, 6):
        new = ("orders", "get_order", {"order_id": f"A-{run_id}", "lang": "ko"})
        report.add(
            run_id=run_id,
            created_at="t",
            query=lambda: "q",
            old=side({"route": ORDER}),
            new=side({"route": new, "faq": ("kb", "search", {})}),
            mask=mask,
        )
    report.add(
        run_id=9,
        created_at="t",
        query=lambda: "q",
        old=side({"route": ORDER}),
        new=side({"route": ORDER}),
        mask=mask,
    )
    report.skip()
    data = report.to_json()
    assert (data["replayed"], data["unchanged"], data["changed"], data["skipped"]) == (6, 1, 5, 1)
    by_rule = {g["rule"]: g for g in data["rules"]}
    # Runs 1-5 get a new "faq" call; run 1 keeps the old params and run 9 changes nothing.
    assert (by_rule["route"]["changed"], by_rule["route"]["runs"]) == (4, 4)
    assert by_rule["route"]["param_keys"] == [{"key": "order_id", "runs": 4}]
    assert (by_rule["faq"]["added"], by_rule["faq"]["runs"]) == (5, 5)
    assert data["kinds"] == {"added": 5, "removed": 0, "changed": 4, "error": 0, "fixed": 0}
    samples = by_rule["faq"]["samples"]
    assert len(samples) == SAMPLES_PER_RULE and samples[0]["run_id"] == 1
    assert samples[1]["old"] == [
        {"rule": "route", **dict(zip(("mcp_id", "tool_name", "params"), ORDER, strict=True))}
    ]
    assert [c["rule"] for c in samples[1]["new"]] == ["route", "faq"]


def test_the_sample_query_is_read_only_when_a_sample_is_kept() -> None:
    report, asked = ImpactReport(), []
    for run_id in range(10):
        report.add(
            run_id=run_id,
            created_at="t",
            query=lambda r=run_id: asked.append(r) or "q",
            old=side(),
            new=side({"faq": ORDER}),
            mask=lambda v: v,
        )
    assert asked == list(range(SAMPLES_PER_RULE))


def test_error_messages_are_masked_in_the_report() -> None:
    report = ImpactReport()
    report.add(
        run_id=1,
        created_at="t",
        query=lambda: "q",
        old=side(),
        new=side(error_rule="r", error="r: bad card 4111"),
        mask=lambda v: v.replace("4111", "[card]"),
    )
    assert report.to_json()["rules"][0]["errors"] == ["r: bad card [card]"]


def test_rule_groups_are_capped() -> None:
    report = ImpactReport()
    for i in range(MAX_RULE_GROUPS + 5):
        report.add(
            run_id=i,
            created_at="t",
            query=lambda: "q",
            old=side(),
            new=side({f"r{i}": ORDER}),
            mask=lambda v: v,
        )
    groups = {g["rule"]: g for g in report.to_json()["rules"]}
    assert len(groups) == MAX_RULE_GROUPS and groups[OTHER_RULES]["added"] == 6
