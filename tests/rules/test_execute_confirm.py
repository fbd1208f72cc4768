"""Live execution is deliberate (issue 43): the tester's Execute names the tools it would call and
calls them only once that exact list is confirmed; viewers cannot execute at all."""

from __future__ import annotations

import html
import re

import pytest
from django.urls import reverse

from tests.support.tester import execute_confirmed

pytestmark = pytest.mark.django_db
HX = {"HTTP_HX_REQUEST": "true"}


def _text(response) -> str:
    return html.unescape(response.content.decode())


def test_execute_asks_naming_the_tools_then_calls_only_the_confirmed_list(
    editor_client, seed_rule_set
) -> None:
    url = reverse("rules:test", args=[seed_rule_set.pk])
    data = {"t-query": "주문 조회 A-1", "t-context": '{"chatbotId": "premium-support", "userId": "u-1"}'}
    asked = _text(editor_client.post(url, {**data, "execute": "1"}, **HX))
    assert 'id="execute-confirm"' in asked
    assert "Execute calls 2 tools for real." in asked
    calls = re.search(r'id="execute-confirm-calls">(.*?)</ul>', asked, re.S).group(1)
    assert "get_order" in calls and "get_customer_profile" in calls and "customer-crm" in calls
    assert 'data-mode="dry-run"' in asked  # nothing was called: the dry run is shown below

    # A confirmation of another list (the input changed since) asks again; it calls nothing.
    token = re.search(r'value="(1:[0-9a-f]+)"', asked).group(1)
    other = _text(editor_client.post(url, {**data, "t-query": "주문 조회 B-2", "execute": token}, **HX))
    assert 'id="execute-confirm"' in other and 'data-mode="dry-run"' in other
    forged = _text(editor_client.post(url, {**data, "execute": "1:" + "0" * 32}, **HX))
    assert 'id="execute-confirm"' in forged and 'data-mode="execute"' not in forged

    done = _text(execute_confirmed(editor_client, url, data, **HX))
    assert 'data-mode="execute"' in done and 'id="execute-confirm"' not in done


def test_execute_with_nothing_to_call_needs_no_confirmation(editor_client, seed_rule_set) -> None:
    url = reverse("rules:test", args=[seed_rule_set.pk])
    done = _text(editor_client.post(url, {"t-query": "날씨 어때?", "execute": "1"}, **HX))
    assert 'id="execute-confirm"' not in done and 'data-mode="execute"' in done


def test_the_confirmation_is_in_korean_and_viewers_cannot_execute(
    editor_client, make_user, seed_rule_set
) -> None:
    from django.test import Client

    viewer_client = Client()
    viewer_client.force_login(make_user("viewer"))
    url = reverse("rules:test", args=[seed_rule_set.pk])
    editor_client.post(reverse("language_set"), {"language": "ko"})
    asked = _text(editor_client.post(url, {"t-query": "주문 조회", "execute": "1"}, **HX))
    assert "실제로 호출합니다" in asked
    refused = viewer_client.post(url, {"t-query": "주문 조회", "execute": "1:" + "0" * 32}, **HX)
    assert refused.status_code == 403
