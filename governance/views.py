"""Impact analysis, rule health, savings and suggestions pages. Views authorize, validate, call one service or selector, render."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import HttpResponseClientRefresh

from accounts.roles import has_role, require_role
from agents.errors import BrokerUnavailableError
from agents.models import Agent, ChangeRequest
from core.http import HtmxHttpRequest
from governance import rule_health as health
from governance import selectors, services, suggestions
from governance.errors import HealthError, ImpactError, SuggestionError
from governance.forms import ImpactForm
from governance.models import ImpactAnalysis, SuggestionJob
from rules.errors import RuleError
from rules.models import RuleSet


@require_GET
@require_role("viewer")
def impact_new(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """The form (editors start an analysis) and the rule set's recent analyses (everyone reads them)."""
    rule_set = get_object_or_404(RuleSet, pk=pk)
    return _form_page(request, rule_set, _form(request, rule_set), status=200)


@require_POST
@require_role("editor")
def impact_start(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Start an analysis on a worker; refusals keep the input and say why."""
    rule_set = get_object_or_404(RuleSet, pk=pk)
    form = _form(request, rule_set)
    status = 400
    if form.is_valid():
        try:
            analysis = services.impact_start(actor=request.user, rule_set=rule_set, **form.cleaned_data)
        except ImpactError as exc:
            form.add_error(exc.field if exc.field in form.fields else None, exc.message)
        except BrokerUnavailableError as exc:
            form.add_error(None, exc.message)
            status = 503
        else:
            return redirect("governance:impact_detail", pk=analysis.pk)
    return _form_page(request, rule_set, form, status=status)


def _form(request: HtmxHttpRequest, rule_set: RuleSet) -> ImpactForm:
    agents = list(Agent.objects.order_by("name").values_list("name", flat=True)[:500])
    return ImpactForm(request.POST or None, rule_set=rule_set, agent_names=agents)


def _form_page(request: HtmxHttpRequest, rule_set: RuleSet, form: ImpactForm, *, status: int) -> HttpResponse:
    context = {
        "rule_set": rule_set,
        "form": form,
        "can_edit": has_role(request.user, "editor"),
        "analyses": selectors.analysis_list(rule_set=rule_set),
    }
    return render(request, "governance/impact_new.html", context, status=status)


@require_GET
@require_role("viewer")
def impact_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """One analysis: its progress while it runs, then the report (a shareable URL)."""
    analysis = get_object_or_404(ImpactAnalysis.objects.select_related("rule_set", "created_by"), pk=pk)
    return render(request, "governance/impact_detail.html", {"analysis": analysis})


@require_GET
@require_role("viewer")
def impact_report(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """An analysis's progress and report alone: what a change request's page embeds."""
    analysis = get_object_or_404(ImpactAnalysis.objects.select_related("rule_set", "created_by"), pk=pk)
    return render(request, "governance/impact_detail.html#impact-report", {"analysis": analysis})


@require_POST
@require_role("viewer")
def change_impact(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Run the impact analysis of what a change request would serve, from the request's page (an
    approver who is a viewer included); the page then shows it."""
    change = get_object_or_404(ChangeRequest, pk=pk)
    try:
        analysis = services.change_impact_start(actor=request.user, change_request=change)
    except (ImpactError, BrokerUnavailableError) as exc:
        messages.error(request, exc.message)
        return redirect("agents:change_detail", pk=pk)
    except PermissionDenied as exc:  # a viewer without the approver permission: the page says why
        messages.error(request, str(exc))
        return redirect("agents:change_detail", pk=pk)
    return redirect(f"{reverse('agents:change_detail', args=[pk])}?impact={analysis.pk}#change-impact-report")


@require_GET
@require_role("viewer")
def impact_progress(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """The progress bar (polled); once the analysis has ended the page reloads to show the report."""
    analysis = get_object_or_404(ImpactAnalysis.objects.defer("snapshot", "result"), pk=pk)
    if analysis.finished and request.htmx:
        return HttpResponseClientRefresh()
    return render(request, "governance/impact_detail.html#impact-progress", {"analysis": analysis})


@require_GET
@require_role("viewer")
def rule_health(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Coverage and health per rule over the last N days (``?days=``, 1 to 90); a bad N says why (400)."""
    rule_set = get_object_or_404(RuleSet, pk=pk)
    raw = request.GET.get("days", str(health.DEFAULT_DAYS))
    try:
        days = health.health_days(raw)
    except HealthError as exc:
        context = {
            "rule_set": rule_set,
            "error": exc.message,
            "days": health.DEFAULT_DAYS,
            "max_days": health.MAX_DAYS,
        }
        return render(request, "governance/rule_health.html", context, status=400)
    report = health.rule_set_health(rule_set=rule_set, days=days)
    context = {
        "rule_set": rule_set,
        "report": report,
        "days": days,
        "max_days": health.MAX_DAYS,
        "sample": health.SAMPLE_PER_RULE,
    }
    return render(request, "governance/rule_health.html", context)


# --- Savings and suggestions ----------------------------------------------------------------------


def _savings_page(
    request: HtmxHttpRequest, agent: Agent, *, status: int = 200, error: str = ""
) -> HttpResponse:
    raw = request.GET.get("days", str(suggestions.DEFAULT_DAYS))
    try:
        report = suggestions.agent_savings(agent=agent, days=raw)
    except SuggestionError as exc:
        report, error, status = None, exc.message, 400
    job = selectors.suggestion_job_latest(agent=agent)
    context = {
        "agent": agent,
        "report": report,
        "days": raw if report is None else report["days"],
        "max_days": suggestions.MAX_DAYS,
        "error": error,
        "job": job,
        "rejected": [
            (r, suggestions.rejected_reason(r))
            for r in ((job.result or {}).get("rejected") or [] if job else [])
        ],
        "can_edit": has_role(request.user, "editor"),
    }
    return render(request, "governance/savings.html", context, status=status)


@require_GET
@require_role("viewer")
def agent_savings(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """What the pre-step saved for one agent (``?days=``, 1 to 90), and its latest rule suggestions."""
    return _savings_page(request, get_object_or_404(Agent, pk=pk))


@require_POST
@require_role("editor")
def suggestions_start(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Start mining the agent's runs on the workers; refusals say why on the page."""
    agent = get_object_or_404(Agent, pk=pk)
    try:
        suggestions.suggestion_start(
            actor=request.user,
            agent=agent,
            days=request.POST.get("days", suggestions.DEFAULT_DAYS),
            min_precision=request.POST.get("min_precision", "0.99"),
        )
    except SuggestionError as exc:
        return _savings_page(request, agent, status=400, error=exc.message)
    except BrokerUnavailableError as exc:
        return _savings_page(request, agent, status=503, error=exc.message)
    return redirect(f"{reverse('governance:agent_savings', args=[pk])}#suggestions")


@require_GET
@require_role("viewer")
def suggestions_progress(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """The mining job's progress bar (polled); once it has ended the page reloads to show the result."""
    job = get_object_or_404(SuggestionJob.objects.defer("state", "result"), pk=pk)
    if job.finished and request.htmx:
        return HttpResponseClientRefresh()
    return render(request, "governance/savings.html#suggestions-progress", {"job": job})


@require_POST
@require_role("editor")
def suggestion_draft(request: HtmxHttpRequest, pk: int, index: int) -> HttpResponse:
    """Turn one suggestion into a draft rule with its cases; then the rule set's page shows it."""
    job = get_object_or_404(SuggestionJob.objects.select_related("agent"), pk=pk)
    try:
        made = suggestions.suggestion_draft(actor=request.user, job=job, index=index)
    except (SuggestionError, RuleError) as exc:
        messages.error(request, exc.message)
        return redirect(f"{reverse('governance:agent_savings', args=[job.agent_id])}#suggestions")
    messages.success(
        request,
        _("Rule %(name)s was added to the draft with %(cases)d cases: test it, replay it, then publish it.")
        % {"name": made["rule_name"], "cases": len(made["cases"])},
    )
    return redirect("rules:editor", pk=job.agent.rule_set_id)
