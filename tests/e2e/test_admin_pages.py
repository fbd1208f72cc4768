"""The remaining pages in a real browser: agent form, privacy preview, import, audit filter, API tokens."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command

from accounts.models import ApiToken
from agents.models import Agent, PrivacySettings
from rules.exporting import rule_set_export_json
from rules.models import RuleSet
from tests.e2e.conftest import screenshot

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_agent_form_refuses_bad_input_then_saves(page, logged_in) -> None:
    logged_in("editor")
    page.goto("/agents/new")
    assert "확정 호출 결과" in page.locator("#id_system_prompt").input_value()  # the seed's line by default
    page.fill("#id_name", "kb-helper")
    page.select_option("#id_model_provider", "openai-compatible")
    page.click("#agent-form button[type=submit]")
    assert "runs through a model connection" in page.locator("#agent-form").inner_text()
    assert not Agent.objects.exists()
    assert page.locator("#id_model_base_url").count() == 0  # an agent holds no endpoint of its own
    page.select_option("#id_model_provider", "offline")
    page.click("#agent-form button[type=submit]")
    page.wait_for_url("**/agents/")
    assert page.locator("#agent-table").get_by_text("kb-helper").is_visible()
    assert "Saved agent kb-helper" in page.locator("#messages").inner_text()


def test_privacy_preview_then_save(page, logged_in) -> None:
    logged_in("admin")
    page.goto("/agents/privacy")
    page.fill("#id_redaction_patterns", r"C-\d{4}")
    page.check("input[name=mask_presets][value=card_number]")
    page.fill("#id_preview", "C-1001 paid with 4111 1111 1111 1111")
    page.click("button[name=preview_only]")
    preview = page.locator("#privacy-preview").inner_text()
    assert "C-1001" not in preview and "4111" not in preview and "paid with" in preview
    screenshot(page, "privacy-preview")
    assert not PrivacySettings.objects.exists() or PrivacySettings.objects.get().redaction_patterns == []
    page.click("#privacy-form button.primary")
    page.get_by_text("Saved the privacy settings").wait_for()
    assert PrivacySettings.objects.get().redaction_patterns == [r"C-\d{4}"]


def test_import_a_rule_set_and_find_it_in_the_audit_log(page, logged_in) -> None:
    call_command("load_demo", "--no-refresh", "--no-runs", verbosity=0)
    exported = json.dumps(rule_set_export_json(RuleSet.objects.get(name="seed-rules")), ensure_ascii=False)
    logged_in("editor")
    page.goto("/rules/import")
    page.fill("#id_data", "{not json")
    page.click("button:has-text('Import')")
    assert "not valid JSON" in page.locator("#import-error").inner_text()
    assert RuleSet.objects.count() == 1
    page.fill("#id_data", exported)
    page.fill("#id_name", "seed-copy")
    page.click("button:has-text('Import')")
    page.wait_for_url("**/rules/*/")
    assert page.locator("h1").inner_text() == "seed-copy"
    assert page.locator("li.rule").count() == 3

    page.goto("/rules/audit/")
    page.fill("input[name=action]", "rule_set.import")
    page.press("input[name=action]", "Enter")
    page.wait_for_url("**action=rule_set.import*")
    table = page.locator("#audit-table")
    table.get_by_text("seed-copy").first.wait_for()
    assert "rule.create" not in table.inner_text()
    screenshot(page, "audit-log")


def test_create_an_api_token_see_it_once_and_revoke_it(page, logged_in) -> None:
    logged_in("editor")
    page.goto("/tokens/")
    page.fill("#id_name", "ci-pipeline")
    page.select_option("#id_max_role", "viewer")
    page.click("#token-form button[type=submit]")
    secret = page.locator("#token-secret code").inner_text()
    assert secret.startswith("llamon_")
    token = ApiToken.objects.get(name="ci-pipeline")
    assert secret not in token.token_hash and len(token.token_hash) == 64  # only a hash is stored
    page.goto("/tokens/")
    assert page.locator("#token-secret").count() == 0  # shown once
    page.locator("#token-table").get_by_text("Revoke").click()
    page.locator("#token-table").get_by_text("revoked").first.wait_for()
    token.refresh_from_db()
    assert token.revoked_at is not None
