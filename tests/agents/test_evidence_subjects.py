"""Evidence per subject: runs found and exported by any context or DataPart key=value
(``patientId=P-2002``) on the page, the REST API, the MCP endpoint and the exports; the filter's
rows covered by the chain; every hostile value refused naming the field, in English and Korean."""

from __future__ import annotations

import csv
import io
import json
from datetime import timedelta

import pytest
from django.apps import apps as django_apps
from django.db import connection
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounts.token_services import token_create
from agents import services
from agents.models import Agent, Run, RunSubject
from core.chain import chain_verify

pytestmark = pytest.mark.django_db


def _run(agent: Agent, *, context: dict | None = None, data: list | None = None, minutes_ago: int = 0) -> Run:
    run = Run.objects.create(
        agent=agent,
        agent_name=agent.name,
        query="진료 기록 조회",
        status=Run.Status.RUNNING,
        context=context or {},
        a2a_data=data,
    )
    if minutes_ago:
        Run.objects.filter(pk=run.pk).update(created_at=timezone.now() - timedelta(minutes=minutes_ago))
    services.run_finish(run_id=run.pk, status=Run.Status.SUCCEEDED, answer="ok")
    return run


@pytest.fixture
def patients(agent) -> dict[str, Run]:
    return {
        "ctx": _run(agent, context={"patientId": "P-2002", "ward": 7}, minutes_ago=3),
        "part": _run(agent, data=[{"kind": "chart"}, {"patientId": "P-2002"}], minutes_ago=2),
        "nested": _run(agent, data=[{"patient": {"id": "P-2002"}}], minutes_ago=1),
        "other": _run(agent, context={"patientId": "P-3003"}),
    }


@pytest.fixture
def api(make_user) -> tuple[Client, dict[str, str]]:
    return Client(), {"Authorization": f"Bearer {token_create(actor=make_user('viewer'), name='t').secret}"}


def _link(run: Run) -> str:
    return f'href="{reverse("agents:run_detail", args=[run.pk])}"'


def _ids(items) -> list[int]:
    return [item["id"] for item in items]


def test_runs_are_found_by_a_context_or_a_dataPart_key_on_the_page_and_the_api(viewer_client, api, patients):
    client, headers = api
    assert _ids(client.get("/api/runs?subject=patientId=P-2002", headers=headers).json()["items"]) == [
        patients["part"].pk,
        patients["ctx"].pk,
    ]
    assert _ids(client.get("/api/runs?subject=patient.id=P-2002", headers=headers).json()["items"]) == [
        patients["nested"].pk
    ]
    assert _ids(client.get("/api/runs?subject=ward=7", headers=headers).json()["items"]) == [
        patients["ctx"].pk
    ]
    assert client.get("/api/runs?subject=patientId=P-9", headers=headers).json()["items"] == []
    page = viewer_client.get(reverse("agents:run_list") + "?subject=patientId%3DP-3003")
    assert page.status_code == 200
    shown = page.content.decode()
    assert _link(patients["other"]) in shown and _link(patients["ctx"]) not in shown


def test_keyset_pages_of_a_subject_hold_every_run_once(api, agent):
    client, headers = api
    made = [_run(agent, context={"patientId": "P-1"}, minutes_ago=10 - i) for i in range(5)]
    _run(agent, context={"patientId": "P-2"})
    seen, cursor = [], ""
    while True:
        body = client.get(f"/api/runs?subject=patientId=P-1&limit=2&cursor={cursor}", headers=headers).json()
        seen += _ids(body["items"])
        if not body["next_cursor"]:
            break
        cursor = body["next_cursor"]
    assert seen == [run.pk for run in reversed(made)]
    assert client.get("/api/runs?subject=patientId=P-1", headers=headers).json()["count"] == 5


def test_the_exports_hold_the_subjects_runs_and_the_manifest_records_the_filter(viewer_client, patients):
    url = reverse("agents:run_export") + "?subject=patientId%3DP-2002&format="
    text = b"".join(viewer_client.get(url + "csv").streaming_content).decode("utf-8-sig")
    rows = list(csv.reader(io.StringIO(text)))
    manifest = json.loads(rows[-1][1])
    assert manifest["filters"]["subject"] == "patientId=P-2002"
    assert [entry[0] for entry in manifest["index"]] == [patients["part"].pk, patients["ctx"].pk]
    lines = b"".join(viewer_client.get(url + "jsonl").streaming_content).decode().splitlines()
    first, last = json.loads(lines[0]), json.loads(lines[-1])
    assert first["filters"]["subject"] == last["filters"]["subject"] == "patientId=P-2002"
    assert [json.loads(line)["run"] for line in lines if '"type":"run"' in line] == [
        patients["part"].pk,
        patients["ctx"].pk,
    ]


def _rpc(client: Client, headers: dict[str, str], name: str, arguments: dict) -> dict:
    body = json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
    )
    response = client.post("/api/mcp", data=body, content_type="application/json", headers=headers)
    return response.json()["result"]


def test_the_mcp_endpoint_lists_and_exports_a_subjects_runs(api, patients):
    client, headers = api
    headers = {**headers, "Accept": "application/json, text/event-stream"}
    listed = _rpc(client, headers, "list_runs", {"filters": {"subject": "patientId=P-2002"}})
    assert not listed.get("isError"), listed
    assert _ids(listed["structuredContent"]["items"]) == [patients["part"].pk, patients["ctx"].pk]
    exported = _rpc(
        client, headers, "export_runs", {"filters": {"subject": "patientId=P-3003", "format": "jsonl"}}
    )
    lines = exported["structuredContent"]["text"].splitlines()
    assert json.loads(lines[-1])["filters"]["subject"] == "patientId=P-3003"
    refused = _rpc(client, headers, "list_runs", {"filters": {"subject": "patientId"}})
    assert refused["isError"] and "key=value" in refused["content"][0]["text"]


HOSTILE = {
    "no equals sign": ("patientId", "key=value"),
    "no key": ("=P-2002", "needs a key"),
    "no value": ("patientId=", "needs a value"),
    "a space in the key": ("patient id=P-1", "may hold only"),
    "an operator in the key": ("patientId'--=P-1", "may hold only"),
    "a key too long": ("k" * 65 + "=P-1", "the limit is 64"),
    "a value too long": ("patientId=" + "9" * 201, "the limit is 200"),
    "the whole too long": ("patientId=" + "9" * 400, "the limit is 265"),
    "a NUL": ("patientId=P-\x002002", "control or invisible"),
    "a zero-width space": ("patientId=P-\u200b2002", "control or invisible"),
    "a newline": ("patientId=P-2002\nx", "control or invisible"),
    "a trailing space": ("patientId=P-2002 ", "starts or ends with a space"),
}


@pytest.mark.parametrize("case", list(HOSTILE), ids=list(HOSTILE))
def test_a_hostile_subject_is_refused_naming_the_field_on_every_route(viewer_client, api, patients, case):
    value, reason = HOSTILE[case]
    client, headers = api
    answer = client.get("/api/runs", {"subject": value}, headers=headers)
    if "\x00" in value:  # refused before any operation reads it (400), the parameter named
        assert answer.status_code == 400 and answer.json()["detail"].startswith("subject: "), answer.content
    else:
        assert answer.status_code == 422 and answer.json()["field"] == "subject", answer.content
        assert reason in answer.json()["detail"]
    assert client.get("/api/runs/export", {"subject": value}, headers=headers).status_code in (400, 422)
    page = viewer_client.get(reverse("agents:run_list"), {"subject": value})
    if "\x00" in value:
        assert page.status_code == 400 and b"subject" in page.content
    else:
        assert page.status_code == 422 and "filter-errors" in page.content.decode()
    assert _link(patients["ctx"]) not in page.content.decode()  # not every run instead
    export = viewer_client.get(reverse("agents:run_export"), {"subject": value, "format": "csv"})
    assert export.status_code == 400


def test_the_refusal_is_in_korean_for_a_korean_reader(viewer_client, api):
    client, headers = api
    answer = client.get("/api/runs", {"subject": "patientId"}, headers={**headers, "Accept-Language": "ko"})
    assert answer.status_code == 422 and "key=value" in answer.json()["detail"]
    assert "형식" in answer.json()["detail"]
    page = viewer_client.get(reverse("agents:run_list"), {"subject": "a b=c"}, HTTP_ACCEPT_LANGUAGE="ko")
    assert "만 쓸 수 있습니다" in page.content.decode()


def test_a_value_the_masks_hide_finds_nothing(api, agent):
    services.privacy_update(actor=None, redaction_patterns=[], mask_presets=["email"], retention_days=30)
    _run(agent, context={"email": "kim@example.com"})
    client, headers = api
    assert client.get("/api/runs?subject=email=kim@example.com", headers=headers).json()["items"] == []


def _sql(statement: str, *params: object) -> None:
    with connection.cursor() as cursor:
        cursor.execute(statement, params)


EDITS = {
    "a row's value edited": "UPDATE agents_runsubject SET value = 'P-9999' WHERE run_id = %s",
    "a row deleted": "DELETE FROM agents_runsubject WHERE run_id = %s AND key = 'patientId'",
    "a row backdated": "UPDATE agents_runsubject SET created_at = '2020-01-01 00:00:00' WHERE run_id = %s",
    "a row added": "INSERT INTO agents_runsubject (run_id, key, value, created_at) "
    "SELECT id, 'patientId', 'P-7777', created_at FROM agents_run WHERE id = %s",
}


@pytest.mark.parametrize("edit", list(EDITS), ids=list(EDITS))
def test_a_raw_edit_of_the_filters_rows_is_found_and_names_the_run(patients, edit):
    assert chain_verify().ok
    _sql(EDITS[edit], patients["ctx"].pk)
    verdict = chain_verify()
    assert not verdict.ok and f"run {patients['ctx'].pk} (link #" in verdict.detail, verdict.detail


def test_the_backfill_writes_the_rows_of_runs_that_ended_before(patients):
    from importlib import import_module

    backfill = import_module("agents.migrations.0023_run_subjects_backfill").backfill
    before = sorted(RunSubject.objects.values_list("run_id", "key", "value"))
    RunSubject.objects.all().delete()
    assert not chain_verify().ok  # the rows are covered: without them the runs do not verify
    backfill(django_apps, None)
    assert sorted(RunSubject.objects.values_list("run_id", "key", "value")) == before
    assert chain_verify().ok
