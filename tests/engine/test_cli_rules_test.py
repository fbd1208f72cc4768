"""`llamon rules test`: a pulled directory's cases run with the engine alone (no server, no Django), JUnit XML out."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from llamon_agent.cli import main
from llamon_agent.rules_code import tree_files

RULES = [
    {
        "name": "route_order_lookup",
        "description": "",
        "mcp_id": "order-service",
        "tool_name": "get_order",
        "when": '"주문" in ctx.query and "조회" in ctx.query',
        "params": '{"query": ctx.query}',
        "stop": False,
        "enabled": True,
    },
    {
        "name": "route_by_available_tool",
        "description": "",
        "mcp_id": "knowledge-base",
        "tool_name": "search_docs",
        "when": '"search_docs" in tool_names and "검색" in ctx.query',
        "params": '{"q": ctx.query}',
        "stop": False,
        "enabled": True,
    },
]
SERVERS = {
    "order-service": {
        "enabled": True,
        "tools": [{"name": "get_order", "description": "", "input_schema": {}}],
    },
    # The rule's condition reads the bound tools: the directory's tool lists are what makes it fire.
    "knowledge-base": {
        "enabled": True,
        "tools": [{"name": "search_docs", "description": "", "input_schema": {}}],
    },
}


def _content(expected_tool: str) -> dict[str, Any]:
    return {
        "rule_set": 1,
        "name": "support",
        "revision": 3,
        "servers": SERVERS,
        "document": {
            "format": "llamon-ruleset/1",
            "name": "support",
            "description": "",
            "rules": RULES,
            "cases": [
                {
                    "name": "order lookup",
                    "input": {"query": "주문 조회 A-1001"},
                    "expected": {"must_fire": [{"tool_name": expected_tool}]},
                },
                {
                    "name": "kb search",
                    "input": {"query": "배송 검색"},
                    "expected": {
                        "must_fire": [
                            {
                                "mcp_id": "knowledge-base",
                                "tool_name": "search_docs",
                                "params": {"q": "배송 검색"},
                            }
                        ]
                    },
                },
            ],
        },
    }


def _write(tree: Path, content: dict[str, Any]) -> None:
    for rel, text in tree_files(content).items():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_text(text, encoding="utf-8")


@pytest.mark.parametrize(("expected_tool", "status"), [("get_order", 0), ("list_orders", 1)])
def test_cases_run_without_a_server_and_the_junit_xml_parses(
    expected_tool: str, status: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _write(tmp_path / "tree", _content(expected_tool))
    report = tmp_path / "junit.xml"
    assert main(["rules", "test", str(tmp_path / "tree"), "--junit-xml", str(report)]) == status
    suites = ET.parse(report).getroot()
    assert suites.tag == "testsuites"
    (suite,) = suites.findall("testsuite")
    assert suite.get("name") == "support" and suite.get("tests") == "2"
    assert suite.get("failures") == str(status) and suite.get("errors") == "0"
    testcases = {c.get("name"): c for c in suite.findall("testcase")}
    assert set(testcases) == {"order lookup", "kb search"}
    assert all(
        c.get("classname") == "rules.support" and float(c.get("time") or "x") >= 0 for c in testcases.values()
    )
    assert testcases["kb search"].find("failure") is None
    failure = testcases["order lookup"].find("failure")
    out = capsys.readouterr().out
    if status:
        assert failure is not None and "list_orders should have fired but did not" in (
            failure.get("message") or ""
        )
        assert "FAIL order lookup" in out and "1 passed, 1 failed" in out
    else:
        assert failure is None and "2 passed, 0 failed" in out


def test_a_server_missing_from_ruleset_json_is_not_bound(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """As on the workbench: a disabled server binds nothing, so its rules cannot fire (the case fails)."""
    content = _content("get_order")
    content["servers"] = {**SERVERS, "knowledge-base": {**SERVERS["knowledge-base"], "enabled": False}}
    _write(tmp_path / "tree", content)
    assert main(["rules", "test", str(tmp_path / "tree")]) == 1
    assert "FAIL kb search" in capsys.readouterr().out


def test_an_unreadable_directory_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["rules", "test", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("llamon rules test: ") and "ruleset.json is missing" in err and err.count("\n") == 1
    _write(tmp_path / "tree", _content("get_order"))
    (tmp_path / "tree" / "rules" / "010-route_order_lookup.json").write_text('{"name": ', encoding="utf-8")
    assert main(["rules", "test", str(tmp_path / "tree")]) == 2
    assert "010-route_order_lookup.json:1:10: not valid JSON" in capsys.readouterr().err


def test_a_static_check_error_fails_the_run_and_names_the_rule(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The workbench's checks run too: a rule whose tool its server no longer lists is an error even
    when every case passes; a warning is shown and does not fail."""
    content = _content("get_order")
    extra = dict(RULES[0], name="route_billing", tool_name="get_invoice", when="False")
    warned = dict(RULES[0], name="route_low_spo2", when='data_get("spo2", 100) < 90', params='{"query": ""}')
    content["document"] = {**content["document"], "rules": [*RULES, extra, warned]}
    _write(tmp_path / "tree", content)
    report = tmp_path / "junit.xml"
    assert main(["rules", "test", str(tmp_path / "tree"), "--junit-xml", str(report)]) == 1
    out = capsys.readouterr().out
    assert "ERROR route_billing: Tool 'get_invoice' is not in the current tool list of 'order-service'" in out
    assert "warn  route_low_spo2: data_get('spo2', 100) is compared with a number" in out
    assert "2 passed, 0 failed, 1 check error " in out
    (suite,) = ET.parse(report).getroot().findall("testsuite")
    assert suite.get("tests") == "3" and suite.get("failures") == "1"
    check = next(c for c in suite.findall("testcase") if c.get("name") == "check route_billing")
    failure = check.find("failure")
    assert failure is not None and failure.get("type") == "CheckError"
