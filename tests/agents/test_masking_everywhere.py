"""No disguised personal value reaches a viewer: pages, API, exports, the report, OTel spans (issue #40, point 6).

Generated runs: each carries seeded values (주민등록번호, 외국인등록번호, phones, accounts, cards,
e-mails, passports), disguised and split across JSON (tests/support/disguise.py), in its query,
context, DataParts and in what a tool returned. The run is recorded through the service every
ingested run goes through (its steps stored through the redactor), the privacy settings are the
presets of a new install, and a viewer reads every route that shows a run; the run's steps are
also exported through the OTel sink the worker builds, to a real OTLP/HTTP receiver.
"""

from __future__ import annotations

import json
import time

import pytest
from django.test import Client
from django.urls import reverse
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from agents import services
from agents.models import PrivacySettings
from agents.redaction import run_redactor
from llamon_agent.guardrails import MASK_PRESETS
from llamon_agent.otel import otel_sink, shutdown_tracer_provider
from llamon_agent.tools import AgentRequest
from llamon_agent.trace import TraceEvent
from tests.support.disguise import LEAF_KEYS, disguised, leaks, placed, seeded, values_text
from tests.support.otlp_receiver import start_receiver

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(300)]

# The words the generator puts between pieces (keys), which a reader skips.
KEYS = tuple(f"{key}{chr(ord('a') + i)}" for key in LEAF_KEYS for i in range(4)) + ("조각", "정보", "고객")


@st.composite
def runs(draw):
    values = []
    for _ in range(draw(st.integers(4, 8))):
        value = draw(seeded())
        values.append((value, draw(placed(value, draw(disguised(value))))))
    return values


def _events(values) -> list[TraceEvent]:
    start = time.time()
    return [
        TraceEvent(
            id=f"t{i}",
            kind="tool",
            name="lookup_customer",
            phase="end",
            start=start,
            duration_ms=1.0,
            status="ok",
            input={"query": values_text(data)},
            output={"result": data, "text": json.dumps(data, ensure_ascii=False)},
        )
        for i, (_, data) in enumerate(values)
    ]


@settings(max_examples=3, deadline=None, phases=[Phase.generate], suppress_health_check=list(HealthCheck))
@given(values=runs())
def test_no_seeded_value_reaches_a_viewer_anywhere(values, make_user, monkeypatch) -> None:
    PrivacySettings.objects.update_or_create(pk=1, defaults={"mask_presets": list(MASK_PRESETS)})
    texts = [d for _, d in values if isinstance(d, str)]
    request = AgentRequest(
        query=" / ".join(texts) or "고객 조회",
        context={f"c{i}": data for i, (_, data) in enumerate(values)},
        a2a_data=[{"data": data} for _, data in values],
    )
    run, _ = services.run_ingest(
        credential=services.ingest_credential_issue(actor=None, agent_name="masking-everywhere")[0],
        run=None,
        events=_events(values),
        request=request,
        finish={"status": "succeeded", "answer": " ".join(values_text(d) for _, d in values)},
    )
    assert run.steps.count() == len(values)

    receiver, server = start_receiver()
    try:
        environ = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_BSP_SCHEDULE_DELAY": "50"}
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)  # the exporter reads it
        sink = otel_sink(
            agent_name="masking-everywhere", run_id=run.pk, redact=run_redactor(run), environ=environ
        )
        assert sink is not None
        sink._capture = True  # as OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true
        for event in _events(values):
            sink.emit(event)
        sink.finish("succeeded")
        shutdown_tracer_provider()
        spans = [json.dumps([s.name, s.attributes], ensure_ascii=False) for s in receiver.spans]
    finally:
        server.shutdown()
        server.server_close()
    assert sum("llamon.output" in span for span in spans) == len(values)

    viewer = Client()
    viewer.force_login(make_user("viewer", f"viewer-{run.pk}"))
    shown = {"otel spans": "\n".join(spans)}
    for url in (
        reverse("agents:run_detail", args=[run.pk]),
        reverse("agents:run_steps", args=[run.pk]),
        reverse("agents:run_list"),
        f"/api/runs/{run.pk}",
        f"/api/runs/{run.pk}/steps",
        "/api/runs",
        reverse("agents:run_export") + "?format=csv",
        reverse("agents:run_export") + "?format=jsonl",
        reverse("agents:run_evidence"),
    ):
        response = viewer.get(url)
        assert response.status_code in (200, 286), url
        body = b"".join(response.streaming_content) if response.streaming else response.content
        shown[url] = body.decode()
    assert str(run.pk) in shown[reverse("agents:run_export") + "?format=jsonl"]
    stored = [json.dumps([s.input, s.output], ensure_ascii=False) for s in run.steps.all()]
    shown["stored steps"] = "\n".join(stored)
    found = {
        where: [value.kind for value, _ in values if leaks(value, text, KEYS)]
        for where, text in shown.items()
    }
    assert not any(found.values()), found
