"""Rule sets exported as JSON (round trip, import checks) and as an app/tools.py (same results, safe strings)."""

from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
import sys
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.models import AuditEvent
from llamon_agent.prestep import StaticToolBackend, run_prestep
from llamon_agent.tools import AgentRequest, DeterministicContext
from llamon_web.demo import SEED_RULES
from rules import engine, services
from rules.cases import case_create
from rules.errors import RuleError, StaleEditError
from rules.exporting import (
    FORMAT,
    MAX_IMPORT_RULES,
    _lit,
    rule_set_export_json,
    rule_set_export_tools_py,
    rule_set_import_json,
)
from rules.models import Rule, RuleSet
from tests.support.rule_sets import build_rule_set

pytestmark = pytest.mark.django_db

RUFF = Path(sys.executable).with_name("ruff")

# Strings that try to leave the literal they are put in.
HOSTILE = (
    "'''\"\"\"\n import os\nos.system('echo pwned')  # \\ \\\\ \\' \\\" \r\n\t\x0b\x0c\x1b[31m \x85 \u2028 \u2029 "
    "# -*- coding: utf-7 -*- +AAo-import os \ufeff \U0001f600 한국어 \"\"\" '''"
)


# --- JSON -------------------------------------------------------------------------------------------


def _tricky_rule_set(editor) -> RuleSet:
    """Korean, quotes, newlines, escapes and both flags in every field that is free text."""
    rules = [
        *SEED_RULES,
        {
            "name": "route_quotes",
            "description": '따옴표 "double" and \'single\'\n두 번째 줄\t탭 \\ backslash """ \u2028 end',
            "mcp_id": "order-service",
            "tool_name": "get_order",
            "when": '"\\"quoted\\"" in query or \'\\u00e9\' in query or "줄\\n바꿈" in query',
            "params": '{\n  "query": query,\n  "note": "é \\u2028 \\\\ \'"\n}',
            "stop": True,
        },
        {
            "name": "route_off",
            "description": "",
            "mcp_id": "knowledge-base",
            "tool_name": "search_docs",
            "when": "True",
            "params": '{"q": query}',
            "enabled": False,
        },
    ]
    rule_set = build_rule_set(editor, "tricky", rules, '설명: "quoted"\nsecond line ✓')
    case_create(
        actor=editor,
        rule_set=rule_set,
        name="주문 조회 (Korean)",
        input={"query": "주문 조회 부탁해", "context": {"userId": "u-1", "note": 'a\nb "c"'}},
        expected={
            "must_fire": [
                {"tool_name": "get_order", "params": {"query": "주문 조회 부탁해"}, "match": "exact"}
            ]
        },
    )
    case_create(
        actor=editor,
        rule_set=rule_set,
        name="docs by DataPart",
        input={
            "query": "검색",
            "a2a_data": [{"ticketType": "faq", "n": 1.5}],
            "a2a_files": [{"name": "a.pdf"}],
        },
        expected={"must_not_fire": [{"tool_name": "get_customer_profile"}], "error": None},
    )
    return rule_set


def test_export_lists_rules_in_order_with_every_field_and_the_cases(editor, demo_servers) -> None:
    rule_set = _tricky_rule_set(editor)
    data = rule_set_export_json(rule_set)
    assert data["format"] == FORMAT == "llamon-ruleset/1"
    assert data["name"] == "tricky"
    assert [r["name"] for r in data["rules"]] == [r["name"] for r in SEED_RULES] + [
        "route_quotes",
        "route_off",
    ]
    assert list(data["rules"][0]) == [
        "name",
        "description",
        "mcp_id",
        "tool_name",
        "when",
        "params",
        "stop",
        "enabled",
    ]
    assert data["rules"][3]["stop"] is True and data["rules"][4]["enabled"] is False
    assert [c["name"] for c in data["cases"]] == ["docs by DataPart", "주문 조회 (Korean)"]
    assert set(data["cases"][0]) == {"name", "input", "expected"}


def test_export_import_export_round_trips_exactly_through_json_text(editor, demo_servers) -> None:
    rule_set = _tricky_rule_set(editor)
    first = rule_set_export_json(rule_set)
    text = json.dumps(first, ensure_ascii=True)  # \uXXXX escapes in the file itself
    rule_set.delete()

    imported = rule_set_import_json(actor=editor, data=text)

    assert rule_set_export_json(imported) == first
    assert json.dumps(rule_set_export_json(imported), ensure_ascii=False) == json.dumps(
        first, ensure_ascii=False
    )


def test_import_under_another_name_keeps_everything_else(editor, demo_servers) -> None:
    rule_set = _tricky_rule_set(editor)
    first = rule_set_export_json(rule_set)

    copy = rule_set_import_json(actor=editor, data=first, name="tricky copy")

    second = rule_set_export_json(copy)
    assert second["name"] == "tricky copy"
    assert {**second, "name": "tricky"} == first
    assert RuleSet.objects.filter(name="tricky").exists()


def test_import_is_audited_and_each_rule_has_its_rule_create_event(editor, demo_servers) -> None:
    data = rule_set_export_json(_tricky_rule_set(editor))
    data["name"] = "audited"

    imported = rule_set_import_json(actor=editor, data=data)

    event = AuditEvent.objects.get(action="rule_set.import", object_id=str(imported.pk))
    assert event.actor == editor
    assert event.before is None
    assert event.after["rules"] == [r["name"] for r in data["rules"]]
    assert event.after["cases"] == [c["name"] for c in data["cases"]]
    rule_ids = {str(pk) for pk in imported.rules.values_list("pk", flat=True)}
    created = set(AuditEvent.objects.filter(action="rule.create").values_list("object_id", flat=True))
    assert rule_ids <= created
    assert (
        AuditEvent.objects.filter(
            action="case.create", object_id__in=[str(c.pk) for c in imported.cases.all()]
        ).count()
        == 2
    )


def test_import_with_replace_swaps_the_draft_rules_and_bumps_the_revision(editor, demo_servers) -> None:
    target = build_rule_set(editor, "target", SEED_RULES[:1])
    case_create(actor=editor, rule_set=target, name="kept", input={"query": "x"}, expected={})
    case_create(actor=editor, rule_set=target, name="docs by DataPart", input={"query": "old"}, expected={})
    source = rule_set_export_json(_tricky_rule_set(editor))
    revision = target.revision
    old_rules = engine.rule_set_snapshot(target)

    result = rule_set_import_json(actor=editor, data=source, replace=target, revision=revision)

    assert result.pk == target.pk and result.name == "target"
    assert result.revision > revision
    assert engine.rule_set_snapshot(result) == source["rules"]
    assert result.description == source["description"]
    cases = {c.name: c for c in result.cases.all()}
    assert set(cases) == {"kept", "docs by DataPart", "주문 조회 (Korean)"}
    assert cases["docs by DataPart"].input["query"] == "검색"  # same name: updated from the file
    event = AuditEvent.objects.get(action="rule_set.import", object_id=str(target.pk))
    assert event.before["rules"] == old_rules


def test_replace_with_a_stale_revision_is_refused_and_changes_nothing(editor, demo_servers) -> None:
    target = build_rule_set(editor, "target", SEED_RULES)
    seen = target.revision
    services.rule_update(
        actor=editor, rule=target.rules.first(), revision=None, description="edited meanwhile"
    )
    before = engine.rule_set_snapshot(target)

    with pytest.raises(StaleEditError) as info:
        rule_set_import_json(
            actor=editor, data=rule_set_export_json(target) | {"rules": []}, replace=target, revision=seen
        )

    assert "Nothing was overwritten" in info.value.message
    assert engine.rule_set_snapshot(target) == before


def test_a_bad_rule_rolls_the_whole_import_back_and_names_the_rule_and_field(editor, demo_servers) -> None:
    data = {
        "format": FORMAT,
        "name": "half",
        "rules": [
            SEED_RULES[0],
            SEED_RULES[1],
            {**SEED_RULES[2], "name": "broken_one", "when": '"검색" in ctx.query and'},
        ],
    }
    events = AuditEvent.objects.count()

    with pytest.raises(RuleError) as info:
        rule_set_import_json(actor=editor, data=data)

    assert info.value.message.startswith("Rule 3 'broken_one': when: line 1, column")
    assert info.value.field == "rules.2.when"
    assert not RuleSet.objects.filter(name="half").exists()
    assert not Rule.objects.filter(name__in=["route_order_lookup", "broken_one"]).exists()
    assert AuditEvent.objects.count() == events


def test_a_bad_case_rolls_the_import_back(editor, demo_servers) -> None:
    data = {
        "format": FORMAT,
        "name": "cases",
        "rules": SEED_RULES,
        "cases": [{"name": "c", "input": {"query": "q"}, "expected": {"must_fire": [{"tool": "get_order"}]}}],
    }
    with pytest.raises(RuleError) as info:
        rule_set_import_json(actor=editor, data=data)
    assert info.value.message.startswith("Case 1 'c': The expected outcome is not valid")
    assert "'tool_name' is a required property" in info.value.message
    assert not RuleSet.objects.filter(name="cases").exists()


def _minimal(**rule: Any) -> dict[str, Any]:
    return {"format": FORMAT, "name": "x", "rules": [{**SEED_RULES[0], **rule}]}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("{not json", "The file is not valid JSON: line 1, column 2"),
        ("[1, 2]", "A rule set export is a JSON object, not a list."),
        ({"name": "x", "rules": []}, 'expected "format": "llamon-ruleset/1", found no format tag'),
        ({"format": "llamon-ruleset/9", "name": "x", "rules": []}, "found format 'llamon-ruleset/9'"),
        ({"format": FORMAT, "name": "x", "rules": [], "extra": 1}, "Unknown top-level key(s) 'extra'"),
        ({"format": FORMAT, "name": "", "rules": []}, '"name" must be a non-empty text.'),
        ({"format": FORMAT, "name": "x", "rules": {}}, '"rules" must be a list of rules, not an object.'),
        ({"format": FORMAT, "name": "x", "rules": ["r"]}, "Rule 1: a rule is an object, not a text."),
        (_minimal(stop="yes"), "Rule 1 'route_order_lookup': stop must be true or false, not a text."),
        (_minimal(when=None), "Rule 1 'route_order_lookup': when must be a text, not null."),
        (_minimal(stopp=True), "Rule 1 'route_order_lookup': unknown field(s) 'stopp'"),
        (
            {"format": FORMAT, "name": "x", "rules": [{"name": "a"}]},
            "Rule 1 'a': the field 'mcp_id' is missing.",
        ),
        (
            {"format": FORMAT, "name": "x", "rules": [SEED_RULES[0], SEED_RULES[0]]},
            "Rule 2 'route_order_lookup': the name is used twice (also by rule 1).",
        ),
        (_minimal(name="class"), "Rule 1 'class': Name: the rule name 'class' is a Python keyword"),
        (
            {
                "format": FORMAT,
                "name": "x",
                "rules": [],
                "cases": [{"name": "c", "input": {"query": 1}, "expected": {}}],
            },
            "Case 1 'c': The input's query must be a text, not a number.",
        ),
    ],
)
def test_malformed_imports_are_refused_with_a_readable_message(editor, demo_servers, data, message) -> None:
    sets = RuleSet.objects.count()
    with pytest.raises(RuleError) as info:
        rule_set_import_json(actor=editor, data=data)
    assert message in info.value.message
    assert RuleSet.objects.count() == sets


def test_an_existing_name_is_refused(editor, seed_rule_set) -> None:
    with pytest.raises(RuleError, match="A rule set named 'seed' already exists"):
        rule_set_import_json(actor=editor, data=rule_set_export_json(seed_rule_set))


def test_oversized_imports_are_refused_before_parsing(editor, db) -> None:
    huge = '{"format": "llamon-ruleset/1", "name": "x", "rules": [], "description": "' + "가" * 800_000 + '"}'
    with pytest.raises(RuleError, match=r"imports are limited to 2 MiB"):
        rule_set_import_json(actor=editor, data=huge)
    too_many = {
        "format": FORMAT,
        "name": "x",
        "rules": [{**SEED_RULES[0], "name": f"r{i}"} for i in range(MAX_IMPORT_RULES + 1)],
    }
    with pytest.raises(RuleError, match="The file has 2,001 rules; imports are limited to 2,000."):
        rule_set_import_json(actor=editor, data=too_many)
    assert not RuleSet.objects.exists()


# --- app/tools.py: equivalence ---------------------------------------------------------------------


def _load(source: str, tmp_path: Path) -> ModuleType:
    """Write ``source`` as a file and import it under a unique module name."""
    path = tmp_path / f"exported_{uuid.uuid4().hex}.py"
    path.write_text(source, encoding="utf-8")
    return _import(path)


def _import(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


REQUESTS: list[AgentRequest] = [
    AgentRequest(query="주문 조회 부탁해"),
    AgentRequest(query="주문 내역 보여줘"),  # 주문 without 조회
    AgentRequest(query="날씨 어때?"),
    AgentRequest(query="What's the weather like?"),
    AgentRequest(query="안녕하세요", context={"chatbotId": "premium-support", "userId": "u-42"}),
    AgentRequest(query="hello", context={"chatbotId": "premium-support"}),  # userId missing: None
    AgentRequest(query="hello", context={"chatbotId": "basic"}),
    AgentRequest(
        query="주문 조회 그리고 환불", context={"chatbotId": "premium-support", "userId": "u-7"}
    ),  # stop
    AgentRequest(query="I want a REFUND please", context={"userId": "u-9"}),
    AgentRequest(query="배송 정책 검색"),
    AgentRequest(query="주문 조회 후 검색도", context={"sessionId": "s-1"}),
    AgentRequest(query="faq please", a2a_data=[{"ticketType": "faq", "limit": 5}]),
    AgentRequest(query="faq default", a2a_data=[{"other": 1}, {"ticketType": "faq"}]),
    AgentRequest(query="no faq", a2a_data=[{"ticketType": "bug"}]),
    AgentRequest(
        query="파일 확인",
        a2a_files=[{"name": "계약서.pdf", "mimeType": "application/pdf", "uri": "file:///x", "size": 10}],
    ),
    AgentRequest(query="empty files", a2a_files=[]),
    AgentRequest(query="STRICT mode please"),  # context["mode"] missing: a run-time error
    AgentRequest(query="strict", context={"mode": "vip", "userId": "u-1"}),
    AgentRequest(query="strict", context={"mode": "basic"}),
    AgentRequest(
        query="검색 주문 조회 환불",
        context={"chatbotId": "premium-support", "userId": "u-3"},
        a2a_data=[{"ticketType": "faq"}],
        a2a_files=[{"name": "a.txt"}],
    ),
    AgentRequest(query=""),
]


def _rows(outcome) -> tuple[Any, list[dict[str, Any]]]:
    return outcome.error, [r.to_json() for r in outcome.records]


def test_exported_tools_py_gives_the_dashboards_results_on_every_request(
    demo_rule_set, demo_servers, tmp_path
) -> None:
    snapshot = engine.rule_set_snapshot(demo_rule_set)
    module = _load(rule_set_export_tools_py(demo_rule_set), tmp_path)
    backend = engine.dry_backend(demo_servers)
    assert [f.__name__ for f in module.DETERMINISTIC_TOOLS] == [r["name"] for r in snapshot if r["enabled"]]

    fired_somewhere, errored = set(), 0
    for request in REQUESTS:
        ours = run_prestep(module.DETERMINISTIC_TOOLS, request, backend=backend, dry_run=True)
        dashboard = engine.evaluate(snapshot, request, servers=demo_servers).outcome
        assert _rows(ours) == _rows(dashboard), request
        fired_somewhere |= {r.rule for r in dashboard.fired}
        errored += dashboard.error is not None

    # The table exercises every enabled rule, the stop rule cutting others off, and an error.
    assert fired_somewhere == {r["name"] for r in snapshot if r["enabled"]}
    assert errored >= 1


def test_exported_tools_py_makes_the_same_live_calls(demo_rule_set, demo_servers, tmp_path) -> None:
    snapshot = engine.rule_set_snapshot(demo_rule_set)
    module = _load(rule_set_export_tools_py(demo_rule_set), tmp_path)
    tools = {mcp_id: [t["name"] for t in s.tools] for mcp_id, s in demo_servers.items()}

    def echo(mcp_id: str, tool: str, params: dict[str, Any]) -> dict[str, Any]:
        return {"called": f"{mcp_id}/{tool}", "params": params}

    for request in REQUESTS:
        ours = run_prestep(module.DETERMINISTIC_TOOLS, request, backend=StaticToolBackend(tools, echo))
        theirs = run_prestep(
            engine.compile_snapshot(snapshot), request, backend=StaticToolBackend(tools, echo)
        )
        strip = [{k: v for k, v in r.items() if k != "duration_ms"} for r in ours.results]
        assert strip == [{k: v for k, v in r.items() if k != "duration_ms"} for r in theirs.results]
        assert (ours.ok, ours.error, ours.calls) == (theirs.ok, theirs.error, theirs.calls)


def test_exported_seed_functions_pass_the_seed_pages_own_tests(seed_rule_set, tmp_path) -> None:
    module = _load(rule_set_export_tools_py(seed_rule_set), tmp_path)
    ctx = DeterministicContext(
        query="주문 조회 부탁해", context={}, a2a_data=None, a2a_files=None, mcp_tools=[]
    )
    assert module.route_order_lookup(ctx) == {
        "tool_name": "get_order",
        "params": {"query": "주문 조회 부탁해"},
    }
    ctx = DeterministicContext(query="날씨 어때?", context={}, a2a_data=None, a2a_files=None, mcp_tools=[])
    assert module.route_order_lookup(ctx) is None
    assert module.route_order_lookup.__doc__ == SEED_RULES[0]["description"]
    assert module.route_order_lookup.__llamon_rule__.mcp_id == "order-service"


def test_exported_module_reads_like_the_seed(demo_rule_set) -> None:
    source = rule_set_export_tools_py(demo_rule_set)
    assert (
        '_route_order_lookup_when = compile_when(\'"주문" in ctx.query and "조회" in ctx.query\')' in source
    )
    assert (
        '@deterministic_tool(mcp_id="order-service")\ndef route_order_lookup(ctx: DeterministicContext) -> dict | None:'
        in source
    )
    assert '@deterministic_tool(mcp_id="order-service", stop=True)\ndef route_refund_first(' in source
    assert "# Disabled in llamon-web, so left out: route_everything_disabled." in source
    assert "def route_everything_disabled" not in source
    assert source.splitlines()[0].startswith("\"Routing rules exported from llamon-web rule set 'demo'")


@pytest.mark.parametrize("long", [False, True, "korean"])
def test_exported_module_is_stable_under_ruff_format(editor, demo_servers, tmp_path, long) -> None:
    rules = [dict(r) for r in SEED_RULES]
    if long == "korean":
        # Korean is two columns wide for formatters: lines of 80-95 characters straddle the limit.
        rules += [
            {
                **SEED_RULES[2],
                "name": f"r{k}",
                "when": '"' + "검" * k + '" in query',
                "description": "설" * (k + 20),
            }
            for k in range(20, 34)
        ]
    elif long:
        rules[0]["name"] = "route_" + "very_long_rule_name_" * 4
        rules[0]["when"] = " and ".join(f'"단어{i}" in ctx.query' for i in range(8))
        rules[1]["stop"] = True
        rules[1]["description"] = "  padded with spaces and a \"quote\" and a 'quote'  "
    rule_set = build_rule_set(editor, f"fmt-{long}", rules)
    path = tmp_path / "tools.py"
    path.write_text(rule_set_export_tools_py(rule_set), encoding="utf-8")
    proc = subprocess.run(
        [str(RUFF), "format", "--isolated", "--diff", str(path)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lint = subprocess.run(
        [str(RUFF), "check", "--isolated", "--select", "E,F,W,I,UP", "--ignore", "E501", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_an_empty_rule_set_exports_an_empty_list(editor, db, tmp_path) -> None:
    rule_set = services.rule_set_create(actor=editor, name="empty")
    source = rule_set_export_tools_py(rule_set)
    assert source.endswith("\n\nDETERMINISTIC_TOOLS = []\n")
    assert _load(rule_set_export_tools_py(rule_set), tmp_path).DETERMINISTIC_TOOLS == []


# --- app/tools.py: safety ---------------------------------------------------------------------------

_AUDIT: list[tuple[str, tuple[Any, ...]]] = []
_RECORDING = [False]


def _audit_hook(event: str, args: tuple[Any, ...]) -> None:
    if _RECORDING[0]:
        _AUDIT.append((event, args))


sys.addaudithook(_audit_hook)  # hooks cannot be removed; this one records only inside _guarded_load


def _guarded_load(source: str, tmp_path: Path) -> ModuleType:
    """Import the module while recording audit events; fail on anything but reading and compiling it."""
    path = tmp_path / f"exported_{uuid.uuid4().hex}.py"
    path.write_text(source, encoding="utf-8")
    _AUDIT.clear()
    _RECORDING[0] = True
    dont_write = sys.dont_write_bytecode
    sys.dont_write_bytecode = True
    try:
        module = _import(path)
    finally:
        _RECORDING[0] = False
        sys.dont_write_bytecode = dont_write
    for event, args in _AUDIT:
        if event == "open":
            assert str(args[0]).startswith(str(tmp_path)), args
            assert args[1] in (None, "r", "rb") or not any(c in str(args[1]) for c in "wax+"), args
        elif event == "compile":
            # The module itself, then the expressions: compile_when/compile_params parse the
            # text, then compile the checked tree (an AST object, no file name).
            assert args[1] in (str(path), "<expr>", "<when>", "<params>") or isinstance(args[0], ast.AST), (
                args
            )
        elif event == "exec":
            assert args[0].co_filename == str(path), args
        else:
            pytest.fail(f"importing the exported module raised the audit event {event!r} {args!r}")
    return module


def _statement_kinds(source: str) -> list[str]:
    return [type(node).__name__ for node in ast.parse(source).body]


def test_strings_that_try_to_break_out_stay_strings(editor, tmp_path) -> None:
    when = (
        '"\'\'\'" in query or \'"""\' in query or "\\n import os\\n" in query or "\\\\" in query '
        'or "# -*- coding: utf-7 -*-" in query or "\u2028" in query or "\\x1b" in query'
    )
    params = '{"q": query, "evil": "\'\'\'\\"\\"\\"\\n__import__(\'os\').system(\'x\')"}'
    snapshot = [
        {
            "name": "hostile",
            "description": HOSTILE,
            "mcp_id": "order-service",
            "tool_name": HOSTILE.strip(),
            "when": when,
            "params": params,
            "stop": True,
            "enabled": True,
        },
        {
            "name": "hostile_off",
            "description": HOSTILE,
            "mcp_id": "order-service",
            "tool_name": HOSTILE,
            "when": HOSTILE,
            "params": HOSTILE,
            "stop": False,
            "enabled": False,
        },
    ]

    source = rule_set_export_tools_py(snapshot, title=HOSTILE)

    # Only the intended statements, and no line that a tokenizer could read as a coding cookie.
    assert _statement_kinds(source) == [
        "Expr",
        "ImportFrom",
        "ImportFrom",
        "Assign",
        "Assign",
        "FunctionDef",
        "Assign",
    ]
    assert not any(line.lstrip().startswith("#") and "coding" in line for line in source.splitlines()[:2])
    assert "\u2028" not in source and "\r" not in source and "\x0b" not in source
    module = _guarded_load(source, tmp_path)
    assert module.__doc__.startswith("Routing rules exported from llamon-web " + HOSTILE)
    assert module.hostile.__doc__ == HOSTILE.strip()
    assert module._hostile_when.source == when
    assert module._hostile_params.source == params
    registered = module.DETERMINISTIC_TOOLS
    assert registered == [module.hostile]
    ctx = DeterministicContext(query="a \\ b")
    assert module.hostile(ctx) == {
        "tool_name": HOSTILE.strip(),
        "params": {"q": "a \\ b", "evil": "'''\"\"\"\n__import__('os').system('x')"},
    }
    assert module.hostile(DeterministicContext(query="nothing here")) is None


@given(st.text(max_size=40))
def test_literals_are_valid_python_for_any_text(text: str) -> None:
    literal = _lit(text)
    assert ast.literal_eval(literal) == text
    assert "\n" not in literal and "\r" not in literal and "\u2028" not in literal


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        ({"description": "a\x00b"}, "description contains a NUL character"),
        ({"tool_name": "get\x00order"}, "tool_name contains a NUL character"),
        ({"mcp_id": "order-service'\nimport os"}, "is not a valid MCP server id"),
        ({"name": "class"}, "is a Python keyword"),
        ({"name": "not an identifier"}, "must be a Python identifier"),
        ({"name": "print"}, "the name shadows a Python built-in"),
        ({"name": "compile_when"}, "the name is a name the exported module itself uses"),
        ({"name": "DETERMINISTIC_TOOLS"}, "the name is a name the exported module itself uses"),
        ({"name": "__getattr__"}, "is a Python special name"),
        ({"when": "__import__('os')"}, "when: line 1"),
        ({"params": "[1]"}, "params: line 1"),
    ],
)
def test_rules_that_cannot_be_exported_are_refused_clearly(rule, message) -> None:
    snapshot = [{**SEED_RULES[0], "stop": False, "enabled": True, **rule}]
    with pytest.raises(RuleError) as info:
        rule_set_export_tools_py(snapshot)
    assert message in info.value.message


def test_a_rule_named_like_another_rules_helper_is_refused() -> None:
    snapshot = [
        {**SEED_RULES[0], "name": "a", "stop": False, "enabled": True},
        {**SEED_RULES[0], "name": "_a_when", "stop": False, "enabled": True},
    ]
    with pytest.raises(RuleError, match="collides with the generated helper of rule 'a'"):
        rule_set_export_tools_py(snapshot)


def test_a_published_version_exports_with_its_number_and_hash(editor, seed_rule_set) -> None:
    version = services.rule_set_publish(actor=editor, rule_set=seed_rule_set, message="v1")
    services.rule_update(actor=editor, rule=seed_rule_set.rules.first(), revision=None, when="False")

    source = rule_set_export_tools_py(version)

    assert source.splitlines()[0] == (
        f"\"Routing rules exported from llamon-web rule set 'seed' version 1 (content sha256 {version.content_hash}).\""
    )
    # The version's rules, not the draft edited since.
    assert 'compile_when(\'"주문" in ctx.query and "조회" in ctx.query\')' in source
