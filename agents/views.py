"""Pages for agents and runs. Views authorize, validate, call one service or selector, render."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse, JsonResponse
from django.http.response import HttpResponseBase
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import HttpResponseStopPolling

from accounts.roles import has_role, is_approver, require_role
from agents import selectors, services
from agents import trace_view as traces
from agents.checks import agent_model_problem
from agents.compare import COMPARE_STEPS, compare_runs
from agents.errors import AgentError, BrokerUnavailableError, ChangeRequested
from agents.evidence_rows import FORMATS, evidence_report, evidence_response
from agents.forms import (
    AgentForm,
    ModelConnectionForm,
    PrivacyForm,
    ProtectForm,
    ReviewForm,
    RolloutForm,
    RunFilterForm,
    RunStartForm,
    ShadowForm,
    StagedPublishForm,
)
from agents.graph_svg import flow_graph
from agents.models import Agent, ChangeRequest, ModelConnection, Run
from agents.redaction import privacy_get
from core.chain import chain_last_check
from core.http import HtmxHttpRequest
from core.userinput import db_id, typed_count
from rules.errors import RuleError
from rules.tester import tester_inputs_put

# --- Agents -------------------------------------------------------------------------------------


@require_GET
@require_role("viewer")
def agent_list(request: HtmxHttpRequest) -> HttpResponse:
    agents = list(selectors.agent_list())
    for agent in agents:
        agent.model_problem = agent_model_problem(agent)  # type: ignore[attr-defined]
    return render(request, "agents/agent_list.html", {"agents": agents})


@require_http_methods(["GET", "POST"])
@require_role("editor")
def agent_edit(request: HtmxHttpRequest, pk: int | None = None) -> HttpResponse:
    """Create (no pk) or edit an agent; refusals keep the input and say why."""
    agent = get_object_or_404(Agent, pk=pk) if pk else Agent()
    form = AgentForm(request.POST or None, instance=agent)
    if request.method == "POST" and form.is_valid():
        try:
            saved = services.agent_save(
                actor=request.user,
                agent=form.save(commit=False),
                react_servers=list(form.cleaned_data["react_servers"]),
                revision=form.cleaned_data.get("revision"),
                change_reason=form.cleaned_data.get("change_reason") or "",
            )
        except ChangeRequested as exc:
            return _change_requested(request, exc)
        except AgentError as exc:
            form.add_error(exc.field if exc.field in form.fields else None, exc.message)
        else:
            messages.success(request, _("Saved agent %(name)s.") % {"name": saved.name})
            return redirect("agents:list")
    status = 400 if request.method == "POST" else 200
    context = {
        "form": form,
        "agent": agent if pk else None,
        "model_problem": agent_model_problem(Agent.objects.get(pk=pk)) if pk else None,
        "protect_form": ProtectForm(
            initial={"protected": agent.protected, "approvals_required": agent.approvals_required}
        ),
        "pending_changes": selectors.change_request_list(agent=agent, state="pending").count() if pk else 0,
    }
    return render(request, "agents/agent_form.html", context, status=status)


def _change_requested(request: HtmxHttpRequest, exc: ChangeRequested) -> HttpResponse:
    """A protected agent's change became a change request: say so on its page."""
    messages.info(request, exc.message)
    return redirect(exc.url)


@require_POST
@require_role("admin")
def agent_protect(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Mark the agent protected (changes need approval) and how many approvals (admin)."""
    agent = get_object_or_404(Agent, pk=pk)
    form = ProtectForm(request.POST)
    if not form.is_valid():
        messages.error(request, _("The number of approvals is from 1 to %(most)s.") % {"most": 10})
        return redirect("agents:edit", pk=pk)
    try:
        agent = services.agent_protect(
            actor=request.user,
            agent=agent,
            protected=form.cleaned_data["protected"],
            approvals_required=form.cleaned_data["approvals_required"],
        )
    except ChangeRequested as exc:
        return _change_requested(request, exc)
    except AgentError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(
            request,
            _("Agent %(name)s is protected: its changes need %(n)s approval(s).")
            % {"name": agent.name, "n": agent.approvals_required}
            if agent.protected
            else _("Agent %(name)s is no longer protected.") % {"name": agent.name},
        )
    return redirect("agents:edit", pk=pk)


# --- Change requests ------------------------------------------------------------------------------


@require_GET
@require_role("viewer")
def change_list(request: HtmxHttpRequest) -> HttpResponse:
    """Change requests of every agent (or of ``?agent=``), pending first."""
    agent_id = db_id(request.GET.get("agent")) if request.GET.get("agent") else None
    agent = Agent.objects.filter(pk=agent_id).first() if agent_id is not None else None
    inbox = request.GET.get("inbox") == "1"
    requests = (
        selectors.change_inbox(request.user) if inbox else selectors.change_request_list(agent=agent)[:200]
    )
    return render(request, "agents/change_list.html", {"requests": requests, "agent": agent, "inbox": inbox})


def _change_page(
    request: HtmxHttpRequest, change: ChangeRequest, *, form=None, status: int = 200
) -> HttpResponse:
    view = selectors.change_request_view(change)
    mine = change.requested_by_id == request.user.pk
    context = {
        "change": change,
        "view": view,
        "form": form or ReviewForm(),
        "can_review": view["state"] == "pending" and not mine and is_approver(request.user),
        "can_withdraw": view["state"] == "pending" and (mine or has_role(request.user, "admin")),
        "can_analyse": is_approver(request.user) or has_role(request.user, "editor"),
        "impact_id": db_id(request.GET.get("impact")) if request.GET.get("impact") else None,
        "mine": mine,
    }
    return render(request, "agents/change_detail.html", context, status=status)


@require_GET
@require_role("viewer")
def change_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """One change request: the diff, who asked and why, the approvals, approve or reject."""
    return _change_page(request, get_object_or_404(ChangeRequest.objects.select_related("agent"), pk=pk))


@require_POST
@require_role("viewer")
def change_review(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Approve or reject with a comment (approvers and admins, not the requester; the service checks)."""
    change = get_object_or_404(ChangeRequest.objects.select_related("agent"), pk=pk)
    form = ReviewForm(request.POST)
    if form.is_valid():
        try:
            change = services.change_request_review(
                actor=request.user,
                change_request=change,
                decision=form.cleaned_data["decision"],
                comment=form.cleaned_data["comment"],
            )
        except PermissionDenied as exc:
            form.add_error(None, str(exc))
            return _change_page(request, change, form=form, status=403)
        except AgentError as exc:
            form.add_error(None, exc.message)
        else:
            done = {
                "applied": _("Approved: the change is applied."),
                "rejected": _("Rejected: nothing changed."),
            }.get(change.state, _("Approved: it waits for more approvals."))
            messages.success(request, done)
            return redirect("agents:change_detail", pk=pk)
    return _change_page(request, change, form=form, status=400)


@require_POST
@require_role("editor")
def change_withdraw(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    change = get_object_or_404(ChangeRequest, pk=pk)
    try:
        services.change_request_withdraw(actor=request.user, change_request=change)
    except (AgentError, PermissionDenied) as exc:
        messages.error(request, getattr(exc, "message", str(exc)))
    else:
        messages.success(request, _("Withdrawn: nothing changed."))
    return redirect("agents:change_detail", pk=pk)


# --- Model connections (admin) -------------------------------------------------------------------


@require_GET
@require_role("admin")
def connection_list(request: HtmxHttpRequest) -> HttpResponse:
    return render(request, "agents/connection_list.html", {"connections": selectors.connection_list()})


@require_http_methods(["GET", "POST"])
@require_role("admin")
def connection_edit(request: HtmxHttpRequest, pk: int | None = None) -> HttpResponse:
    """Create (no pk) or edit a model connection; refusals keep the input and say why."""
    connection = get_object_or_404(ModelConnection, pk=pk) if pk else ModelConnection()
    form = ModelConnectionForm(request.POST or None, instance=connection)
    if request.method == "POST" and form.is_valid():
        values = {f: form.cleaned_data.get(f) for f in services.CONNECTION_FIELDS}
        try:
            saved = services.connection_save(
                actor=request.user,
                connection=connection,
                values=values,
                revision=form.cleaned_data.get("revision"),
            )
        except ChangeRequested as exc:  # a protected agent uses it
            return _change_requested(request, exc)
        except AgentError as exc:
            form.add_error(exc.field if exc.field in form.fields else None, exc.message)
        else:
            messages.success(request, _("Saved model connection %(name)s.") % {"name": saved.name})
            return redirect("agents:connection_list")
    status = 400 if request.method == "POST" else 200
    context = {"form": form, "connection": connection if pk else None}
    return render(request, "agents/connection_form.html", context, status=status)


# --- Runs ---------------------------------------------------------------------------------------


@require_GET
@require_role("viewer")
def run_list(request: HtmxHttpRequest) -> HttpResponse:
    """Runs with filters and search; every run of one customer is a userId away.

    ``?newer=<cursor>`` is the first page's poll: only the runs started since (keyset), plus the
    rows of the runs it still shows running (``live``), swapped in place.
    """
    form = RunFilterForm(request.GET or None)
    if form.is_bound and not form.is_valid():
        # An invalid filter is refused, the field named: never the list of every run in its place.
        # 422, which htmx swaps in (base.html's responseHandling), so the filter bar shows why.
        context = {"form": form, "page": [], "run_page": selectors.RunPage([], None, None), "refused": True}
        template = "agents/run_list.html#run-table" if request.htmx else "agents/run_list.html"
        return render(request, template, context, status=422)
    filters = form.cleaned_data if form.is_bound else {}
    if "newer" in request.GET:
        return _run_list_poll(request, filters)
    try:
        page = selectors.run_page(filters=filters, cursor=request.GET.get("cursor"), limit=RUN_PAGE_SIZE)
    except selectors.CursorError as exc:
        return render(request, "agents/run_list.html", {"form": form, "cursor_error": str(exc)}, status=400)
    selectors.runs_with_calls(selectors.runs_for_display(page.runs))
    newest = request.GET.copy()
    newest.pop("cursor", None)
    template = "agents/run_list.html#run-table" if request.htmx else "agents/run_list.html"
    context = {
        "form": form,
        "page": page.runs,
        "run_page": page,
        "newest_query": newest.urlencode(),
        "export_query": newest.urlencode(),
        "poll_query": _poll_query(request, page.runs[0] if page.runs else None, page.runs),
    }
    return render(request, template, context)


@require_GET
@require_role("viewer")
def run_export(request: HtmxHttpRequest) -> HttpResponseBase:
    """The run list's evidence export, with its filters: CSV or JSON Lines, streamed; audited."""
    form = RunFilterForm(request.GET)
    fmt = request.GET.get("format", "csv")
    if not form.is_valid() or fmt not in FORMATS:
        problems = [str(m) for messages_ in form.errors.values() for m in messages_]
        if fmt not in FORMATS:
            problems.append(_("The export format is csv or jsonl."))
        return HttpResponse("\n".join(problems), status=400, content_type="text/plain; charset=utf-8")
    stream = services.runs_export(actor=request.user, filters=form.cleaned_data, fmt=fmt)
    return evidence_response(stream, fmt)


@require_GET
@require_role("viewer")
def run_evidence(request: HtmxHttpRequest) -> HttpResponse:
    """The printable evidence report of the run list's filters (what a reviewer attaches to a finding)."""
    form = RunFilterForm(request.GET)
    # An invalid filter is refused, the field named (not a report of every run).
    report = evidence_report(form.cleaned_data) if form.is_valid() else None
    filters = form.cleaned_data if report is not None else {}
    query = request.GET.copy()
    query.pop("format", None)
    context = {
        "form": form,
        "report": report,
        "chain_check": chain_last_check(),
        "export_query": query.urlencode(),
        "shown_filters": [
            (form[name].label, value) for name, value in filters.items() if value not in (None, "")
        ],
        "now": timezone.now(),
    }
    return render(request, "agents/run_evidence.html", context, status=200 if form.is_valid() else 400)


@require_GET
@require_role("viewer")
def run_json(request: HtmxHttpRequest, pk: int) -> JsonResponse:
    """A run as one JSON document (Download JSON on the run page); audited."""
    run = get_object_or_404(Run, pk=pk)
    response = JsonResponse(
        services.run_export_document(actor=request.user, run=run), json_dumps_params={"ensure_ascii": False}
    )
    response["Content-Disposition"] = f'attachment; filename="llamon-run-{run.pk}.json"'
    response["Cache-Control"] = "no-store"
    return response


def _poll_query(request: HtmxHttpRequest, newest: Run | None, shown: list[Run]) -> str:
    """The poll's query: the filters, the newest run shown and the unfinished runs shown."""
    query = request.GET.copy()
    for key in ("cursor", "newer", "live"):
        query.pop(key, None)
    query["newer"] = selectors.cursor_encode(newest) if newest else ""
    query.setlist("live", [str(r.pk) for r in shown if not r.finished][:RUN_PAGE_SIZE])
    return query.urlencode()


def _run_list_poll(request: HtmxHttpRequest, filters: dict) -> HttpResponse:
    try:
        new, more = selectors.run_newer(
            filters=filters, cursor=request.GET.get("newer") or None, limit=RUN_PAGE_SIZE
        )
    except selectors.CursorError as exc:
        return HttpResponse(str(exc), status=400, content_type="text/plain; charset=utf-8")
    live_ids = [pk for x in request.GET.getlist("live")[:RUN_PAGE_SIZE] if (pk := db_id(x)) is not None]
    updated = list(Run.objects.select_related("agent").filter(pk__in=live_ids)) if live_ids else []
    selectors.runs_with_calls(selectors.runs_for_display([*new, *updated]))
    query = request.GET.copy()
    if new:  # nothing new: the next poll asks from the same place
        query["newer"] = selectors.cursor_encode(new[0])
    query.setlist("live", [str(r.pk) for r in [*new, *updated] if not r.finished][:RUN_PAGE_SIZE])
    context = {"new": new, "more": more, "updated": updated, "poll_query": query.urlencode()}
    return render(request, "agents/run_list.html#run-poll", context)


RUN_PAGE_SIZE = 50


@require_http_methods(["GET", "POST"])
@require_role("editor")
def run_start(request: HtmxHttpRequest) -> HttpResponse:
    """Start a run on a worker: an agent and a request (or a pasted A2A message)."""
    form = RunStartForm(request.POST or None, initial={"agent": request.GET.get("agent")})
    status = 400 if request.method == "POST" else 200
    if request.method == "POST" and form.is_valid():
        try:
            run = services.run_create(
                actor=request.user, agent=form.cleaned_data["agent"], request=form.to_request()
            )
        except AgentError as exc:
            form.add_error(exc.field if exc.field in form.fields else None, exc.message)
            status = 503 if isinstance(exc, BrokerUnavailableError) else 400
        else:
            return redirect("agents:run_detail", pk=run.pk)
    return render(request, "agents/run_start.html", {"form": form}, status=status)


@require_GET
@require_role("viewer")
def run_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """A run's input, live timeline (selectors.STEP_PAGE steps at a time, from ``?after=seq``), answer and diagnostics."""
    run = get_object_or_404(Run.objects.select_related("agent"), pk=pk)
    after = _after(request)
    page = selectors.run_step_page(run=run, after=after)
    steps, more, last_seq = traces.steps_with_usage(page.steps), page.more, page.last_seq
    selectors.runs_for_display([run])
    return render(
        request,
        "agents/run_detail.html",
        {
            "run": run,
            "steps": steps,
            "last_seq": last_seq,
            "after": after,
            "more": more,
            "poll": not run.finished and not more,
            "diagnostics": selectors.run_diagnostics(run=run) if run.finished else [],
            "link": selectors.run_link(run=run) if run.finished else None,
            "chain_check": chain_last_check() if run.finished else None,
            "can_edit": has_role(request.user, "editor"),
            "replay_agents": selectors.agent_list() if has_role(request.user, "editor") else [],
            "trace": traces.run_trace(run=run),
            "flow_graph": flow_graph(selectors.run_steps(run=run).filter(kind="node"))
            if run.source == Run.Source.FLOW
            else None,
        },
    )


@require_GET
@require_role("viewer")
def run_steps(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Steps after ``?after=seq``, selectors.STEP_PAGE at most (the timeline's poll and its "more steps" link).

    Stops polling (286) once the run has ended, every step is settled and none is left to read.
    """
    run = get_object_or_404(Run, pk=pk)
    after = _after(request)
    page = selectors.run_step_page(run=run, after=after)
    steps, more, last_seq = traces.steps_with_usage(page.steps), page.more, page.last_seq
    final = run.finished and not more and page.settled
    context = {
        "run": run,
        "steps": steps,
        "last_seq": last_seq,
        "final": final,
        "more": more,
        "poll": not final and not more,
        "can_edit": has_role(request.user, "editor"),
        # Only the last answer carries the diagnostics: earlier polls of an ended run would read them for nothing.
        "diagnostics": selectors.run_diagnostics(run=run) if final else [],
        # The waterfall is redrawn once, when the run has ended (not on every poll).
        "trace": traces.run_trace(run=run) if final else None,
    }
    response = render(request, "agents/run_detail.html#run-poll", context)
    # 286 tells htmx to stop polling: the run has ended and every step is settled.
    return HttpResponseStopPolling(response.content) if final else response


@require_GET
@require_role("viewer")
def run_rules(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """The rules table of a pre-step step (``?step=seq``; default the first), loaded when the step is opened."""
    run = get_object_or_404(Run.objects.select_related("agent__rule_set", "rule_set_version"), pk=pk)
    try:
        table = traces.prestep_rules(
            run=run,
            seq=db_id(request.GET.get("step")),
            detail="all" if request.GET.get("show") == "all" else "summary",
            offset=typed_count(request.GET.get("offset")),
        )
    except RuleError as exc:
        return HttpResponse(exc.message, status=422, content_type="text/plain; charset=utf-8")
    return render(request, "agents/_prestep_rules.html", {"run": run, "table": table})


@require_GET
@require_role("viewer")
def run_step_value(request: HtmxHttpRequest, pk: int, seq: int) -> HttpResponse:
    """One part of a step's input or output (``?field=output&part=2``): a value over
    selectors.VALUE_PART_BYTES is shown in parts, each page with the links to the one before and after."""
    run = get_object_or_404(Run, pk=pk)
    field, part = request.GET.get("field", "output"), db_id(request.GET.get("part") or "1")
    if field not in selectors.STEP_VALUE_FIELDS:
        field, part = "", None
    label = {"input": _("input"), "output": _("output")}.get(field, "")
    shown = selectors.run_step_value(run=run, seq=seq, field=field, part=part) if part else None
    if shown is None:
        return render(
            request,
            "agents/run_step_value.html",
            {"run": run, "seq": seq, "field": field, "label": label, "missing": True},
            status=404,
        )
    context = {"run": run, "seq": seq, "field": field, "label": label, "value": shown}
    return render(request, "agents/run_step_value.html", context)


def _after(request: HtmxHttpRequest) -> int:
    try:
        return min(max(int(request.GET.get("after", "0")), 0), 2**31)
    except ValueError:
        return 0


@require_POST
@require_role("editor")
def run_cancel(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    run = services.run_cancel(actor=request.user, run=get_object_or_404(Run, pk=pk))
    messages.info(
        request,
        _("Cancelled.")
        if run.status == Run.Status.CANCELLED
        else _("Asked the run to stop at its next step."),
    )
    return redirect("agents:run_detail", pk=pk)


@require_POST
@require_role("editor")
def run_rerun(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    try:
        run = services.run_rerun(actor=request.user, run=get_object_or_404(Run, pk=pk))
    except AgentError as exc:
        messages.error(request, exc.message)
        return redirect("agents:run_detail", pk=pk)
    return redirect("agents:run_detail", pk=run.pk)


@require_POST
@require_role("editor")
def run_replay(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Replay this run with its recorded tool outputs, with the chosen agent's settings (default: its own)."""
    run = get_object_or_404(Run, pk=pk)
    chosen = request.POST.get("agent", "").strip()
    agent = None
    if chosen:
        agent_pk = db_id(chosen)
        agent = Agent.objects.filter(pk=agent_pk).first() if agent_pk is not None else None
        if agent is None:
            messages.error(
                request,
                _("There is no agent %(value)r to replay the run with: choose one from the list.")
                % {"value": chosen[:40]},
            )
            return redirect("agents:run_detail", pk=pk)
    try:
        replay = services.run_replay(actor=request.user, run=run, agent=agent)
    except AgentError as exc:
        messages.error(request, exc.message)
        return redirect("agents:run_detail", pk=pk)
    messages.success(
        request,
        _("Replaying run %(pk)s: every tool call is answered from its recorded outputs.") % {"pk": pk},
    )
    return redirect("agents:run_detail", pk=replay.pk)


@require_GET
@require_role("viewer")
def run_compare(request: HtmxHttpRequest) -> HttpResponse:
    """Two runs with their steps aligned and what differs marked (``?a=&b=``, or two ticked ``run``)."""
    picked = request.GET.getlist("run")
    if picked and len(picked) != 2:
        messages.error(
            request,
            _("Tick exactly two runs to compare (you ticked %(n_picked)s).") % {"n_picked": len(picked)},
        )
        return redirect("agents:run_list")
    try:
        # Ticked runs: the older (lower id) on the left, whatever order the list sent them in.
        given = [db_id(x) for x in (picked or [request.GET["a"], request.GET["b"]])]
        ids = [pk for pk in given if pk is not None]
        if len(ids) != 2:  # not a database id: no such run
            raise ValueError
        ids = sorted(ids) if picked else ids
    except (KeyError, ValueError):
        messages.error(request, _("Choose two runs to compare (a and b)."))
        return redirect("agents:run_list")
    runs = {r.pk: r for r in Run.objects.filter(pk__in=ids)}
    if len(runs) != len(set(ids)):
        messages.error(request, _("One of the runs to compare does not exist."))
        return redirect("agents:run_list")
    selectors.runs_for_display(runs.values())
    a, b = runs[ids[0]], runs[ids[1]]
    comparison = compare_runs(a, b, *(list(selectors.run_steps(run=r)[:COMPARE_STEPS]) for r in (a, b)))
    return render(request, "agents/run_compare.html", {"a": a, "b": b, "cmp": comparison})


@require_POST
@require_role("editor")
def run_save_case(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Keep this run's input and its pre-step outcome as a regression case of the agent's rule set."""
    run = get_object_or_404(Run.objects.select_related("agent__rule_set"), pk=pk)
    try:
        case = services.run_save_as_case(
            actor=request.user, run=run, name=request.POST.get("name", "").strip()
        )
    except AgentError as exc:
        messages.error(request, exc.message)
        return redirect("agents:run_detail", pk=pk)
    messages.success(
        request,
        _("Saved test case %(name)r in rule set %(name2)s.")
        % {"name": case.name, "name2": case.rule_set.name},
    )
    return redirect("agents:run_detail", pk=pk)


@require_POST
@require_role("viewer")
def run_open_in_tester(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Load this run's input (masked as shown), optionally its recorded tool outputs, into its rule set's tester."""
    run = get_object_or_404(Run.objects.select_related("agent__rule_set"), pk=pk)
    rule_set = run.agent.rule_set if run.agent else None
    if rule_set is None:
        messages.error(request, _("This run has no agent with a rule set to open its tester."))
        return redirect("agents:run_detail", pk=pk)
    fields, origin = services.run_tester_inputs(run=run, with_outputs=request.POST.get("outputs") == "1")
    tester_inputs_put(request.session, rule_set.pk, fields, origin)
    return redirect("rules:editor", pk=rule_set.pk)


@require_http_methods(["GET", "POST"])
@require_role("admin")
def privacy(request: HtmxHttpRequest) -> HttpResponse:
    """Redaction of stored traces (with a preview) and the retention period."""
    current = privacy_get()
    form = PrivacyForm(request.POST or None, instance=current)
    preview = preview_run = None
    if request.method == "POST" and form.is_valid():
        if "preview_only" in request.POST:
            chosen = {k: form.cleaned_data[k] for k in ("redaction_patterns", "mask_presets")}
            preview = services.privacy_preview(
                patterns=chosen["redaction_patterns"],
                presets=chosen["mask_presets"],
                text=form.cleaned_data.get("preview") or "",
            )
            preview_run = services.privacy_preview_run(
                patterns=chosen["redaction_patterns"], presets=chosen["mask_presets"]
            )
        else:
            services.privacy_update(
                actor=request.user,
                **{k: form.cleaned_data[k] for k in ("redaction_patterns", "mask_presets", "retention_days")},
            )
            messages.success(
                request, _("Saved the privacy settings: they apply to steps stored from now on.")
            )
            return redirect(reverse("agents:privacy"))
    status = 400 if request.method == "POST" and form.errors else 200
    context = {"form": form, "preview": preview, "preview_run": preview_run}
    return render(request, "agents/privacy.html", context, status=status)


# --- Staged rollout and shadow mode -------------------------------------------------------------


def _rollout_page(request: HtmxHttpRequest, agent: Agent, *, rollout_form=None, shadow_form=None, status=200):
    versions = selectors.agent_versions(agent)
    state = selectors.rollout_view(agent)
    initial = {"version": versions[0].number if versions else None, "percent": 10}
    if state["rollout"]:
        keys = ("version", "percent", "chatbot_ids", "guard_error_percent", "guard_min_runs")
        initial = {k: state["rollout"][k] for k in keys}
    return render(
        request,
        "agents/rollout.html",
        {
            "agent": agent,
            "state": state,
            "versions": versions,
            "rollout_form": rollout_form or RolloutForm(initial=initial, versions=versions),
            "shadow_form": shadow_form
            or ShadowForm(initial={"version": state["shadow_version"]}, versions=versions),
            "tallies": selectors.shadow_tallies(agent=agent),
            "guard_event": selectors.rollout_guard_event(agent),
            "can_edit": has_role(request.user, "editor"),
        },
        status=status,
    )


def _rollout_agent(pk: int) -> Agent:
    related = ("rule_set", "pinned_version", "rollout_version", "shadow_version")
    return get_object_or_404(Agent.objects.select_related(*related), pk=pk)


@require_GET
@require_role("viewer")
def agent_rollout(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """The agent's staged rollout and shadow mode: state for viewers, controls for editors.

    ``?figures=1`` from the page's poller: only the live figures (empty once the rollout ended).
    """
    agent = _rollout_agent(pk)
    if request.GET.get("figures"):
        state = selectors.rollout_view(agent)
        if state["rollout"] is None:  # ended meanwhile: the poller stops (a reload shows the rest)
            return HttpResponse("")
        return render(request, "agents/_rollout_figures.html", {"agent": agent, "state": state})
    return _rollout_page(request, agent)


@require_POST
@require_role("editor")
def agent_rollout_set(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    agent = _rollout_agent(pk)
    if request.POST.get("staged_publish"):
        return _staged_publish(request, agent)
    form = RolloutForm(request.POST, versions=selectors.agent_versions(agent))
    if form.is_valid():
        number = form.cleaned_data["version"]
        version = selectors.agent_version(agent, number)
        try:
            agent_now = services.rollout_set(
                actor=request.user,
                agent=agent,
                version=version,
                percent=form.cleaned_data["percent"],
                chatbot_ids=form.cleaned_data["chatbot_ids"],
                guard_error_percent=form.cleaned_data["guard_error_percent"],
                guard_min_runs=form.cleaned_data["guard_min_runs"] or services.GUARD_MIN_RUNS,
                change_reason=form.cleaned_data["change_reason"] or "",
            )
        except ChangeRequested as exc:
            return _change_requested(request, exc)
        except AgentError as exc:
            form.add_error(exc.field if exc.field in form.fields else None, exc.message)
        else:
            messages.success(
                request,
                _(
                    "Rolling out v%(number)s to %(percent)s %% of sessions; v%(stable)s stays the stable version."
                )
                % {
                    "number": number,
                    "percent": form.cleaned_data["percent"],
                    "stable": agent_now.pinned_version.number if agent_now.pinned_version else "?",
                },
            )
            return redirect("agents:rollout", pk=pk)
    return _rollout_page(request, agent, rollout_form=form, status=400)


def _staged_publish(request: HtmxHttpRequest, agent: Agent) -> HttpResponse:
    """The versions page's "publish as a staged rollout instead": publish, then roll out to a share."""
    form = StagedPublishForm(request.POST)
    if not form.is_valid():
        for errors in form.errors.values():
            messages.error(request, " ".join(str(e) for e in errors))
    else:
        try:
            agent = services.rollout_publish(
                actor=request.user,
                agent=agent,
                percent=form.cleaned_data["percent"],
                message=form.cleaned_data["message"],
                revision=form.cleaned_data["revision"],
                change_reason=form.cleaned_data["change_reason"] or "",
            )
        except ChangeRequested as exc:
            return _change_requested(request, exc)
        except AgentError as exc:
            messages.error(request, exc.message)
        else:
            messages.success(
                request,
                _(
                    "Published v%(number)s as a staged rollout: %(percent)s %% of sessions get it; v%(stable)s stays the stable version."
                )
                % {
                    "number": agent.rollout_version.number if agent.rollout_version else "?",
                    "percent": agent.rollout_percent,
                    "stable": agent.pinned_version.number if agent.pinned_version else "?",
                },
            )
            return redirect("agents:rollout", pk=agent.pk)
    if agent.rule_set_id is None:
        return redirect("agents:rollout", pk=agent.pk)
    return redirect("rules:versions", pk=agent.rule_set_id)


@require_POST
@require_role("editor")
def agent_rollout_end(request: HtmxHttpRequest, pk: int, action: str) -> HttpResponse:
    """Promote the candidate (it becomes the pinned version) or roll back (the stable version again)."""
    agent = _rollout_agent(pk)
    service = {"promote": services.rollout_promote, "rollback": services.rollout_rollback}[action]
    try:
        agent = service(actor=request.user, agent=agent, change_reason=request.POST.get("change_reason", ""))
    except ChangeRequested as exc:
        return _change_requested(request, exc)
    except AgentError as exc:
        messages.error(request, exc.message)
    else:
        done = (
            _("Promoted: the agent now pins %(ref)s.") % {"ref": selectors.stable_ref(agent)}
            if action == "promote"
            else _("Rolled back.")
        )
        messages.success(request, done)
    return redirect("agents:rollout", pk=pk)


@require_POST
@require_role("editor")
def agent_shadow_set(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    agent = _rollout_agent(pk)
    form = ShadowForm(request.POST, versions=selectors.agent_versions(agent))
    if form.is_valid():
        number = form.cleaned_data["version"]
        version = selectors.agent_version(agent, number)
        try:
            services.shadow_set(actor=request.user, agent=agent, version=version)
        except ChangeRequested as exc:
            return _change_requested(request, exc)
        except AgentError as exc:
            form.add_error("version", exc.message)
        else:
            messages.success(
                request,
                _("Shadow mode: v%(number)s.") % {"number": number}
                if number is not None
                else _("Shadow mode is off."),
            )
            return redirect("agents:rollout", pk=pk)
    return _rollout_page(request, agent, shadow_form=form, status=400)
