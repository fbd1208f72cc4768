"""Every message the expression checker and the rule form can give, in Korean with its values; and
"did you mean" for names, servers and tools.

The engine's messages (sdk/src/llamon_agent/expr/messages.py) are enumerated there by id; the workbench
translates them through rules/expr_messages.py. Both tables must agree, every id must be raised
somewhere in the engine (no dead entry) and every raise of the checker must use an id."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest
from django.urls import reverse
from django.utils import translation

import llamon_agent.expr as expr_package
from llamon_agent.expr import ExprError, check_rule_name, compile_params, compile_when
from llamon_agent.expr.messages import MESSAGES
from rules.expr_messages import EXPR_MESSAGES, expr_reason, expr_text
from servers.messages import unknown_server_message, unknown_tool_message

HANGUL = re.compile("[\uac00-\ud7a3]")
ENGINE = Path(expr_package.__file__).parent
# The files whose every refusal is a message with an id (invalid regular expressions keep RE2's text).
WITH_IDS = (
    "checker.py",
    "rules.py",
    "compiled.py",
    "helpers.py",
    "budget.py",
    "view.py",
    "namespace.py",
    "guard.py",
)


def _sample(template: str) -> dict[str, str]:
    return {key: f"<{key}-value>" for key in re.findall(r"%\((\w+)\)s", template)}


def test_the_workbench_table_has_every_engine_message_with_the_same_english() -> None:
    assert set(EXPR_MESSAGES) == set(MESSAGES)
    with translation.override(None):
        for msg_id, template in MESSAGES.items():
            assert str(EXPR_MESSAGES[msg_id]) == template, msg_id


def test_every_message_id_is_raised_by_the_engine_and_every_checker_refusal_has_one() -> None:
    source = "\n".join(path.read_text() for path in ENGINE.glob("*.py"))
    used = set(re.findall(r'\b(?:M|_NotJson)\(\s*"([\w.]+)"', source))
    assert used == set(MESSAGES), (sorted(set(MESSAGES) - used), sorted(used - set(MESSAGES)))
    for name in WITH_IDS:
        text = (ENGINE / name).read_text()
        assert not re.findall(r'(?:ExprError|fail|attr_error|node_error)\(\s*f?["\']', text), name


@pytest.mark.parametrize("msg_id", sorted(MESSAGES))
def test_each_message_is_korean_and_keeps_its_values(msg_id: str) -> None:
    params = _sample(MESSAGES[msg_id])
    exc = ExprError(MESSAGES[msg_id] % params, 2, 7, field="when", msg_id=msg_id, params=params)
    with translation.override("ko"):
        reason, text = expr_reason(exc), expr_text(exc)
    words = re.sub(r"%\(\w+\)s", "", MESSAGES[msg_id])
    if re.search("[a-z]{2}", words):  # not a bare detail such as "%(detail)s"
        assert HANGUL.search(reason), f"{msg_id}: no Korean translation ({reason!r})"
    assert all(value in reason for value in params.values()), (msg_id, reason)
    assert text == f"when: 2행 7열: {reason}"
    with translation.override("en"):
        assert expr_text(exc) == str(exc)  # English as the engine says it


@pytest.mark.parametrize(
    ("source", "compiler", "msg_id", "korean"),
    [
        ("qeury", compile_when, "expr.name_not_allowed_close", "'query'을(를) 뜻하셨나요?"),
        ("contains_amy(query, ['a'])", compile_when, "expr.name_not_allowed_close", "'contains_any'"),
        ("ctx.qeury", compile_when, "expr.attribute_not_allowed_close", "'query'을(를) 뜻하셨나요?"),
        ("zzzz", compile_when, "expr.name_not_allowed", "쓸 수 없습니다"),
        ("query ** 2", compile_when, "expr.operator_not_allowed", "** 연산자는"),
        ("query query", compile_when, "expr.syntax", "구문 오류"),
        ("[query]", compile_params, "expr.params_not_dict", "params는"),
    ],
)
def test_the_checker_raises_ids_and_suggests_close_names(source, compiler, msg_id, korean) -> None:
    with pytest.raises(ExprError) as caught:
        compiler(source)
    assert caught.value.msg_id == msg_id
    with translation.override("ko"):
        assert korean in expr_reason(caught.value)


def test_a_rule_name_error_is_korean() -> None:
    with pytest.raises(ExprError) as caught:
        check_rule_name("1st")
    with translation.override("ko"):
        assert expr_reason(caught.value) == (
            "규칙 이름 '1st'은(는) Python 식별자여야 합니다: 글자, 숫자, _로 이루어지고 숫자로 시작하지 않아야 합니다"
        )


def test_unknown_servers_and_tools_suggest_close_names_in_both_languages() -> None:
    tools = ["get_order", "list_orders"]
    assert unknown_tool_message("order-service", "get_ordr", tools) == (
        "order-service has no tool 'get_ordr'; did you mean 'get_order'? (its tools: get_order, list_orders)"
    )
    assert unknown_tool_message("order-service", "drop_db", tools) == (
        "order-service has no tool 'drop_db' (its tools: get_order, list_orders)."
    )
    assert "did you mean 'order-service'?" in unknown_server_message("order-servce", ["crm", "order-service"])
    with translation.override("ko"):
        assert unknown_tool_message("order-service", "get_ordr", tools) == (
            "order-service에는 도구 'get_ordr'이(가) 없습니다. 'get_order'을(를) 뜻하셨나요? "
            "(이 서버의 도구: get_order, list_orders)"
        )
        assert "'order-service'을(를) 뜻하셨나요?" in unknown_server_message(
            "order-servce", ["order-service"]
        )


@pytest.mark.django_db
def test_the_rule_form_says_every_reason_in_korean(client, make_user, seed_rule_set) -> None:
    """The page a Korean author sees: the field's name and the reason, both Korean (no English reason)."""
    client.force_login(make_user("editor"))
    client.post(reverse("language_set"), {"language": "ko"})
    base = {
        "rule-name": "new_rule",
        "rule-mcp_id": "order-service",
        "rule-tool_name": "get_order",
        "rule-when": "True",
        "rule-params": "{}",
        "rule-enabled": "on",
    }
    url = reverse("rules:rule_create", args=[seed_rule_set.pk])
    for field, value, expected in [
        (
            "rule-tool_name",
            "create_refund_ticket",
            "order-service에는 도구 'create_refund_ticket'이(가) 없습니다",
        ),
        ("rule-tool_name", "get_ordr", "'get_order'을(를) 뜻하셨나요?"),
        ("rule-mcp_id", "order-servce", "'order-service'을(를) 뜻하셨나요?"),
        ("rule-params", '{"q": data_}', "1행 7열: 이름 'data_'은(는) 쓸 수 없습니다"),
        ("rule-when", "ctx.qeury", "'query'을(를) 뜻하셨나요?"),
        ("rule-name", "1st", "규칙 이름 '1st'은(는) Python 식별자여야 합니다"),
    ]:
        response = client.post(url, {**base, field: value})
        page = html.unescape(response.content.decode())
        assert response.status_code == 400 and expected in page, (field, value)
        assert " is not allowed" not in page and " has no tool" not in page, (field, value)
        assert not re.findall(r"<strong>[A-Z][a-z ]+</strong>", page), (field, value)  # field names too


@pytest.mark.django_db
def test_the_tester_says_a_rules_runtime_failure_in_korean(client, make_user, seed_rule_set) -> None:
    """A failure while evaluating (a missing key) reaches the tester as a record: its id travels with it."""
    from rules import services

    editor = make_user("editor")
    services.rule_create(
        actor=editor,
        rule_set=seed_rule_set,
        name="needs_a_key",
        mcp_id="order-service",
        tool_name="get_order",
        when='"주문" in query and context["tier"] == "gold"',
        params="{}",
    )
    client.force_login(editor)
    client.post(reverse("language_set"), {"language": "ko"})
    response = client.post(
        reverse("rules:test", args=[seed_rule_set.pk]), {"t-query": "주문 조회"}, HTTP_HX_REQUEST="true"
    )
    page = html.unescape(response.content.decode())
    expected = "키 'tier'이(가) 없습니다. 없을 수 있는 키에는 .get('tier')을 쓰세요"
    assert page.count(expected) == 3, page  # the pre-step's error, the record, the operand that failed
    # A case saved from here keeps the engine's text in a hidden value: data.
    shown = html.unescape(re.sub(r'value="[^"]*"', "", response.content.decode()))
    assert "is missing" not in shown
