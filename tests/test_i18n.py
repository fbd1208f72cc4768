"""The Korean interface: the catalogue is complete, current and compiled; the language follows the
browser unless the user chose one; the seed's Korean contract strings are never translated."""

from __future__ import annotations

import gettext
import html
import json
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
from llamon_web.demo import DEMO_AGENT, SEED_RUNS
from llamon_web.management.commands.messages import LANGUAGES, MAKEMESSAGES_OPTIONS
from tests.conftest import ROOT, require_executable
from tests.support.authz import EXPECTED, product_patterns

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


# Every page in Korean: no English interface string anywhere. Runs of ASCII words are data (names,
# ids, field names, expressions) or a product's name, or else an interface string left English.
PRODUCT_NAMES = {
    "MCP", "A2A", "LLM", "JSON", "CSV", "URL", "URLs", "HTTP", "HTTPS", "HTML", "API", "SDK", "ID", "OK",
    "OpenAI", "Anthropic", "Ollama", "Celery", "Redis", "PostgreSQL", "SQLite", "llamon", "llamon-web",
    "ReAct", "Python", "Django", "CEL", "SSE", "stdio", "http", "https", "GoRules", "OTLP", "OpenTelemetry",
    "SHA", "UTC", "PDF", "gRPC", "TLS", "TTL", "JSONPath", "ko", "en", "bearer",
    # identifiers the interface shows as they are: roles, version refs and modes, JSON field names
    "viewer", "editor", "admin", "v", "draft", "latest", "pinned", "content", "args", "query", "name",
}  # fmt: skip


PRODUCT_PHRASES = ["JSON Lines"]


def _visible_strings(page: str) -> list[str]:
    """What a person reads, piece by piece: text nodes and the attributes read out or shown (title,
    placeholder, aria-label, alt, a confirmation, a button's value); code, data and scripts excluded."""
    page = re.sub(r"(?s)<!--.*?-->", " ", page)
    page = re.sub(r"(?s)<(script|style|code|pre|textarea|kbd|samp|template)\b.*?</\1>", " ", page)
    said = re.findall(r'\s(?:aria-label|title|placeholder|alt|data-confirm)="([^"]*)"', page)
    said += re.findall(r'<input\b[^>]*\btype="(?:submit|button|reset)"[^>]*\bvalue="([^"]*)"', page)
    said += re.findall(r'<input\b[^>]*\bvalue="([^"]*)"[^>]*\btype="(?:submit|button|reset)"', page)
    page = re.sub(r"(?s)<[^>]+>", "\n", page)
    return [html.unescape(text).strip() for text in [*page.split("\n"), *said] if text.strip()]


def _is_word(token: str) -> bool:
    """An English word as an interface writes it; identifiers (snake_case, camelCase, CONSTANTS,
    dotted or slashed names, numbers) are code or data."""
    return bool(re.fullmatch(r"[A-Za-z][a-z]*(?:'[a-z]+)?", token))


def _data_words() -> set[str]:
    """The demo's data as people typed it: names, ids, descriptions, queries, tools, field names."""
    from agents.models import Agent, ModelConnection, Run
    from rules.models import Rule, RuleSet, TestCase
    from servers.models import McpServer

    texts: list[str] = []
    for server in McpServer.objects.all():
        texts += [server.mcp_id, server.description, server.command, *server.args, server.url]
        for tool in server.tools:
            texts += [tool["name"], tool.get("description", ""), json.dumps(tool.get("input_schema", {}))]
    for rule_set in RuleSet.objects.all():
        texts += [rule_set.name, rule_set.description]
        for version in rule_set.versions.all():
            texts += [version.message, json.dumps(version.content)]
    for rule in Rule.objects.all():
        texts += [
            rule.name,
            rule.description,
            rule.mcp_id,
            rule.tool_name,
            rule.when,
            json.dumps(rule.params),
        ]
    for case in TestCase.objects.all():
        texts += [case.name, json.dumps(case.input), json.dumps(case.expected)]
    for agent in Agent.objects.all():
        texts += [agent.name, agent.description, agent.system_prompt, agent.model_name, *agent.output_masks]
    for run in Run.objects.all():
        texts += [run.query, run.agent_name, run.rule_set_name, json.dumps(run.context), run.error]
        texts += [json.dumps(step.output) + json.dumps(step.input) + step.name for step in run.steps.all()]
    for connection in ModelConnection.objects.all():
        texts += [connection.name, connection.base_url, *connection.model_names]
    from django.contrib.auth import get_user_model

    texts += [user.username for user in get_user_model().objects.all()]
    return {word for text in texts for word in re.findall(r"[A-Za-z]+", str(text or ""))}


def _english(strings: list[str], allowed: set[str]) -> list[str]:
    """The runs of English words that are neither data nor a product's name."""
    found = []
    for text in strings:
        for phrase in PRODUCT_PHRASES:
            text = text.replace(phrase, " ")
        run: list[str] = []
        for token in [*text.split(), ""]:
            word = token.strip("()[]{},.:;!?\"'“”‘’…→←*%#")
            if word and _is_word(word):
                run.append(word)
                if token[-1] not in ",'\"":
                    continue
            if any(w.split("'")[0].lower() not in allowed for w in run):
                found.append(" ".join(run))
            run = []
    return found


_FORM = re.compile(r"(?s)<form\b([^>]*)>(.*?)</form>")
# Actions, not forms: nothing to refuse, or they act at once (refresh starts the server's process).
_SKIPPED_ACTIONS = ("/logout", "/language", "/delete", "/revoke", "/cancel", "/refresh")
# An app/tools.py that does not parse is refused with Python's own SyntaxError text (a .py file's author
# reads Python's words); the frame of that message is Korean.
_PYTHON_DETAIL_ACTIONS = ("/rules/import/tools-py",)


def _forms(page: str, url: str) -> dict[str, list[str]]:
    """The POST forms of a page: their action and the names of their fields."""
    found = {}
    for attrs, body in _FORM.findall(page):
        if 'method="post"' not in attrs.lower():
            continue
        action = html.unescape((re.search(r'action="([^"]*)"', attrs) or re.search("()", "")).group(1)) or url
        if any(part in action for part in _SKIPPED_ACTIONS + _PYTHON_DETAIL_ACTIONS):
            continue
        names = set(re.findall(r'<(?:input|textarea|select)\b[^>]*\bname="([^"]+)"', body))
        found[action] = sorted(names - {"csrfmiddlewaretoken", "revision"})
    return found


def _post_every_form(client: Client, forms: dict[str, list[str]], allowed: set[str]) -> dict:
    """Each form, sent with a value no field accepts ("{" in every field: not JSON, not a number, no
    choice): the errors it answers, in Korean. Refused forms only (400, 422); JSON answers are skipped."""
    problems: dict[str, list[str]] = {}
    pages = 0
    for action, names in sorted(forms.items()):
        response = client.post(action, dict.fromkeys(names, "{"), HTTP_ACCEPT_LANGUAGE="ko")
        if response.status_code not in (400, 422) or not response["Content-Type"].startswith("text/html"):
            continue
        pages += 1
        found = _english(_visible_strings(response.content.decode()), allowed)
        if found:
            problems[action] = found
    return {"pages": pages, "problems": problems, "count": sum(map(len, problems.values()))}


def _pages(kwargs: dict[str, dict[str, object]]) -> list[str]:
    """Every page an admin can open by GET (tests/support/authz.py), with real objects."""
    from agents.models import Run

    urls = []
    for name, _ in product_patterns():
        if EXPECTED[name][1]["admin"] == 200:
            urls.append(reverse(name, kwargs=kwargs.get(name)))
    a, b = Run.objects.order_by("-pk").values_list("pk", flat=True)[:2]
    urls.append(reverse("agents:run_compare") + f"?a={a}&b={b}")
    return urls


@pytest.mark.django_db
def test_every_page_in_korean_shows_no_english_interface_string(client, make_user, sample_kwargs) -> None:
    """Each URL pattern an admin can open, with the demo's objects, rendered in Korean: every run of
    ASCII words is data or a product's name. Rendered in English, the same check finds English on
    the pages it reads again (it can fail). Then every form on those pages is sent with values no field accepts,
    and the errors it answers are checked the same way."""
    call_command("load_demo", verbosity=0, no_refresh=False)
    from agents.models import Agent
    from rules.models import RuleSet
    from tests.support.recorded_runs import record_run

    seed, agent = RuleSet.objects.get(name="seed-rules"), Agent.objects.get(name=DEMO_AGENT)
    runs = [record_run(seed, e["query"], context=e["context"], agent=agent) for e in SEED_RUNS[:2]]
    for name, kw in sample_kwargs.items():  # the demo's objects where a page has something to show
        if (
            name.startswith(("rules:", "governance:impact_new", "governance:rule_health"))
            and "rule_pk" not in kw
        ):
            kw["pk"] = seed.pk
        elif name in ("agents:edit", "agents:rollout"):
            kw["pk"] = agent.pk
        elif name in ("agents:run_detail", "agents:run_steps", "agents:run_rules", "agents:run_step_value"):
            kw["pk"] = runs[0].pk
    client.force_login(make_user("admin"))
    allowed = {word.lower() for word in PRODUCT_NAMES | _data_words()}
    problems: dict[str, list[str]] = {}
    pages, english_pages, silent_in_english = 0, 0, []
    forms: dict[str, list[str]] = {}  # action URL -> field names, from the Korean pages
    for url in _pages(sample_kwargs):
        response = client.get(url, HTTP_ACCEPT_LANGUAGE="ko")
        assert response.status_code in (200, 286), url  # 286: htmx, stop polling (a finished run)
        if not response["Content-Type"].startswith("text/html"):
            continue
        pages += 1
        forms.update(_forms(response.content.decode(), url))
        found = _english(_visible_strings(response.content.decode()), allowed)
        if found:
            problems[url] = found
        # One whole page in three (not an htmx fragment) again in English: the check must find its menu.
        if "<nav" in response.content.decode() and pages % 3 == 0:
            english = client.get(url, HTTP_ACCEPT_LANGUAGE="en").content.decode()
            english_pages += 1
            if not _english(_visible_strings(english), allowed):
                silent_in_english.append(url)
    count = sum(len(found) for found in problems.values())
    assert not problems, f"{count} English strings on {len(problems)} of {pages} pages:\n" + "\n".join(
        f"{url}: {found}" for url, found in problems.items()
    )
    refused = _post_every_form(client, forms, allowed)
    assert refused["pages"] > 10 and not refused["problems"], (
        f"English in {refused['count']} form errors:\n"
        + "\n".join(f"{url}: {found}" for url, found in refused["problems"].items())
    )
    login = Client().get(reverse("login"), HTTP_ACCEPT_LANGUAGE="ko").content.decode()  # the one public page
    assert not _english(_visible_strings(login), allowed), _english(_visible_strings(login), allowed)
    assert pages > 30 and english_pages > 8 and not silent_in_english, (
        f"the check finds no English in English on {silent_in_english}"
    )


# Inside Korean frames, what the libraries said is Korean too (Python's syntax errors, RE2's, the MCP
# client's), translated where it is shown; a library's own words left over are quoted and marked.
_LIBRARY_QUOTE = re.compile(r"원문: “[^”]*”")


def _english_shown(page: str, *data: str) -> list[str]:
    allowed = {word.lower() for word in PRODUCT_NAMES} | {"s", "ms"}  # units
    allowed |= {word.lower() for text in data for word in re.findall(r"[A-Za-z]+", text)}
    return _english([_LIBRARY_QUOTE.sub(" ", s) for s in _visible_strings(page)], allowed)


@pytest.fixture
def orders_rule_set(make_user):
    from django.utils import timezone

    from rules import services
    from servers.models import McpServer

    McpServer.objects.create(
        mcp_id="order-service",
        transport="http",
        url="http://127.0.0.1:9/mcp",
        tools=[{"name": "get_order", "description": "", "input_schema": {"type": "object"}}],
        tools_refreshed_at=timezone.now(),
    )
    return services.rule_set_create(actor=make_user("editor"), name="orders")


@pytest.mark.django_db
def test_a_bad_regex_and_a_python_syntax_error_say_why_in_korean(client, make_user, orders_rule_set) -> None:
    client.force_login(make_user("editor"))
    base = {
        "rule-name": "r",
        "rule-mcp_id": "order-service",
        "rule-tool_name": "get_order",
        "rule-params": "{}",
    }
    url = reverse("rules:validate", args=[orders_rule_set.pk])
    for when, korean in [
        ('re_search("(", query)', "잘못된 정규 표현식 '(': 닫는 )가 없습니다: ( (RE2 문법"),
        ('re_search("a**", query)', "잘못된 반복 연산자: **"),
        ('"주문" in query query', "잘못된 구문입니다. 쉼표를 빠뜨리지 않았나요?"),
        ('("주문" in query', "'('가 닫히지 않았습니다"),
        ('"주문', "문자열 리터럴이 끝나지 않았습니다(1행에서 발견)"),
    ]:
        page = html.unescape(
            client.post(url, {**base, "rule-when": when}, HTTP_ACCEPT_LANGUAGE="ko").content.decode()
        )
        assert korean in page, (when, page)
        assert not _english_shown(page, when, "re_search query"), (when, _english_shown(page, when))
    # English pages keep the libraries' words as they were.
    page = client.post(url, {**base, "rule-when": 're_search("(", query)'}, HTTP_ACCEPT_LANGUAGE="en").content
    assert "missing ): ( (RE2 syntax" in html.unescape(page.decode())


@pytest.mark.django_db
def test_a_failed_health_check_and_an_unknown_tool_are_korean(client, make_user) -> None:
    from django.utils import timezone

    from rules.expr_messages import engine_text
    from servers.models import McpServer

    failures = {
        "crm": "MCP server 'crm': refused to connect to http://127.0.0.1:9/mcp: ConnectError: All connection attempts failed",
        "docs": "MCP server 'docs': no session within 10s",
        "files": "MCP server 'files': tools/list got no answer within 2.5s",
    }
    for mcp_id, error in failures.items():
        McpServer.objects.create(
            mcp_id=mcp_id,
            transport="http",
            url="http://127.0.0.1:9/mcp",
            last_error=error,
            last_checked_at=timezone.now(),
        )
    client.force_login(make_user("admin"))
    for mcp_id, korean in [
        ("crm", "MCP 서버 'crm': http://127.0.0.1:9/mcp에 연결을 거부했습니다: MCP 클라이언트 원문: “"),
        ("docs", "MCP 서버 'docs': 10초 안에 세션이 열리지 않았습니다"),
        ("files", "tools/list 요청에 2.5초 안에 응답이 없었습니다"),
    ]:
        server = McpServer.objects.get(mcp_id=mcp_id)
        page = html.unescape(
            client.get(
                reverse("servers:detail", args=[server.pk]), HTTP_ACCEPT_LANGUAGE="ko"
            ).content.decode()
        )
        assert korean in page, (mcp_id, page[page.find('id="last-error"') :][:400])
        assert not _english_shown(page, mcp_id, "mcp"), _english_shown(page, mcp_id, "mcp")
    listing = client.get(reverse("servers:list"), HTTP_ACCEPT_LANGUAGE="ko").content.decode()
    assert "10초 안에 세션이 열리지 않았습니다" in html.unescape(listing)  # the health cell's title
    # The pre-step's own sentence at run time (the LLM still receives it in English).
    with translation.override("ko"):
        assert (
            engine_text("MCP 'crm' has no tool 'get_ordr'")
            == "MCP 서버 'crm'에 도구 'get_ordr'이(가) 없습니다"
        )
    with translation.override("en"):
        assert engine_text("MCP 'crm' has no tool 'get_ordr'") == "MCP 'crm' has no tool 'get_ordr'"


@pytest.mark.django_db
def test_numbers_in_korean_pages_are_grouped_as_the_locale_writes_them(
    viewer_client, orders_rule_set
) -> None:
    """A run's duration and a count of a thousand or more: digits grouped, in Korean as in English.
    Dates stay ISO (2026-12-02 06:15) in both languages, on purpose (docs/development.md)."""
    from agents.models import Run
    from tests.support.recorded_runs import record_run

    run = record_run(orders_rule_set, "주문 조회", snapshot=[])
    from datetime import timedelta

    from django.utils import timezone

    start = timezone.now() - timedelta(hours=1)
    Run.objects.filter(pk=run.pk).update(
        started_at=start, finished_at=start + timedelta(milliseconds=12345.6)
    )
    from rules.models import Rule

    Rule.objects.bulk_create(  # counts in plural sentences ("1,234 rules", "1,234 problems") and a table
        Rule(rule_set=orders_rule_set, name=f"r{i}", mcp_id="order-service", tool_name="nope", when="True")
        for i in range(1234)
    )
    for language in ("ko", "en"):
        home = viewer_client.get(reverse("home"), HTTP_ACCEPT_LANGUAGE=language).content.decode()
        sets = viewer_client.get(reverse("rules:list"), HTTP_ACCEPT_LANGUAGE=language).content.decode()
        assert "1,234" in home and "1234" not in home and "<td>1,234</td>" in sets, language
        runs = viewer_client.get(reverse("agents:run_list"), HTTP_ACCEPT_LANGUAGE=language).content.decode()
        assert "<td>12,346</td>" in runs, language
        detail = viewer_client.get(reverse("agents:run_detail", args=[run.pk]), HTTP_ACCEPT_LANGUAGE=language)
        assert "12,346" in detail.content.decode() and "12346" not in detail.content.decode(), language
    editor = viewer_client.get(reverse("rules:editor", args=[orders_rule_set.pk]), HTTP_ACCEPT_LANGUAGE="ko")
    shown = editor.content.decode()
    problems = re.search(r'class="bad">([^<]*)<', shown)  # in Korean: two problems a rule, no such tool
    assert problems and re.search(r"\d,\d{3}", problems[1]) and not re.search(r"\d{4}", problems[1]), problems


@pytest.mark.django_db
def test_a_runs_stored_mcp_error_reads_in_korean_and_keeps_the_seeds_prefix(client, make_user) -> None:
    from datetime import UTC, datetime

    from agents.models import Agent, Run, RunStep
    from llamon_agent.prestep import PRESTEP_FAILED

    reason = "MCP server 'crm', tool 'get_order': no answer within 30s; the request was cancelled"
    run = Run.objects.create(
        agent=Agent.objects.create(name="support"),
        query="주문 조회",
        status=Run.Status.FAILED,
        error=f"{PRESTEP_FAILED}: route_order_lookup: {reason}",
    )
    RunStep.objects.create(
        run=run,
        seq=1,
        kind="rule",
        name="route_order_lookup",
        status="error",
        started_at=datetime.now(UTC),
        error=reason,
    )
    client.force_login(make_user("viewer"))
    korean = "MCP 서버 'crm', 도구 'get_order': 30초 안에 응답이 없어 요청을 취소했습니다"
    page = html.unescape(
        client.get(reverse("agents:run_detail", args=[run.pk]), HTTP_ACCEPT_LANGUAGE="ko").content.decode()
    )
    assert f"{PRESTEP_FAILED}: route_order_lookup: " in page  # the seed's sentence, byte for byte
    steps = html.unescape(
        client.get(reverse("agents:run_steps", args=[run.pk]), HTTP_ACCEPT_LANGUAGE="ko").content.decode()
    )
    english = html.unescape(
        client.get(reverse("agents:run_steps", args=[run.pk]), HTTP_ACCEPT_LANGUAGE="en").content.decode()
    )
    assert reason in english and reason not in steps
    assert korean in page or korean in steps, (page[page.find('id="run-error"') :][:300], steps[:600])


@pytest.mark.django_db
def test_korean_pages_in_states_the_demo_never_reaches(client, make_user) -> None:
    """What the demo never shows, in Korean: every static check of a rule set (unknown and disabled
    server, missing tool, params that no longer fit, an unreachable and a repeated rule), a run
    step that failed on Python's TypeError (the engine's English, stored), and a 403 page. Each run
    of English words must be data; in English the same pages show the English (the check can fail)."""
    from django.utils import timezone

    from rules.models import Rule, RuleSet
    from servers.models import McpServer
    from tests.support.recorded_runs import record_run

    schema = {
        "type": "object",
        "properties": {"order_id": {"type": "string"}},
        "required": ["order_id"],
        "additionalProperties": False,
    }
    now = timezone.now()
    McpServer.objects.create(
        mcp_id="order-service",
        transport="http",
        url="http://127.0.0.1:9/mcp",
        tools=[{"name": "get_order", "input_schema": schema}],
        tools_refreshed_at=now,
    )
    McpServer.objects.create(
        mcp_id="off-service", transport="http", url="http://127.0.0.1:9/mcp", enabled=False
    )
    McpServer.objects.create(mcp_id="new-service", transport="http", url="http://127.0.0.1:9/mcp")
    rule_set = RuleSet.objects.create(name="checked")
    rules = [
        ("typed", "order-service", "get_order", '"주문" in ctx.context.get("n")', '{"order_id": "1"}', False),
        ("first_stop", "order-service", "get_order", "True", '{"order_id": "1"}', True),
        ("again", "order-service", "get_order", "True", '{"order_id": "1"}', False),
        ("unknown_server", "nowhere", "get_order", "True", "{}", False),
        ("disabled_server", "off-service", "get_order", "True", "{}", False),
        ("never_listed", "new-service", "get_order", "True", "{}", False),
        ("missing_tool", "order-service", "cancel_order", "True", "{}", False),
        ("misfit", "order-service", "get_order", "True", '{"limit": 5}', False),
    ]
    for position, (name, mcp_id, tool, when, params, stop) in enumerate(rules, start=1):
        Rule.objects.create(
            rule_set=rule_set,
            name=name,
            mcp_id=mcp_id,
            tool_name=tool,
            when=when,
            params=params,
            stop=stop,
            position=position,
        )
    from rules import engine

    run = record_run(rule_set, "주문 조회", context={"n": 5}, snapshot=engine.rule_set_snapshot(rule_set)[:1])
    assert run.steps.filter(status="error").exists()  # the engine's TypeError, stored as its English
    client.force_login(make_user("viewer"))
    pages = {
        "rule set": reverse("rules:editor", args=[rule_set.pk]),
        "run steps": reverse("agents:run_steps", args=[run.pk]),
    }
    allowed = {word.lower() for word in PRODUCT_NAMES | _data_words()}
    problems, silent = {}, []
    for what, url in pages.items():
        korean = client.get(url, HTTP_ACCEPT_LANGUAGE="ko")
        assert korean.status_code in (200, 286), (what, korean.status_code)  # 286: htmx, stop polling
        found = _english(_visible_strings(korean.content.decode()), allowed)
        if found:
            problems[what] = found
        if not _english(
            _visible_strings(client.get(url, HTTP_ACCEPT_LANGUAGE="en").content.decode()), allowed
        ):
            silent.append(what)
    refused = client.post(reverse("rules:cases", args=[rule_set.pk]), HTTP_ACCEPT_LANGUAGE="ko")
    assert refused.status_code == 403
    if found := _english(_visible_strings(refused.content.decode()), allowed):
        problems["403"] = found
    # A flash message: an admin saves a server nothing answers at (its tools cannot be listed).
    from tests.conftest import free_port
    from tests.support.mcp_servers import server_form

    client.force_login(make_user("admin"))
    url = f"http://127.0.0.1:{free_port()}/mcp"
    data = server_form(mcp_id="down", transport="http", url=url, command="", args="")
    saved = client.post(reverse("servers:create"), data, follow=True, HTTP_ACCEPT_LANGUAGE="ko")
    assert "down" in saved.content.decode() and 'id="messages"' in saved.content.decode()
    shown = [_LIBRARY_QUOTE.sub(" ", text) for text in _visible_strings(saved.content.decode())]
    if found := _english(shown, allowed | {"down", "s"}):  # s: seconds; a library's own words quoted
        problems["flash message"] = found
    assert not problems, problems
    assert not silent, f"the check finds no English on the English {silent}"
