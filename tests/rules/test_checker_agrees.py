"""One checker (issue 43): ``llamon rules test`` on a pulled directory gives the workbench's answer.

Generated rule sets, as teams write them: several servers (one the set never used before, a
disabled one, one whose tools were never listed, one not registered at all), rules with static-check
errors and warnings (a tool that drifted away, params that no longer fit, a rule a stop rule hides,
a repeated rule, a DataPart value compared with a number), cases that pass and cases that fail. Each
set is stored through the workbench's import, then drift happens on the servers; the workbench's
answer (the editor's checks, the case suite) is compared with the CLI's on what a pull writes.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone, translation

from llamon_agent import rule_checks
from llamon_agent.cases import case_expected_from_outcome
from llamon_agent.cli import main
from llamon_agent.rules_code import read_tree, run_tests, write_tree
from rules import cases, content, engine, selectors
from rules.checks import CHECK_MESSAGES
from rules.errors import RuleError
from rules.exporting import rule_set_import_json
from servers.models import McpServer
from tests.support.rule_sets import TOOLS

pytestmark = pytest.mark.django_db

SETS = 12  # bounded: about 0.3 s a set

PAGER_TOOLS = [
    {
        "name": "page_oncall",
        "description": "Page the on-call doctor.",
        "input_schema": {
            "type": "object",
            "properties": {
                "severity": {"type": "string", "enum": ["high", "low"]},
                "ward": {"type": "string"},
            },
            "required": ["severity"],
            "additionalProperties": False,
        },
    }
]

# (mcp_id, tool_name, params) a rule may call; some are wrong on purpose.
CALLS = [
    ("order-service", "get_order", '{"query": query}'),
    (
        "order-service",
        "list_orders",
        '{"customer_id": context.get("userId", "anonymous"), "status": "refund"}',
    ),
    ("order-service", "list_orders", '{"status": "open"}'),  # misses the required customer_id
    ("customer-crm", "get_customer_profile", '{"customer_id": context.get("userId", "")}'),
    ("knowledge-base", "search_docs", '{"q": query, "limit": data_get("limit", 3)}'),
    ("knowledge-base", "search_docs", '{"q": query, "limit": "three"}'),  # a literal of the wrong type
    ("knowledge-base", "search_archive", '{"q": query}'),  # drifts away (see _drift)
    ("ward-pager", "page_oncall", '{"severity": "high", "ward": context.get("ward", "")}'),
    ("ward-pager", "page_oncall", '{"severity": "urgent"}'),  # not in the enum
    ("ward-pager", "page_oncall", '{"severity": "low", "room": "3"}'),  # a key a closed schema refuses
    ("legacy-billing", "get_invoice", '{"id": query}'),  # the server is disabled
    ("lab-results", "latest_labs", '{"patient": context.get("userId", "")}'),  # never listed
    ("billing-v2", "get_invoice", '{"id": query}'),  # not registered
]
WHENS = [
    "True",
    '"주문" in query and "조회" in query',
    'contains_any(query.lower(), ["refund", "환불"])',
    'data_get("spo2", 100) < 90',  # a warning, and an error on text
    'any(d.get("bp", 0) > 140 for d in a2a_data or [])',
    'context.get("userId") == "u-1"',
    '"strict" in query.lower() and context["mode"] == "vip"',  # fails without a mode
    '"search_docs" in tool_names and "검색" in query',
    "len(a2a_files or []) > 0",
    'data_get("ticketType") == "faq"',
]
INPUTS: list[dict[str, Any]] = [
    {"query": "주문 조회 A-1001"},
    {"query": "환불 요청", "context": {"userId": "u-1"}},
    {"query": "배송 검색"},
    {"query": "vitals", "a2a_data": [{"spo2": 86, "bp": 150}]},
    {"query": "vitals", "a2a_data": [{"spo2": "86"}]},  # a vital sign sent as text
    {"query": "strict check"},
    {"query": "strict check", "context": {"mode": "vip", "ward": "7B"}},
    {"query": "안녕하세요"},
    {"query": "faq", "a2a_data": [{"ticketType": "faq", "limit": 5}]},
    {"query": "첨부 확인", "a2a_files": [{"name": "scan.pdf", "mimeType": "application/pdf"}]},
]


@pytest.fixture
def world(db) -> None:
    """The registered servers: three in every set's reach, a pager no set started with, a disabled
    one, one whose tools were never listed (billing-v2 is not registered at all)."""
    now = timezone.now()
    kb = [*TOOLS["knowledge-base"], {"name": "search_archive", "description": "", "input_schema": {}}]
    for mcp_id, tools in {**TOOLS, "knowledge-base": kb, "ward-pager": PAGER_TOOLS}.items():
        McpServer.objects.create(
            mcp_id=mcp_id, transport="http", url="http://127.0.0.1:9/mcp", tools=tools, tools_refreshed_at=now
        )
    McpServer.objects.create(
        mcp_id="legacy-billing",
        transport="http",
        url="http://127.0.0.1:9/mcp",
        enabled=False,
        tools=[{"name": "get_invoice", "description": "", "input_schema": {}}],
        tools_refreshed_at=now,
    )
    McpServer.objects.create(mcp_id="lab-results", transport="http", url="http://127.0.0.1:9/mcp")


def _drift() -> None:
    """A refresh that removes a tool: the rules that use it are now errors, on both sides."""
    kb = McpServer.objects.get(mcp_id="knowledge-base")
    kb.tools = [t for t in kb.tools if t["name"] != "search_archive"]
    kb.save()


def _rules(rng: random.Random) -> list[dict[str, Any]]:
    rules = []
    for i in range(rng.randint(2, 6)):
        if rules and rng.random() < 0.15:  # a repeated rule (same call and condition)
            rule = dict(rng.choice(rules), name=f"r{i}", stop=False)
        else:
            mcp_id, tool_name, params = rng.choice(CALLS)
            rule = {
                "name": f"r{i}",
                "mcp_id": mcp_id,
                "tool_name": tool_name,
                "when": rng.choice(WHENS),
                "params": params,
                "stop": rng.random() < 0.25,
                "enabled": rng.random() > 0.1,
            }
        rules.append(rule)
    if rng.random() < 0.5:  # a rule on the server the set never used before
        rules.append(
            {
                "name": "page_on_call",
                "mcp_id": "ward-pager",
                "tool_name": "page_oncall",
                "when": rng.choice(WHENS),
                "params": '{"severity": "high"}',
                "stop": False,
                "enabled": True,
            }
        )
    return rules


def _expectation(rng: random.Random, outcome: dict[str, Any], rules: list[dict[str, Any]]) -> dict[str, Any]:
    """What happens now (a case that passes), or a changed expectation (most likely one that fails)."""
    expected = case_expected_from_outcome(outcome)
    roll = rng.random()
    if roll < 0.4:
        return expected
    if roll < 0.55:
        return {}  # nothing fires
    rule = rng.choice(rules)
    if roll < 0.7:
        return {
            "must_fire": [{"mcp_id": rule["mcp_id"], "tool_name": rule["tool_name"]}],
            "other_calls": "allow",
        }
    if roll < 0.8:
        return {"must_not_fire": [{"tool_name": rule["tool_name"]}]}
    if roll < 0.9 and expected["must_fire"]:
        first = dict(expected["must_fire"][0], params={"q": "something else"}, match="partial")
        return {"must_fire": [first]}
    return {"error": "cannot compare"}


def _build(rng: random.Random, actor: Any, n: int) -> Any:
    while True:
        rules = _rules(rng)
        try:
            rule_set = rule_set_import_json(
                actor=actor,
                data={"format": "llamon-ruleset/1", "name": f"set-{n}", "description": "", "rules": rules},
            )
            break
        except RuleError:
            continue  # a draft the workbench refuses to store (e.g. a tool its server does not offer)
    snapshot = engine.rule_set_snapshot(rule_set)
    for k, case_input in enumerate(rng.sample(INPUTS, rng.randint(2, 4))):
        outcome = engine.evaluate(snapshot, cases.case_request(case_input)).answer()
        cases.case_create(
            actor=actor,
            rule_set=rule_set,
            name=f"case {k}",
            input=case_input,
            expected=_expectation(rng, outcome, rules),
        )
    return rule_set


def _workbench(rule_set: Any) -> dict[str, Any]:
    checks = selectors.rule_set_checks(rule_set)
    suite = cases.suite_run(rule_set=rule_set)
    return {
        "checks": {name: [(p.level, p.code, p.message) for p in ps] for name, ps in checks.items()},
        "cases": {r.case.name: (r.result.passed, r.result.problems, r.result.diff) for r in suite.results},
    }


def _directory(rule_set: Any, directory: Path) -> dict[str, Any]:
    write_tree(directory, content.rule_set_pull(rule_set))
    run = run_tests(read_tree(directory))
    return {
        "checks": {name: [(p.level, p.code, p.message) for p in ps] for name, ps in run.problems.items()},
        "cases": {c.name: (c.result.passed, c.result.problems, c.result.diff) for c in run.cases},
    }


def test_llamon_rules_test_gives_the_workbench_answer_on_generated_sets(
    world, editor, tmp_path, capsys
) -> None:
    rng = random.Random(43)
    with translation.override("en"):
        sets = [_build(rng, editor, n) for n in range(SETS)]
        _drift()
        seen: dict[str, int] = {"passed": 0, "failed": 0, "errors": 0, "warnings": 0}
        differences = []
        for rule_set in sets:
            directory = tmp_path / rule_set.name
            ours, theirs = _workbench(rule_set), _directory(rule_set, directory)
            if ours != theirs:
                differences.append((rule_set.name, ours, theirs))
            problems = [p for ps in ours["checks"].values() for p in ps]
            seen["errors"] += sum(1 for p in problems if p[0] == "error")
            seen["warnings"] += sum(1 for p in problems if p[0] == "warning")
            seen["passed"] += sum(1 for passed, _, _ in ours["cases"].values() if passed)
            seen["failed"] += sum(1 for passed, _, _ in ours["cases"].values() if not passed)
            # The command's verdict is the workbench's: it fails on a failing case or a check error.
            fails = any(p[0] == "error" for p in problems) or not all(c[0] for c in ours["cases"].values())
            assert main(["rules", "test", str(directory)]) == (1 if fails else 0)
        capsys.readouterr()
    assert differences == []
    # The generator reaches every kind: passing and failing cases, errors and warnings of each code.
    assert min(seen.values()) > 0, seen
    codes = {p[1] for rule_set in sets for ps in _workbench(rule_set)["checks"].values() for p in ps}
    assert codes >= {
        "server_unknown",
        "server_disabled",
        "tools_unknown",
        "tool_missing",
        "params_mismatch",
        "unreachable",
        "duplicate",
        "datapart_number",
    }, codes


def test_the_check_messages_are_the_engines_in_both_tables() -> None:
    assert set(CHECK_MESSAGES) == set(rule_checks.CHECK_MESSAGES)
    for msg_id, english in rule_checks.CHECK_MESSAGES.items():
        with translation.override("en"):
            assert str(CHECK_MESSAGES[msg_id]) == english, msg_id
        with translation.override("ko"):
            translated = str(CHECK_MESSAGES[msg_id])
        assert translated != english or msg_id == "check.cost_over", f"{msg_id} has no Korean translation"
