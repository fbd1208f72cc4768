"""Importing an app/tools.py in the workbench: the seed, the round trip with the export, the page.

The translation itself (the differential test on the bank module) is in
tests/engine/test_tools_import.py; here, what the workbench adds: messages in both languages,
nothing written before the confirmation, the seed's rules, and export -> import -> export.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from django.utils import translation

from core.models import AuditEvent
from llamon_web.demo import SEED_RULES
from rules.engine import SNAPSHOT_FIELDS
from rules.errors import RuleError
from rules.exporting import rule_set_export_tools_py
from rules.models import RuleSet
from rules.tools_import import rule_set_import_tools_py, tools_py_preview

ROOT = Path(__file__).resolve().parents[2]
SEED = (ROOT / "examples" / "seed_project" / "app" / "tools.py").read_text(encoding="utf-8")
BANK = (ROOT / "tests" / "support" / "bank_tools.py").read_text(encoding="utf-8")
DEFAULTS = {"description": "", "params": "{}", "stop": False, "enabled": True}


def _snapshot(rules: list[dict]) -> list[dict]:
    return [{key: {**DEFAULTS, **r}[key] for key in SNAPSHOT_FIELDS} for r in rules]


@pytest.mark.django_db
def test_the_seeds_three_examples_import_to_the_demos_seed_rules() -> None:
    preview = tools_py_preview(SEED, filename="examples/seed_project/app/tools.py")
    assert preview.untranslatable == []
    assert [{k: r[k] for k in SNAPSHOT_FIELDS} for r in preview.rules] == _snapshot(SEED_RULES)


TRICKY = [
    {
        "name": "multi_line",
        "description": "따옴표 \"double\" and 'single'\n두 번째 줄\t탭 \\ backslash",
        "mcp_id": "order-service",
        "tool_name": "get_order",
        "when": '(\n    "주문" in query  # 주문 키워드\n    and data_get("amount", 0) > 120000\n)',
        "params": '{"q": query, "tags": [t["name"] for t in ctx.mcp_tools]}',
        "stop": True,
    },
    {
        "name": "always",
        "mcp_id": "knowledge-base",
        "tool_name": "search_docs",
        "when": "True",
    },
]


@pytest.mark.django_db
def test_export_then_import_then_export_is_an_identity() -> None:
    bank = tools_py_preview(BANK).translation.rules
    snapshot = _snapshot([*SEED_RULES, *TRICKY, *(r.to_json() for r in bank if r.enabled)])
    exported = rule_set_export_tools_py(snapshot)
    back = tools_py_preview(exported)
    assert back.untranslatable == [] and back.notes == []
    assert [{k: r[k] for k in SNAPSHOT_FIELDS} for r in back.rules] == snapshot
    assert rule_set_export_tools_py([{k: r[k] for k in SNAPSHOT_FIELDS} for r in back.rules]) == exported


@pytest.mark.django_db
def test_preview_writes_nothing_and_confirm_writes_the_previewed_rules(editor) -> None:
    sets, events = RuleSet.objects.count(), AuditEvent.objects.count()
    preview = tools_py_preview(BANK)
    assert (RuleSet.objects.count(), AuditEvent.objects.count()) == (sets, events)
    with pytest.raises(RuleError, match="not the one previewed"):
        rule_set_import_tools_py(actor=editor, source=BANK + "\n", sha256=preview.sha256, name="bank")
    assert RuleSet.objects.count() == sets
    rule_set, done = rule_set_import_tools_py(actor=editor, source=BANK, sha256=preview.sha256, name="bank")
    rules = list(rule_set.rules.order_by("position").values(*SNAPSHOT_FIELDS))
    assert rules == [{k: r[k] for k in SNAPSHOT_FIELDS} for r in preview.rules]
    assert AuditEvent.objects.filter(action="rule_set.import", object_id=str(rule_set.pk)).count() == 1
    assert rule_set.description == "Imported from app/tools.py."
    assert len(done.untranslatable) == 8


@pytest.mark.django_db
def test_errors_and_reasons_in_both_languages(editor) -> None:
    with pytest.raises(RuleError) as exc:
        tools_py_preview("def f(:\n")
    assert exc.value.message.startswith("Line 1: The file is not valid Python")
    with translation.override("ko"):
        with pytest.raises(RuleError) as exc:
            tools_py_preview("def f(:\n")
        assert exc.value.message.startswith("1번째 줄: 올바른 Python 파일이 아닙니다")
        messages = [u["message"] for u in tools_py_preview(BANK).untranslatable]
        assert any("전역" in m and "VIP_CHATBOTS" in m for m in messages), messages
        # The expression checker's own reason, in Korean too.
        (nested,) = [m for m in messages if "parse_pdf" in m]
        assert "표현식 검사기" in nested and "comprehensions cannot be nested" not in nested, nested
        with pytest.raises(RuleError, match="번역할 수 있는 함수가 없어"):
            rule_set_import_tools_py(actor=editor, source="DETERMINISTIC_TOOLS = []\n")
    messages = [u["message"] for u in tools_py_preview(BANK).untranslatable]
    assert any(
        m.startswith("app/tools.py:") and "vip_by_global_list: uses the module-level name VIP_CHATBOTS" in m
        for m in messages
    )


@pytest.mark.django_db
def test_the_page_previews_then_imports_on_confirmation(editor_client) -> None:
    url = "/rules/import/tools-py"
    assert editor_client.get(url).status_code == 200
    source = (
        SEED
        + "\n\n@deterministic_tool(mcp_id='kb')\ndef with_global(ctx):\n    return {'tool_name': 't', 'params': GLOBAL}\n"
    )
    preview = editor_client.post(url, {"action": "preview", "source": source.replace("\n", "\r\n")})
    body = preview.content.decode()
    assert preview.status_code == 200 and 'id="preview-rules"' in body
    assert "app/tools.py:" in body and "with_global" in body and "route_by_available_tool" in body
    assert not RuleSet.objects.filter(name="tools").exists()
    sha = preview.context["preview"].sha256
    done = editor_client.post(
        url, {"action": "confirm", "source": preview.context["source"].replace("\n", "\r\n"), "sha256": sha}
    )
    assert done.status_code == 302
    rule_set = RuleSet.objects.get(name="tools")
    assert list(rule_set.rules.values_list("name", "enabled")) == [
        ("route_order_lookup", True),
        ("route_by_chatbot_id", True),
        ("route_by_available_tool", True),
    ]
    stale = editor_client.post(url, {"action": "confirm", "source": SEED, "sha256": sha, "name": "other"})
    assert stale.status_code == 400 and not RuleSet.objects.filter(name="other").exists()


def _branchy(count: int, ifs: int = 7) -> str:
    """``count`` routing functions, each with ``ifs`` ifs in a row: 2**ifs paths to unfold each."""
    functions = []
    for i in range(count):
        lines = ['@deterministic_tool(mcp_id="order-service")', f"def route_{i}(ctx):"]
        for d in range(ifs):
            lines += [f'    if "k{d}" in ctx.query:', f"        seen_{d} = 1"]
        lines.append('    return {"tool_name": "get_order", "params": {"q": ctx.query}}')
        functions.append("\n".join(lines))
    return "from llamon_agent.tools import deterministic_tool\n\n\n" + "\n\n\n".join(functions) + "\n"


@pytest.mark.django_db
def test_a_hostile_file_is_translated_within_a_bound_on_its_paths() -> None:
    """A file of many functions just under the per-function limit (here 40 x 128 paths) made the
    preview unfold every path (a 700 KB one: 16 s of the web's CPU). The module-wide budget stops
    at MAX_MODULE_PATHS: the functions after it are reported, not translated (English and Korean)."""
    from llamon_agent.tools_import import MAX_MODULE_PATHS

    preview = tools_py_preview(_branchy(40))
    translated = len(preview.rules)
    assert translated == MAX_MODULE_PATHS // 128 < 40
    refused = preview.untranslatable
    assert len(refused) == 40 - translated
    assert all("more than 4096 paths in all" in u["message"] for u in refused), refused[:2]
    with translation.override("ko"):
        korean = tools_py_preview(_branchy(40)).untranslatable[0]["message"]
    assert "4096" in korean and "paths in all" not in korean, korean


LEGACY = """
from llamon_agent.tools import deterministic_tool


@deterministic_tool(mcp_id="order-service")
def order_lookup(ctx):
    if "주문" in ctx.query:
        return {"tool_name": "get_order", "params": {"query": ctx.query}}


@deterministic_tool(mcp_id="order-service")
def order_lookup_again(ctx):
    if "주문" in ctx.query:
        return {"tool_name": "get_order", "params": {"query": ctx.query}}


@deterministic_tool(mcp_id="claims-service")
def claim_status(ctx):
    if "청구" in ctx.query:
        return {"tool_name": "claim_status", "params": {"q": ctx.query}}


@deterministic_tool(mcp_id="order-service")
def legacy_invoice(ctx):
    if "invoice" in ctx.query:
        return {"tool_name": "get_invoice", "params": {"id": ctx.query}}


@deterministic_tool(mcp_id="order-service")
def orders(ctx):
    if "환불" in ctx.query:
        return {"tool_name": "list_orders", "params": {"customer_id": "x"}}
    return {"tool_name": "get_order", "params": {"query": ctx.query}}


@deterministic_tool(mcp_id="order-service")
def orders__get_order(ctx):
    if "배송" in ctx.query:
        return {"tool_name": "get_order", "params": {"query": "x"}}


DETERMINISTIC_TOOLS = [order_lookup, order_lookup_again, claim_status, orders, orders__get_order]
"""


@pytest.mark.django_db
def test_the_preview_names_every_problem_and_a_confirmation_is_refused_with_all_of_them(
    editor, demo_servers, editor_client
) -> None:
    """Issue 43: the preview was silent on a disabled legacy function (which then blocked the whole
    import), a duplicate and an unknown server. It now lists each, before anything is written, and a
    confirmation is refused with every blocking problem, never the first alone."""
    from rules.services import rule_set_create

    rule_set_create(actor=editor, name="tools")  # the default name of app/tools.py
    preview = tools_py_preview(LEGACY)
    found = {(p["code"], p["rule"], p["blocks"]) for p in preview.problems}
    assert found >= {
        ("refused", "legacy_invoice", True),  # its tool is not on the server: the import refuses it
        ("disabled", "legacy_invoice", False),
        ("duplicate", "order_lookup_again", False),
        ("server_unknown", "claim_status", False),
        ("name_taken", "", False),
        ("name_clash", "orders__get_order", True),  # the second function's rule, named like the first's
    }, found
    blocking = {p["code"]: p for p in preview.blocking}
    assert set(blocking) == {"refused", "name_clash"}, preview.blocking
    refused, clash = blocking["refused"], blocking["name_clash"]
    assert refused["message"].startswith("app/tools.py:") and "get_invoice" in refused["message"]
    sets = RuleSet.objects.count()
    with pytest.raises(RuleError) as exc:
        rule_set_import_tools_py(actor=editor, source=LEGACY, sha256=preview.sha256, name="legacy")
    assert "2 rules would be refused" in exc.value.message
    assert refused["message"] in exc.value.message and clash["message"] in exc.value.message
    assert RuleSet.objects.count() == sets
    # The page shows them and offers no confirmation while one blocks; in Korean too.
    page = editor_client.post(
        "/rules/import/tools-py", {"action": "preview", "source": LEGACY}
    ).content.decode()
    assert 'id="preview-problems"' in page and 'data-code="duplicate"' in page
    assert 'id="import-blocked"' in page and 'id="confirm-form"' not in page
    with translation.override("ko"):
        korean = tools_py_preview(LEGACY).problems
    assert any("가져오기" in p["message"] for p in korean if p["blocks"]), korean
    # Without the legacy tool and the clash nothing blocks, and the confirmation writes the rules.
    fixed = LEGACY.replace('"get_invoice"', '"get_order"').replace("orders__get_order", "orders_again")
    preview = tools_py_preview(fixed)
    assert preview.blocking == [] and any(p["code"] == "disabled" for p in preview.problems)
    rule_set, _ = rule_set_import_tools_py(actor=editor, source=fixed, sha256=preview.sha256, name="fixed")
    assert rule_set.rules.count() == 7
