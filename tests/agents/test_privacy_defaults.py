"""The mask presets are on for a new install, and an install in use keeps its choice (issue #40, point 6)."""

from __future__ import annotations

from importlib import import_module

import pytest
from django.apps import apps
from django.test import Client
from django.urls import reverse

from agents.forms import MASK_CHOICES
from agents.models import Agent, PrivacySettings
from agents.redaction import privacy_get
from llamon_agent.guardrails import MASK_PRESETS

pytestmark = pytest.mark.django_db

migration = import_module("agents.migrations.0017_privacy_presets_on_for_new_installs")


def test_a_fresh_database_gets_every_preset_on() -> None:
    assert not PrivacySettings.objects.exists()  # tests/conftest.py: the suite starts with none
    migration.presets_on_for_a_new_install(apps, None)
    assert privacy_get().mask_presets == list(MASK_PRESETS)
    assert [name for name, _ in MASK_CHOICES] == list(MASK_PRESETS)  # the Privacy page offers each


def test_an_install_in_use_keeps_its_choice(make_user) -> None:
    Agent.objects.create(name="in-use")
    migration.presets_on_for_a_new_install(apps, None)
    assert not PrivacySettings.objects.exists()
    PrivacySettings.objects.create(pk=1, mask_presets=["email"])
    Agent.objects.all().delete()
    migration.presets_on_for_a_new_install(apps, None)
    assert privacy_get().mask_presets == ["email"]


def test_the_privacy_page_offers_the_korean_presets(make_user) -> None:
    client = Client()
    client.force_login(make_user("admin", "privacy-admin"))
    page = client.get(reverse("agents:privacy")).content.decode()
    for name in MASK_PRESETS:
        assert f'value="{name}"' in page, name
    assert "외국인등록번호" in page
