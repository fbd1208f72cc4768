"""Agent, run and privacy pages: full pages, partials and their bad-input paths."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from agents.models import Agent, ModelConnection, PrivacySettings, Run
from core.models import AuditEvent
from llamon_agent.expr import MAX_QUERY_CHARS

pytestmark = pytest.mark.django_db


def _agent_post(**overrides) -> dict:
    data = {
        "name": "helper",
        "description": "",
        "system_prompt": "Be brief.",
        "rule_set": "",
        "rule_set_mode": "latest",
        "pinned_version": "",
        "model_provider": "offline",
        "model_connection": "",
        "model_name": "",
        "model_script": "",
        "temperature": "0",
        "input_max_chars": "4000",
        "input_blocked_patterns": "",
        "output_blocked_patterns": "",
        "max_iterations": "6",
    }
    data.update(overrides)
    return data


def test_create_an_agent_with_the_seed_prompt_line_offered(editor_client) -> None:
    html = editor_client.get(reverse("agents:create")).content.decode()
    assert "확정 호출 결과" in html  # the seed's recommended line is the default prompt
    response = editor_client.post(reverse("agents:create"), _agent_post(output_masks=["card_number"]))
    assert response.status_code == 302
    agent = Agent.objects.get(name="helper")
    assert agent.output_masks == ["card_number"]
    assert AuditEvent.objects.filter(action="agent.create", object_id=str(agent.pk)).exists()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"input_blocked_patterns": "(unclosed"}, "not a valid regular expression"),
        ({"model_provider": "openai-compatible"}, "runs through a model connection"),
        ({"model_provider": "scripted"}, "needs at least one reply"),
        ({"model_provider": "scripted", "model_script": "[{"}, "Not valid JSON"),
        ({"model_script": '{"content": "x"}'}, "JSON list of replies"),
        ({"max_iterations": "0"}, "between 1 and 50"),
        ({"rule_set_mode": "pinned"}, "Choose a published version"),
    ],
)
def test_bad_agent_input_is_refused_with_a_message_and_nothing_saved(
    editor_client, overrides, message
) -> None:
    response = editor_client.post(reverse("agents:create"), _agent_post(**overrides))
    assert response.status_code == 400
    assert message in response.content.decode()
    assert not Agent.objects.exists()


def test_a_stale_agent_edit_is_refused(editor_client) -> None:
    agent = Agent.objects.create(name="helper", system_prompt="p")
    editor_client.post(
        reverse("agents:edit", args=[agent.pk]), _agent_post(description="first", revision="1")
    )
    response = editor_client.post(
        reverse("agents:edit", args=[agent.pk]), _agent_post(description="second", revision="1")
    )
    assert response.status_code == 400 and "changed while you were editing" in response.content.decode()
    assert Agent.objects.get(pk=agent.pk).description == "first"


def test_a_run_over_the_size_limit_is_refused_before_anything_is_enqueued(
    editor_client, django_capture_on_commit_callbacks
) -> None:
    agent = Agent.objects.create(name="helper", system_prompt="p")
    with django_capture_on_commit_callbacks() as callbacks:
        response = editor_client.post(
            reverse("agents:run_start"), {"agent": agent.pk, "query": "x" * (MAX_QUERY_CHARS + 1)}
        )
    assert response.status_code == 400
    assert (
        "Ensure this value has at most" in response.content.decode()
        or "the limit is" in response.content.decode()
    )
    assert not Run.objects.exists() and callbacks == []


def test_a_run_from_a_pasted_a2a_message(
    editor_client, django_capture_on_commit_callbacks, monkeypatch
) -> None:
    monkeypatch.setattr("agents.dispatch.run_enqueue", lambda run_id: None)
    agent = Agent.objects.create(name="helper", system_prompt="p")
    message = {
        "kind": "message",
        "role": "user",
        "messageId": "m",
        "contextId": "ctx-9",
        "metadata": {"userId": "C-1004"},
        "parts": [
            {"kind": "text", "text": "주문 조회"},
            {"kind": "data", "data": {"chatbotId": "premium-support"}},
        ],
    }
    with django_capture_on_commit_callbacks(execute=True):
        response = editor_client.post(
            reverse("agents:run_start"), {"agent": agent.pk, "data": json.dumps(message)}
        )
    run = Run.objects.get()
    assert response.status_code == 302 and response["Location"].endswith(f"/runs/{run.pk}/")
    assert (run.query, run.user_id, run.session_id, run.chatbot_id) == (
        "주문 조회",
        "C-1004",
        "ctx-9",
        "premium-support",
    )


def test_privacy_preview_shows_what_would_be_stored_and_saving_is_audited(admin_client) -> None:
    data = {
        "redaction_patterns": r"C-\d{4}",
        "mask_presets": ["card_number"],
        "retention_days": "14",
        "preview": "C-1001 paid with 4111 1111 1111 1111",
        "preview_only": "1",
    }
    html = admin_client.post(reverse("agents:privacy"), data).content.decode()
    assert (
        'id="privacy-preview"' in html
        and "C-1001" not in html.split('id="privacy-preview"')[1]
        and "4111 1111" not in html.split('id="privacy-preview"')[1]
    )
    assert not PrivacySettings.objects.exists() or PrivacySettings.objects.get().retention_days == 30
    data.pop("preview_only")
    assert admin_client.post(reverse("agents:privacy"), data).status_code == 302
    assert PrivacySettings.objects.get().retention_days == 14
    assert AuditEvent.objects.filter(action="privacy.update").exists()


def test_a_bad_redaction_pattern_is_refused(admin_client) -> None:
    response = admin_client.post(
        reverse("agents:privacy"), {"redaction_patterns": "(x", "retention_days": "14"}
    )
    assert response.status_code == 400 and "not a valid regular expression" in response.content.decode()


@pytest.mark.parametrize(
    ("url", "allow_private"),
    [
        ("http://169.254.169.254/latest/meta-data/", True),  # metadata: always refused
        ("http://[fe80::1]/v1", True),  # link-local: always refused
        ("http://127.0.0.1:11434/v1", False),  # loopback without LLAMON_ALLOW_PRIVATE_MCP
        ("http://10.0.0.5/v1", False),
        ("file:///etc/passwd", True),
    ],
)
def test_an_llm_endpoint_gets_the_mcp_url_policy(admin_client, settings, url, allow_private) -> None:
    settings.LLAMON_ALLOW_PRIVATE_MCP = allow_private
    response = admin_client.post(reverse("agents:connection_create"), _connection_post(base_url=url))
    assert response.status_code == 400
    assert "The model&#x27;s base URL is refused" in response.content.decode()
    assert "kept-name" in response.content.decode()  # the input stays
    assert not ModelConnection.objects.exists()


def _connection_post(**overrides) -> dict:
    return {
        "name": "kept-name",
        "provider": "openai-compatible",
        "base_url": "http://127.0.0.1:11434/v1",
        "api_key_env": "",
        "model_names": "m\nm2",
        "max_tokens": "",
        **overrides,
    }


def test_a_loopback_llm_endpoint_is_fine_when_private_addresses_are_allowed(admin_client, settings) -> None:
    settings.LLAMON_ALLOW_PRIVATE_MCP = True
    response = admin_client.post(reverse("agents:connection_create"), _connection_post())
    assert response.status_code == 302
    connection = ModelConnection.objects.get()
    assert connection.model_names == ["m", "m2"]
    listed = admin_client.get(reverse("agents:connection_list")).content.decode()
    assert "kept-name" in listed and "http://127.0.0.1:11434/v1" in listed
    response = admin_client.post(
        reverse("agents:create"),
        _agent_post(model_provider="openai-compatible", model_connection=str(connection.pk), model_name="m2"),
    )
    assert response.status_code == 302
    assert Agent.objects.get().model_connection == connection
