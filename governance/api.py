"""The governance app's API: impact analyses, rule health, savings and rule suggestions.

Handlers authorize, validate (a schema), make one service or selector call and return. Domain
errors become ErrorOut responses in llamon_web.api (ImpactError 422, a broker that is down 503).
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.urls import reverse
from ninja import Router, Status

from accounts.api_auth import roles
from agents.models import Agent
from core.api import DbId, error_responses, get_or_404
from governance import rule_health, services, suggestions
from governance.models import ImpactAnalysis, SuggestionJob
from governance.schemas import (
    ImpactIn,
    ImpactOut,
    RuleSetHealthOut,
    SavingsOut,
    SuggestionDraftOut,
    SuggestionJobOut,
    SuggestionsIn,
)
from rules.models import RuleSet

router = Router(tags=["impact analysis"])


def _out(analysis: ImpactAnalysis) -> ImpactAnalysis:
    analysis.url = reverse(
        "governance:impact_detail", args=[analysis.pk]
    )  # an extra attribute for the schema (attr-defined is off for this module: request.auth)
    return analysis


@router.post(
    "/rule-sets/{rule_set_id}/impact",
    response={202: ImpactOut, **error_responses(404, 503)},
    auth=roles("editor"),
)
def start_impact(request: HttpRequest, rule_set_id: DbId, payload: ImpactIn) -> Any:
    """Start an impact analysis of the draft or a version on a worker (editor); poll it by ``id``."""
    rule_set = get_or_404(RuleSet, "rule set", pk=rule_set_id)
    analysis = services.impact_start(actor=request.auth, rule_set=rule_set, **payload.dict())
    return Status(202, _out(analysis))


@router.get("/impact/{analysis_id}", response={200: ImpactOut, **error_responses(404)}, auth=roles("viewer"))
def get_impact(request: HttpRequest, analysis_id: DbId) -> Any:
    """One analysis: ``status`` and ``done``/``total`` while it runs, ``result`` once it has succeeded."""
    return _out(get_or_404(ImpactAnalysis, "impact analysis", pk=analysis_id))


@router.get(
    "/rule-sets/{rule_set_id}/health",
    response={200: RuleSetHealthOut, **error_responses(404)},
    auth=roles("viewer"),
    tags=["rule health"],
)
def get_rule_health(request: HttpRequest, rule_set_id: DbId, days: int = rule_health.DEFAULT_DAYS) -> Any:
    """Coverage and health per rule over the last ``days`` days (1 to 90; default 14)."""
    rule_set = get_or_404(RuleSet, "rule set", pk=rule_set_id)
    return rule_health.rule_set_health(rule_set=rule_set, days=days).to_json()


def _job_out(job: SuggestionJob) -> SuggestionJob:
    job.url = reverse("governance:agent_savings", args=[job.agent_id]) + "#suggestions"
    return job


@router.get(
    "/agents/{agent_id}/savings",
    response={200: SavingsOut, **error_responses(404)},
    auth=roles("viewer"),
    tags=["savings and suggestions"],
)
def get_agent_savings(request: HttpRequest, agent_id: DbId, days: int = suggestions.DEFAULT_DAYS) -> Any:
    """What the pre-step saved for an agent over the last ``days`` days (1 to 90), overall and per version."""
    agent = get_or_404(Agent, "agent", pk=agent_id)
    return suggestions.agent_savings(agent=agent, days=days)


@router.post(
    "/agents/{agent_id}/suggestions",
    response={202: SuggestionJobOut, **error_responses(404, 503)},
    auth=roles("editor"),
    tags=["savings and suggestions"],
)
def start_suggestions(request: HttpRequest, agent_id: DbId, payload: SuggestionsIn) -> Any:
    """Mine the agent's runs for rules on the workers (editor); poll the job by ``id``."""
    agent = get_or_404(Agent, "agent", pk=agent_id)
    job = suggestions.suggestion_start(actor=request.auth, agent=agent, **payload.dict())
    return Status(202, _job_out(job))


@router.get(
    "/suggestions/{job_id}",
    response={200: SuggestionJobOut, **error_responses(404)},
    auth=roles("viewer"),
    tags=["savings and suggestions"],
)
def get_suggestions(request: HttpRequest, job_id: DbId) -> Any:
    """One mining job: ``status`` and ``done``/``total`` parts while it runs, ``result`` once it has succeeded."""
    return _job_out(get_or_404(SuggestionJob, "suggestion job", pk=job_id))


@router.post(
    "/suggestions/{job_id}/{index}/draft",
    response={201: SuggestionDraftOut, **error_responses(404)},
    auth=roles("editor"),
    tags=["savings and suggestions"],
)
def draft_suggestion(request: HttpRequest, job_id: DbId, index: int) -> Any:
    """Add suggestion ``index`` (0-based) to the agent's rule set draft with its cases (editor; audited)."""
    job = get_or_404(SuggestionJob, "suggestion job", pk=job_id)
    return Status(201, suggestions.suggestion_draft(actor=request.auth, job=job, index=index))
