"""A masked card number and e-mail stay hidden when a tool echoes them in pieces (issue #27, part 3).

The demo agent on a real Celery worker, the demo knowledge-base server over stdio and the offline
model: the search tool echoes the query term by term ("4111", "1111", ..., "kim", "example",
"com"), the model's conversation and the answer are built from that. With the card and e-mail
presets on, a viewer finds neither value in any form on the run's pages, in the API or in the
OTel spans the worker exported (message content captured).
"""

from __future__ import annotations

import html
import json
import re
import time

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from agents import services
from agents.models import Agent, Run
from agents.redaction import privacy_get
from llamon_agent.guardrails import DASH_CHARS, INVISIBLE_CHARS, JSON_PUNCTUATION
from llamon_agent.tools import AgentRequest
from tests.conftest import celery_worker
from tests.support.otlp_receiver import start_receiver
from tests.support.runs import wait_for_run

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

PAN = "4111111111111111"
EMAIL_TOKENS = ["kim", "example", "com"]
QUERY = "카드 4111 1111 1111 1111 결제 내역 검색해줘 (Kim@Example.com)"
_TAG = re.compile(r"<[^>]+>")
_ESCAPE = re.compile(r"\\u[0-9a-fA-F]{4}|\\[nrtbf\\/\"]")
_SKIPPED = re.compile("[\\s" + re.escape(INVISIBLE_CHARS + DASH_CHARS + JSON_PUNCTUATION) + "]+")


def readable(text: str) -> list[str]:
    """Where ``text`` lets a reader put the card number or the e-mail back together."""
    forms = [text, html.unescape(_TAG.sub(" ", text))]
    forms += [_ESCAPE.sub(lambda m: json.loads(f'"{m.group()}"'), form) for form in forms]
    found = []
    for form in forms:
        if PAN in _SKIPPED.sub("", form):
            found.append("card number")
        tokens = [t.casefold() for t in re.findall(r"[^\W_]+", form)]
        if any(tokens[i : i + 3] == EMAIL_TOKENS for i in range(len(tokens))):
            found.append("e-mail")
    return found


def test_a_card_number_and_an_email_echoed_in_pieces_are_hidden_everywhere(
    redis_publisher, monkeypatch, make_user
) -> None:
    receiver, server = start_receiver()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    call_command("load_demo", "--no-runs", verbosity=0)
    privacy = privacy_get()
    privacy.mask_presets = ["card_number", "email"]
    privacy.save()
    agent = Agent.objects.get(name="seed-demo")
    try:
        with celery_worker(redis_publisher) as (_, output):
            run = services.run_create(actor=None, agent=agent, request=AgentRequest(query=QUERY, context={}))
            run = wait_for_run(run.pk)
            assert run.status == Run.Status.SUCCEEDED, (run.error, output.text()[-2000:])
            deadline = time.monotonic() + 60
            while not any(s.attributes.get("llamon.run.id") == str(run.pk) for s in receiver.spans):
                assert time.monotonic() < deadline, "no root span arrived"
                time.sleep(0.1)
    finally:
        server.shutdown()
        server.server_close()

    # The tool really echoed the pieces, and they were stored masked in their place.
    rule = run.steps.get(kind="rule")
    assert rule.tool_name == "search_docs"
    terms = rule.output["terms"]
    assert terms.count("[카드번호]") == 4 and terms.count("[이메일]") == 3, terms

    viewer = Client()
    viewer.force_login(make_user("viewer", "viewer-masking"))
    shown: dict[str, str] = {}
    for url in (
        reverse("agents:run_detail", args=[run.pk]),
        reverse("agents:run_steps", args=[run.pk]),
        reverse("agents:run_list"),
        f"/api/runs/{run.pk}",
        f"/api/runs/{run.pk}/steps",
        "/api/runs",
    ):
        response = viewer.get(url)
        assert response.status_code in (200, 286), url  # 286: the steps poll of an ended run
        shown[url] = response.content.decode()
    stored = [json.dumps([s.input, s.output, s.error], ensure_ascii=False) for s in run.steps.all()]
    spans = [
        json.dumps([s.name, s.attributes, s.status_message], ensure_ascii=False)
        for s in receiver.spans
        if s.trace_id
        in {r.trace_id for r in receiver.spans if r.attributes.get("llamon.run.id") == str(run.pk)}
    ]
    assert any("llamon.output" in span for span in spans)  # content was exported, masked
    leaks: dict[str, list[str]] = {url: readable(text) for url, text in shown.items()}
    leaks["stored steps"] = [found for text in stored for found in readable(text)]
    leaks["answer"] = readable(run.answer)
    leaks["otel spans"] = [found for text in spans for found in readable(text)]
    assert not any(leaks.values()), leaks
    assert "[카드번호]" in shown[reverse("agents:run_detail", args=[run.pk])]
