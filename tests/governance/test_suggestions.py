"""Savings and rule suggestions over stored runs (governance.suggestions): hand counts, the job's
stages and parts, redelivery, drafts with cases, and the hostile inputs."""

from __future__ import annotations

import pytest

from agents.models import Agent
from agents.redaction import privacy_get
from core.models import AuditEvent
from governance import suggestions as service
from governance.errors import SuggestionError
from governance.models import SuggestionJob, SuggestionPart
from llamon_agent.suggest import Call, Observation, Turn
from llamon_agent.tools import AgentRequest
from rules.models import RuleSet, TestCase
from servers.models import McpServer
from tests.support.intent_runs import store
from tests.support.intents import INTENTS_LIST, generate

pytestmark = pytest.mark.django_db

# Six intents with a tool each (the model's inconsistency is estimated from five or more) and one
# that a rule already answers.
FEW = ("balance", "appointment", "claim_status", "claim_new", "fx_rate", "refund", "premium_profile")


@pytest.fixture
def agent(editor) -> Agent:
    servers = {}
    for intent in INTENTS_LIST:
        servers.setdefault(intent.mcp_id, []).append(
            {"name": intent.tool, "description": "", "input_schema": {}}
        )
    rule_set = RuleSet.objects.create(name="bank")
    agent = Agent.objects.create(
        name="bank-agent", system_prompt="p", rule_set=rule_set, model_name="gpt-test"
    )
    for mcp_id, tools in servers.items():
        server = McpServer.objects.create(
            mcp_id=mcp_id, transport="http", url="http://127.0.0.1:9/mcp", tools=tools
        )
        agent.react_servers.add(server)
    return agent


def _run(rid, query, *, model=(), rules=(), turns=()):
    return Observation(
        rid,
        AgentRequest(query=query, context={"userId": "u1"}),
        tuple(model),
        tuple(rules),
        tuple(turns),
        "v1",
    )


def test_savings_of_stored_runs_agree_with_a_hand_count(agent, settings):
    settings.LLAMON_MODEL_PRICES = '{"gpt-test": {"input": 1.0, "output": 2.0}}'
    get = Call("core-banking", "get_balance", {"customer_id": "u1"})
    store(
        [
            _run(1, "잔액", rules=[get], turns=[Turn(900, 1000, 50)]),  # saved
            _run(
                2,
                "잔액",
                rules=[get],
                model=[get],
                turns=[Turn(1000, 1200, 40, ("get_balance",)), Turn(700, 1300, 90)],
            ),
            _run(3, "잔액", model=[get], turns=[Turn(600, 800, 30, ("get_balance",)), Turn(500, 900, 80)]),
        ],
        agent,
    )
    out = service.agent_savings(agent=agent, days=1)
    total = out["total"]
    assert (out["runs_read"], total["with_prestep"], total["turns_saved"], total["recalled"]) == (3, 2, 1, 1)
    # One turn: median of the tool-choosing turns (1000, 600 ms; 1200, 800 in; 40, 30 out).
    assert total["turn"] == {"ms": 800.0, "input_tokens": 1000, "output_tokens": 35}
    assert total["cost_saved"] == "0.0011"  # (1000 * 1 + 35 * 2) / 1e6, rounded to 4 places
    assert total["advice"] == "system prompt에 “확정 호출 결과를 우선 사용” 명시"
    assert [v["version"] for v in out["versions"]] == ["v1"]


@pytest.mark.parametrize("days", ["0", "91", "x", None, "1e9", "-1"])
def test_a_bad_period_is_refused_with_its_field(agent, days):
    with pytest.raises(SuggestionError) as err:
        service.agent_savings(agent=agent, days=days)
    assert err.value.field == "days"


@pytest.mark.parametrize("precision", ["nan", "2", "0.1", "x", None, "inf"])
def test_a_bad_precision_is_refused_with_its_field(agent, editor, precision):
    store([_run(1, "x")], agent)
    with pytest.raises(SuggestionError) as err:
        service.suggestion_start(actor=editor, agent=agent, days=1, min_precision=precision, enqueue=False)
    assert err.value.field == "min_precision"
    assert not SuggestionJob.objects.exists()


def test_no_runs_no_job(agent, editor):
    with pytest.raises(SuggestionError):
        service.suggestion_start(actor=editor, agent=agent, days=1, enqueue=False)


def _drive(job: SuggestionJob, *, twice: bool = False) -> SuggestionJob:
    """Run every part of every stage here, as the workers would (each part twice: a redelivery)."""
    for stage in SuggestionJob.STAGES:
        job.refresh_from_db()
        if job.finished:
            break
        assert job.stage == stage
        for number in range(job.parts):
            service.suggestion_part(job_id=job.pk, stage=stage, number=number)
            if twice:
                service.suggestion_part(job_id=job.pk, stage=stage, number=number)
    job.refresh_from_db()
    return job


def test_a_job_in_parts_finds_the_intents_and_a_suggestion_becomes_a_draft_with_cases(agent, editor):
    observations, _truth = generate(1600, seed=5, only=FEW, noise=0.01)
    store(observations, agent)
    job = service.suggestion_start(actor=editor, agent=agent, days=1, enqueue=False, part_runs=400)
    assert job.parts == 4 and job.runs == 1600
    job = _drive(job, twice=True)
    assert job.status == "succeeded", job.error
    assert job.done == job.total == 12 and job.percent == 100
    assert SuggestionPart.objects.filter(job=job).count() == 12  # a redelivered part wrote nothing more
    result = job.result
    tools = {s["tool"] for s in result["suggestions"]}
    assert {"get_balance", "book_appointment", "get_claim"} <= tools, result["rejected"]
    assert "get_customer_profile" not in tools  # already called by a rule
    assert AuditEvent.objects.filter(action="suggestions.start").count() == 1

    index = next(i for i, s in enumerate(result["suggestions"]) if s["tool"] == "get_claim")
    made = service.suggestion_draft(actor=editor, job=job, index=index)
    rule = agent.rule_set.rules.get(pk=made["rule"])
    assert rule.tool_name == "get_claim" and "re_find(" in rule.params
    cases = TestCase.objects.filter(rule_set=agent.rule_set)
    assert cases.count() == len(made["cases"]) >= 2
    assert {c.other_calls for c in cases} == {"allow"}
    assert AuditEvent.objects.filter(action="rule.create").exists()
    assert AuditEvent.objects.filter(action="case.create").count() == cases.count()
    # The same suggestion again: a second rule under a new name, the cases not repeated.
    again = service.suggestion_draft(actor=editor, job=job, index=index)
    assert again["rule_name"] != made["rule_name"]


@pytest.mark.parametrize("index", [-1, 10_000, "x", None, "1; DROP TABLE"])
def test_a_draft_from_no_such_suggestion_is_refused(agent, editor, index):
    job = SuggestionJob.objects.create(
        agent=agent,
        days=1,
        since=agent.created_at,
        until=agent.created_at,
        status="succeeded",
        result={"suggestions": [], "rejected": []},
    )
    with pytest.raises(SuggestionError):
        service.suggestion_draft(actor=editor, job=job, index=index)


def test_suggestions_quote_only_masked_text(agent, editor, settings):
    privacy = privacy_get()
    privacy.mask_presets = ["kr_phone"]
    privacy.save()
    phone = "010-1234-5678"
    get = Call("core-banking", "get_balance", {"phone": phone})
    runs = [
        _run(
            i,
            f"잔액 알려줘 {phone}" if i % 2 else "안녕",
            model=[get] if i % 2 else [],
            turns=[Turn(900, 1000, 50, ("get_balance",) if i % 2 else ())],
        )
        for i in range(1, 301)
    ]
    store(runs, agent)
    job = _drive(service.suggestion_start(actor=editor, agent=agent, days=1, enqueue=False))
    assert job.status == "succeeded", job.error
    assert [s["tool"] for s in job.result["suggestions"]] == ["get_balance"], job.result
    assert phone not in str(job.result) and "5678" not in str(job.result)


def test_the_savings_page_shows_the_figures_to_a_viewer(viewer_client, agent):
    get = Call("core-banking", "get_balance", {"customer_id": "u1"})
    store(
        [
            _run(
                1,
                "잔액",
                rules=[get],
                model=[get],
                turns=[Turn(1000, 1200, 40, ("get_balance",)), Turn(700, 1300, 90)],
            )
        ],
        agent,
    )
    page = viewer_client.get(f"/governance/agents/{agent.pk}/savings/?days=3")
    assert page.status_code == 200
    text = page.content.decode()
    assert 'id="savings-recalled"' in text and "확정 호출 결과를 우선 사용" in text
    assert 'id="suggestions-form"' not in text  # viewers read, editors start


@pytest.mark.parametrize("days", ["0", "abc", "91", "9" * 50])
def test_a_bad_period_on_the_page_is_a_400_that_says_why(viewer_client, agent, days):
    page = viewer_client.get(f"/governance/agents/{agent.pk}/savings/", {"days": days})
    assert page.status_code == 400
    assert 'id="savings-error"' in page.content.decode()


def test_a_viewer_cannot_start_a_job_or_draft_a_rule(viewer_client, agent):
    assert (
        viewer_client.post(f"/governance/agents/{agent.pk}/suggestions/start", {"days": 1}).status_code == 403
    )
    assert viewer_client.post("/governance/suggestions/1/0/draft").status_code == 403


def test_an_editor_starts_a_job_and_the_page_shows_its_progress(editor_client, agent):
    store([_run(i, "잔액") for i in range(1, 4)], agent)
    answer = editor_client.post(
        f"/governance/agents/{agent.pk}/suggestions/start", {"days": 1, "min_precision": "0.99"}
    )
    assert answer.status_code == 302
    job = SuggestionJob.objects.get()
    assert (job.parts, job.runs, job.status) == (1, 3, "queued")
    page = editor_client.get(f"/governance/agents/{agent.pk}/savings/").content.decode()
    assert 'id="suggestions-progress"' in page and f"/governance/suggestions/{job.pk}/progress" in page
    bad = editor_client.post(
        f"/governance/agents/{agent.pk}/suggestions/start", {"days": 1, "min_precision": "nan"}
    )
    assert bad.status_code == 400 and SuggestionJob.objects.count() == 1
