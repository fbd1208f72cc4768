"""The Korean interface: the catalogue is complete, current and compiled; the language follows the
browser unless the user chose one; the seed's Korean contract strings are never translated."""

from __future__ import annotations

import gettext
import html
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from django.core.management import call_command
from django.test import Client, override_settings
from django.urls import reverse
from django.utils import translation

from llamon_agent import models as agent_models
from llamon_agent import prestep, project
from llamon_web.management.commands.messages import LANGUAGES, MAKEMESSAGES_OPTIONS
from tests.conftest import ROOT, require_executable

PO = ROOT / "locale" / "ko" / "LC_MESSAGES" / "django.po"
MO = PO.with_suffix(".mo")
CONTRACT = [
    prestep.MCP_NOT_LOADED,
    prestep.PRESTEP_FAILED,
    prestep.RESULTS_HEADER,
    prestep.LOG_DONE,
    project.NEVER_CALLED,
    agent_models.OFFLINE_ANSWER_HEADER,
]


def _statistics(po: Path) -> str:
    msgfmt = require_executable("msgfmt", "gettext")
    result = subprocess.run(
        [msgfmt, "--check", "--statistics", "-o", "/dev/null", str(po)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    return result.stderr.strip()


def _catalog(mo: Path) -> dict:
    with mo.open("rb") as handle:
        catalog = dict(gettext.GNUTranslations(handle)._catalog)  # type: ignore[attr-defined]
    catalog.pop("", None)  # the header
    return catalog


def test_every_string_in_the_catalogue_is_translated() -> None:
    stats = _statistics(PO)
    assert stats.endswith(" translated messages."), f"untranslated or fuzzy entries in {PO.name}: {stats}"


def test_makemessages_finds_no_new_or_removed_string(tmp_path: Path, monkeypatch) -> None:
    """What `manage.py messages` would write equals what is committed: no string waits for a translation.

    makemessages writes into every `locale` folder under the directory it runs in, so it runs in a
    copy of the checkout made of symlinks, with a real copy of `locale/`: the committed catalogue is
    never rewritten by the test."""
    require_executable("xgettext", "gettext")
    tree = tmp_path / "tree"
    tree.mkdir()
    for entry in ROOT.iterdir():
        if entry.name not in {"locale", ".git", ".venv", "var", "node_modules"}:
            (tree / entry.name).symlink_to(entry)
    for language in LANGUAGES:
        target = tree / "locale" / language / "LC_MESSAGES"
        target.mkdir(parents=True)
        shutil.copy(PO, target / "django.po")
    monkeypatch.chdir(tree)
    committed = PO.read_bytes()
    fresh = tree / "locale" / "ko" / "LC_MESSAGES" / "django.po"
    copied_at = fresh.stat().st_mtime_ns
    with override_settings(LOCALE_PATHS=[tree / "locale"]):
        call_command("makemessages", verbosity=0, symlinks=True, **MAKEMESSAGES_OPTIONS)
    assert PO.read_bytes() == committed, "the test rewrote the committed catalogue"
    assert fresh.stat().st_mtime_ns != copied_at, "makemessages did not write the copy"
    assert _statistics(fresh) == _statistics(PO), (
        "the code's strings differ from locale/ko: run `manage.py messages`, translate the empty msgstr "
        "entries and commit django.po and django.mo"
    )


def test_the_committed_mo_is_compiled_from_the_po(tmp_path: Path) -> None:
    msgfmt = require_executable("msgfmt", "gettext")
    compiled = tmp_path / "django.mo"
    subprocess.run([msgfmt, "-o", str(compiled), str(PO)], check=True)
    assert _catalog(MO) == _catalog(compiled), "django.mo is stale: run `manage.py messages`"


def test_the_seed_contract_strings_are_never_translated() -> None:
    catalog = _catalog(MO)
    for contract in CONTRACT:
        stem = contract.split("{")[0].split("%")[0].strip()
        assert not [msgid for msgid in catalog if stem in str(msgid)], contract
        with translation.override("ko"):
            assert translation.gettext(contract) == contract


@pytest.mark.django_db
def test_the_browser_language_chooses_korean(viewer_client) -> None:
    page = viewer_client.get(reverse("home"), HTTP_ACCEPT_LANGUAGE="ko-KR,ko;q=0.9,en;q=0.5").content.decode()
    assert 'lang="ko"' in page and ">규칙 세트</a>" in page and "로그아웃" in page
    page = viewer_client.get(reverse("home"), HTTP_ACCEPT_LANGUAGE="en-US").content.decode()
    assert 'lang="en"' in page and ">Rule sets</a>" in page


@pytest.mark.django_db
def test_the_users_own_choice_wins_over_the_browser(viewer_client) -> None:
    viewer_client.post(reverse("language_set"), {"language": "en"})
    page = viewer_client.get(reverse("home"), HTTP_ACCEPT_LANGUAGE="ko").content.decode()
    assert ">Rule sets</a>" in page
    viewer_client.post(reverse("language_set"), {"language": "ko"})
    page = viewer_client.get(reverse("home"), HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert ">규칙 세트</a>" in page


@pytest.mark.django_db
def test_messages_from_python_are_korean_and_keep_their_values(client, make_user) -> None:
    admin = make_user("admin")
    client.force_login(admin)
    client.post(reverse("language_set"), {"language": "ko"})
    response = client.post(reverse("user_create"), {"username": "with space", "role": "viewer"})
    assert response.status_code == 400
    assert "사용자 이름에는 글자, 숫자와 @ . + - _ 만 쓸 수 있습니다" in response.content.decode()


# Each main page with labels of its own (the menu is on all of them): in Korean none may stay English.
NAV = ["MCP servers", "Rule sets", "Agents", "Runs", "Audit", "API tokens", "Users", "Log out"]
KOREAN_PAGES = {
    "home": ["Workbench", "Recent runs", "Services", "All rule sets →"],
    "servers:list": ["Add a server", "Transport", "Target", "Health"],
    "rules:editor": [
        "Live tester",
        "Impact analysis",
        "Dry run",
        "Execute",
        "Export JSON",
        "Versions",
        "Drag to reorder",
    ],
    "agents:run_list": [
        "Start a run",
        "Compare ticked runs",
        "Filter",
        "Status",
        "Since",
        "Until",
        "any status",
    ],
    "agents:run_detail": ["Timeline", "Re-run", "Save as test case", "Open in tester", "Expand all"],
    "agents:list": ["New agent", "Privacy", "ReAct servers", "Answer from pre-step"],
    "rules:audit": ["Audit log", "Actor", "Action", "Before / after"],
    "tokens": ["Create token", "Last used", "No tokens yet."],
    "users": ["Add a user", "Last login", "Active tokens", "Username"],
}


def _visible_text(page: str) -> str:
    """What a person reads: text and the labels assistive technology reads out; code and data excluded."""
    page = re.sub(r"(?s)<(script|style|code|pre|textarea)\b.*?</\1>", " ", page)
    said = " ".join(re.findall(r'(?:aria-label|title|placeholder|data-confirm)="([^"]*)"', page))
    return html.unescape(re.sub(r"(?s)<[^>]+>", " ", page) + " " + said)


def _page_url(name: str) -> str:
    from agents.models import Run
    from rules.models import RuleSet

    if name == "rules:editor":
        return reverse(name, args=[RuleSet.objects.get(name="seed-rules").pk])
    if name == "agents:run_detail":
        return reverse(name, args=[Run.objects.order_by("pk").first().pk])
    return reverse(name)


@pytest.mark.django_db
def test_the_main_pages_in_korean_leave_none_of_their_labels_english(make_user) -> None:
    """A guard that new interface strings get marked: each label is on the English page and gone from the
    Korean one (Accept-Language for most pages, the user's own setting for the rest)."""
    call_command("load_demo", verbosity=0)
    by_browser, by_setting = Client(), Client()
    by_browser.force_login(make_user("admin"))
    by_setting.force_login(make_user("admin"))
    by_setting.post(reverse("language_set"), {"language": "ko"})
    for i, (name, labels) in enumerate(KOREAN_PAGES.items()):
        url = _page_url(name)
        english = _visible_text(by_browser.get(url, HTTP_ACCEPT_LANGUAGE="en").content.decode())
        if i % 2:  # half the pages by the user's setting, which wins over an English browser
            response = by_setting.get(url, HTTP_ACCEPT_LANGUAGE="en")
        else:
            response = by_browser.get(url, HTTP_ACCEPT_LANGUAGE="ko")
        assert response.status_code == 200, url
        korean = _visible_text(response.content.decode())
        with translation.override("ko"):
            for label in NAV + labels:
                assert re.search(rf"(?<![\w-]){re.escape(label)}(?![\w-])", english), (name, label)
                assert not re.search(rf"(?<![\w-]){re.escape(label)}(?![\w-])", korean), (
                    f"{name}: {label!r} is still English in Korean: mark it and run `manage.py messages`"
                )
                assert translation.gettext(label) in korean, (name, label)
