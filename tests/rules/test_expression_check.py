"""The expression editor's server side: diagnostics as JSON, and the names it completes."""

from __future__ import annotations

import json
from html import unescape

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from core.userinput import NUL_MESSAGE
from llamon_agent.expr import BUILTIN_NAMES, CTX_NAMES, HELPER_NAMES, MAX_SOURCE_CHARS, METHOD_NAMES
from rules import engine, services
from rules.models import RuleSet
from servers.models import McpServer

pytestmark = pytest.mark.django_db

TOOLS = [
    {
        "name": "search_docs",
        "description": "Search the <b>docs</b>",
        "input_schema": {
            "type": "object",
            "properties": {
                "q": {"type": "string", "description": "What to look for"},
                "limit": {"type": "integer"},
            },
            "required": ["q"],
        },
    },
    {"name": "get_page", "description": "", "input_schema": {"type": "object"}},
]


@pytest.fixture
def rule_set(make_user) -> RuleSet:
    McpServer.objects.create(
        mcp_id="knowledge-base",
        transport="http",
        url="http://127.0.0.1:9/mcp",
        tools=TOOLS,
        tools_refreshed_at=timezone.now(),
    )
    return services.rule_set_create(actor=make_user("editor"), name="docs")


def _check(client, rule_set_pk: int, field: str, source: str):
    return client.post(
        reverse("rules:expression_check", args=[rule_set_pk]), {"field": field, "source": source}
    )


def test_a_bad_expression_is_reported_at_its_line_and_column(editor_client, rule_set) -> None:
    response = _check(editor_client, rule_set.pk, "when", '"환불" in query and\n  len(qeury) > 3')
    assert response.status_code == 200
    assert response.json() == {
        "field": "when",
        "diagnostics": [
            {
                "line": 2,
                "column": 7,
                "message": "name 'qeury' is not allowed; did you mean 'query'? use ctx, query, context, a2a_data, a2a_files, "
                "tool_names or a helper",
            }
        ],
    }


def test_columns_count_characters_not_bytes_or_utf16_units(editor_client, rule_set) -> None:
    # 😀 is 4 UTF-8 bytes and 2 UTF-16 units; the editor converts code points to its own offsets.
    diagnostics = _check(editor_client, rule_set.pk, "when", '"😀환" in qeury').json()["diagnostics"]
    assert (diagnostics[0]["line"], diagnostics[0]["column"]) == (1, 9)


def test_a_good_expression_has_no_diagnostics(editor_client, rule_set) -> None:
    assert (
        _check(editor_client, rule_set.pk, "when", 'contains_any(query, ["환불"])').json()["diagnostics"]
        == []
    )
    assert _check(editor_client, rule_set.pk, "params", '{"q": query}').json()["diagnostics"] == []


def test_params_must_be_a_dict_and_when_is_checked_as_when(editor_client, rule_set) -> None:
    (diagnostic,) = _check(editor_client, rule_set.pk, "params", '"a" in query').json()["diagnostics"]
    assert diagnostic["message"] == 'params must give a dict such as {"q": query}'
    assert (diagnostic["line"], diagnostic["column"]) == (1, 1)
    assert _check(editor_client, rule_set.pk, "when", '"a" in query').json()["diagnostics"] == []


def test_a_nul_character_is_refused_before_the_view(editor_client, rule_set) -> None:
    # The site-wide NUL guard (llamon_web.middleware) answers first; the editor then shows no marker.
    response = _check(editor_client, rule_set.pk, "when", "a\x00b")
    assert response.status_code == 400
    assert NUL_MESSAGE in response.content.decode()


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("x" * (MAX_SOURCE_CHARS + 1), "the expression is longer than 4,000 characters"),
        ("", "the expression is empty"),
        ("query +", "the expression is incomplete"),
        ("ctx.__class__", None),
        ('__import__("os")', None),
    ],
)
def test_hostile_sources_get_a_diagnostic_not_a_500(editor_client, rule_set, source, message) -> None:
    response = _check(editor_client, rule_set.pk, "when", source)
    assert response.status_code == 200
    (diagnostic,) = response.json()["diagnostics"]
    if message is not None:
        assert diagnostic["message"] == message


def test_a_body_over_the_upload_limit_is_a_400(editor_client, rule_set, settings) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    response = _check(editor_client, rule_set.pk, "when", "x" * 20_000)
    assert response.status_code == 400


@pytest.mark.parametrize("field", ["", "name", "WHEN", "when ", "__class__"])
def test_an_unknown_field_is_a_400_that_names_the_choices(editor_client, rule_set, field) -> None:
    response = _check(editor_client, rule_set.pk, field, "True")
    assert response.status_code == 400
    assert response.json() == {"detail": "field must be when or params."}


def test_an_unknown_rule_set_is_a_404(editor_client, rule_set) -> None:
    assert _check(editor_client, rule_set.pk + 1000, "when", "True").status_code == 404


def test_viewers_and_anonymous_users_cannot_use_it(viewer_client, rule_set) -> None:
    assert _check(viewer_client, rule_set.pk, "when", "True").status_code == 403
    response = _check(Client(), rule_set.pk, "when", "True")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]
    url = reverse("rules:expression_check", args=[rule_set.pk])
    assert viewer_client.get(url).status_code == 405


def test_the_editor_page_carries_the_names_to_complete(editor_client, rule_set) -> None:
    html = editor_client.get(reverse("rules:editor", args=[rule_set.pk])).content.decode()
    assert 'data-expr-editor="when"' in html and 'data-expr-editor="params"' in html
    assert reverse("rules:expression_check", args=[rule_set.pk]) in html
    assert "vendor/codemirror/editor.bundle.js" in html and "js/expr-editor.js" in html


def test_viewers_do_not_load_the_editor(viewer_client, rule_set) -> None:
    html = viewer_client.get(reverse("rules:editor", args=[rule_set.pk])).content.decode()
    assert "editor.bundle.js" not in html


def test_tool_info_carries_tool_names_and_params_keys(editor_client, rule_set) -> None:
    response = editor_client.get(
        reverse("rules:tool_info", args=[rule_set.pk]),
        {"rule-mcp_id": "knowledge-base", "rule-tool_name": "search_docs"},
    )
    html = response.content.decode()
    # Escaped into an attribute: a tool description cannot break out of it.
    assert "data-expr-completions=" in html and "<b>docs" not in html
    start = html.index('data-expr-completions="') + len('data-expr-completions="')
    data = json.loads(unescape(html[start : html.index('"', start)]))
    assert [t["name"] for t in data["tools"]] == ["search_docs", "get_page"]
    assert data["params"] == [
        {"name": "q", "type": "string", "description": "What to look for", "required": True},
        {"name": "limit", "type": "integer", "description": "", "required": False},
    ]


def test_vocabulary_is_the_checkers_own_lists() -> None:
    vocabulary = engine.expression_vocabulary()
    assert vocabulary["names"] == list(CTX_NAMES)
    assert [h["name"] for h in vocabulary["helpers"]] == list(HELPER_NAMES)
    assert vocabulary["builtins"] == list(BUILTIN_NAMES)
    assert set(vocabulary["methods"]) == set(METHOD_NAMES)
    assert all(h["signature"].startswith(h["name"] + "(") for h in vocabulary["helpers"])


@pytest.mark.parametrize(
    "schema",
    [
        None,
        [],
        "x",
        {"properties": []},
        {"properties": {"a": "b"}, "required": "a"},
        {"properties": {"a": {"type": ["string", "null"]}}},
    ],
)
def test_completion_data_survives_odd_schemas(schema) -> None:
    data = engine.completion_data(None, {"name": "t", "input_schema": schema})
    assert data["tools"] == []
    assert all(isinstance(p["name"], str) and isinstance(p["type"], str) for p in data["params"])
