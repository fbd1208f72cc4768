"""A run's own input (query, context, DataParts, userId) is masked wherever it is shown or leaves.

The row keeps what was sent (the worker runs on it, a re-run repeats it); pages, the API, search
results, cases saved from a run and the privacy preview show it masked by the privacy settings.
"""

from __future__ import annotations

import json

import pytest
from django.test import Client
from django.urls import reverse

from accounts.token_services import token_create
from agents import services
from agents.models import Agent, Run
from agents.redaction import privacy_get
from rules.models import TestCase as RuleCase
from tests.support.rule_sets import build_rule_set

pytestmark = pytest.mark.django_db

CARD = "4111 1111 1111 1111"
EMAIL = "kim@example.com"
SECRET_ID = "C-7777"  # caught by the admin's own pattern


@pytest.fixture
def viewer_api_token(make_user) -> dict[str, str]:
    return {
        "Authorization": f"Bearer {token_create(actor=make_user('viewer', 'viewer-api'), name='t').secret}"
    }


@pytest.fixture
def masked_run(make_user) -> Run:
    privacy = privacy_get()
    privacy.redaction_patterns, privacy.mask_presets = [r"C-\d{4}"], ["card_number", "email"]
    privacy.save()
    editor = make_user("editor", "editor-privacy")
    agent = Agent.objects.create(
        name="helper", system_prompt="p", rule_set=build_rule_set(editor, "support", [])
    )
    return Run.objects.create(
        agent=agent,
        agent_name=agent.name,
        status=Run.Status.SUCCEEDED,
        query=f"pay with {CARD} please",
        context={"userId": EMAIL, "note": f"customer {SECRET_ID}"},
        a2a_data=[{"chatbotId": "premium", "card": CARD}],
        user_id=EMAIL,
        session_id=SECRET_ID,
    )


def _leaks(text: str) -> list[str]:
    return [secret for secret in (CARD, EMAIL, SECRET_ID) if secret in text]


def test_pages_show_the_run_input_masked_and_the_row_keeps_it(masked_run, viewer_client) -> None:
    for url in (
        reverse("agents:run_detail", args=[masked_run.pk]),
        reverse("agents:run_list"),
        reverse("home"),
        reverse("agents:run_compare") + f"?a={masked_run.pk}&b={masked_run.pk}",
    ):
        html = viewer_client.get(url).content.decode()
        assert _leaks(html) == [], url
    assert (
        "[카드번호]" in viewer_client.get(reverse("agents:run_detail", args=[masked_run.pk])).content.decode()
    )
    masked_run.refresh_from_db()
    assert CARD in masked_run.query and masked_run.user_id == EMAIL  # the worker still gets the real input


def test_the_api_returns_the_run_input_masked(masked_run, make_user) -> None:
    client = Client()
    client.force_login(make_user("viewer", "viewer-api"))
    one = client.get(f"/api/runs/{masked_run.pk}")
    many = client.get("/api/runs")
    assert one.status_code == many.status_code == 200
    assert _leaks(one.content.decode()) == [] and _leaks(many.content.decode()) == []
    assert one.json()["user_id"] == "[이메일]"


def test_search_does_not_find_runs_by_what_is_masked(masked_run, viewer_client) -> None:
    def found(q: str) -> bool:
        html = viewer_client.get(reverse("agents:run_list"), {"q": q}).content.decode()
        return reverse("agents:run_detail", args=[masked_run.pk]) in html

    assert found("please")  # unmasked words still find it
    assert not found("4111 1111")  # the card number would be an oracle for what is hidden


@pytest.mark.parametrize("field", ["user_id", "session_id"])
def test_an_exact_id_filter_is_no_oracle_for_a_masked_id(
    masked_run, viewer_client, viewer_api_token, field
) -> None:
    """userId shown as [이메일]: ?user_id=<the real e-mail> must not find the run (and a wrong e-mail
    must not differ from it), on the page and in the API."""
    real = EMAIL if field == "user_id" else SECRET_ID
    other = "lee@example.com" if field == "user_id" else "C-9999"
    for value in (real, other):
        html = viewer_client.get(reverse("agents:run_list"), {field: value}).content.decode()
        assert reverse("agents:run_detail", args=[masked_run.pk]) not in html
        items = viewer_client.get("/api/runs", {field: value}, headers=viewer_api_token).json()["items"]
        assert items == []


def test_a_case_saved_from_a_run_keeps_the_masked_input(masked_run, make_user) -> None:
    services.run_save_as_case(actor=make_user("editor", "editor-case"), run=masked_run, name="from run")
    case = RuleCase.objects.get(name="from run")
    assert _leaks(json.dumps(case.input, ensure_ascii=False)) == []
    assert case.input["context"]["userId"] == "[이메일]"


def test_a_rerun_repeats_the_real_input(masked_run, make_user) -> None:
    rerun = services.run_rerun(actor=make_user("editor", "editor-rerun"), run=masked_run)
    rerun.refresh_from_db()
    assert CARD in rerun.query and rerun.context["userId"] == EMAIL


def test_a_run_read_for_display_cannot_be_saved_back(masked_run) -> None:
    from agents.selectors import runs_for_display

    shown = runs_for_display([Run.objects.get(pk=masked_run.pk)])[0]
    with pytest.raises(ValueError, match="masked for display"):
        shown.save()
    masked_run.refresh_from_db()
    assert CARD in masked_run.query


def test_the_privacy_preview_shows_the_newest_run_input_masked(masked_run, admin_client) -> None:
    data = {"redaction_patterns": r"C-\d{4}", "mask_presets": ["card_number", "email"]}
    html = admin_client.post(
        reverse("agents:privacy"), {**data, "retention_days": "30", "preview": "x", "preview_only": "1"}
    ).content.decode()
    shown = html.split('id="privacy-preview-run"')[1]
    assert "[카드번호]" in shown and _leaks(shown) == []
