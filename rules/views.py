"""Pages of the rule workbench. Views authorize, validate, call one service or selector, render."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import HttpResponseClientRedirect, trigger_client_event

from accounts.roles import has_role, require_role
from core.chain import chain_last_check
from core.errors import PendingApproval
from core.http import HtmxHttpRequest
from core.userinput import db_id, typed_count
from llamon_agent import strictjson
from llamon_agent.prestep import RuleStatus
from rules import cases, engine, exporting, selectors, services, tools_import
from rules.cases import suite_run
from rules.errors import RuleError, StaleEditError
from rules.forms import AuditFilterForm, PublishForm, RuleForm, RuleSetForm, TesterForm
from rules.models import Rule, RuleSet, RuleSetVersion, TestCase
from rules.tester import (
    TESTER_FIELDS,
    live_calls,
    live_calls_digest,
    tester_evaluate,
    tester_inputs_load,
    tester_inputs_put,
    tester_inputs_store,
    tester_masked_left,
    tester_origin_load,
    tester_recent_get,
    tester_recent_list,
    tester_recent_record,
    tester_rows,
)
from servers import selectors as server_selectors

CASES_PICKED = 10  # saved cases the tester offers in its picker

# --- Rule sets ----------------------------------------------------------------------------------


@require_GET
@require_role("viewer")
def rule_set_list(request: HtmxHttpRequest) -> HttpResponse:
    """All rule sets, and a form to start one (editors)."""
    return render(
        request, "rules/rule_set_list.html", {"rule_sets": selectors.rule_set_list(), "form": RuleSetForm()}
    )


@require_POST
@require_role("editor")
def rule_set_create(request: HtmxHttpRequest) -> HttpResponse:
    """Create an empty rule set and open its editor."""
    form = RuleSetForm(request.POST)
    if form.is_valid():
        try:
            rule_set = services.rule_set_create(actor=request.user, **form.cleaned_data)
        except RuleError as exc:
            form.add_error(exc.field if exc.field in form.fields else None, exc.message)
        else:
            return redirect("rules:editor", pk=rule_set.pk)
    return render(
        request,
        "rules/rule_set_list.html",
        {"rule_sets": selectors.rule_set_list(), "form": form},
        status=400,
    )


def _editor_context(
    request: HttpRequest,
    rule_set: RuleSet,
    *,
    rule_form: RuleForm | None = None,
    selected: Rule | None = None,
    tester: TesterForm | None = None,
    tester_case: TestCase | None = None,
) -> dict:
    rules = list(selectors.rule_list(rule_set=rule_set))
    servers = {s.mcp_id: s for s in server_selectors.mcp_server_list()}
    problems = selectors.rule_set_checks(rule_set, servers)
    for rule in rules:
        rule.problems = problems.get(rule.name, [])
    if rule_form is None:
        if selected is not None:
            rule_form = RuleForm(
                prefix="rule",
                initial={
                    **{f: getattr(selected, f) for f in engine.SNAPSHOT_FIELDS},
                    "revision": selected.revision,
                },
            )
        else:
            first_server = next(iter(servers), "")
            rule_form = RuleForm(
                prefix="rule", initial={"mcp_id": first_server, "enabled": True, "params": "{}"}
            )
    chosen_server = servers.get(rule_form["mcp_id"].value() or "")
    chosen_tool = next(
        (
            t
            for t in (chosen_server.tools if chosen_server else [])
            if t["name"] == rule_form["tool_name"].value()
        ),
        None,
    )
    return {
        "rule_set": rule_set,
        "rules": rules,
        "problem_count": sum(len(p) for p in problems.values()),
        "selected": selected,
        "rule_form": rule_form,
        "servers": servers.values(),
        "chosen_server": chosen_server,
        "chosen_tool": chosen_tool,
        "completions": json.dumps(engine.completion_data(chosen_server, chosen_tool)),
        "expr_vocabulary": json.dumps(engine.expression_vocabulary()),
        "tester": tester or _tester_form(request, rule_set, tester_case),
        "tester_case": tester_case,
        "tester_origin": None if tester_case else tester_origin_load(request.session, rule_set.pk),
        "can_edit": has_role(request.user, "editor"),
        "latest_version": rule_set.versions.order_by("-number").first(),
        "case_count": rule_set.cases.count(),
        # The tester's picker: the saved cases one click away (the newest first, as many as fit).
        "recent_cases": list(rule_set.cases.order_by("-pk")[:CASES_PICKED]),
        # ... and the user's own recent inputs (rules.tester.tester_recent_record).
        "recent_inputs": tester_recent_list(user=request.user, rule_set=rule_set),
        "publish_form": PublishForm(initial={"revision": rule_set.revision}),
    }


def _tester_form(request: HttpRequest, rule_set: RuleSet, case: TestCase | None) -> TesterForm:
    """The tester as the user left it for this rule set (or filled with the opened case's input)."""
    if case is not None:
        data = case.input
        initial = {
            "query": data.get("query") or "",
            "context": json.dumps(data.get("context") or {}, ensure_ascii=False),
            "data": json.dumps(data["a2a_data"], ensure_ascii=False) if data.get("a2a_data") else "",
            "files": json.dumps(data["a2a_files"], ensure_ascii=False) if data.get("a2a_files") else "",
            "pinned": json.dumps(case.pinned, ensure_ascii=False) if case.pinned else "",
        }
    else:
        initial = tester_inputs_load(request.session, rule_set.pk)
    return TesterForm(prefix="t", initial=initial)


@require_GET
@require_role("viewer")
def rule_set_editor(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """The editor: ordered rules, the edit panel (?rule=<id> or a new rule) and the live tester."""
    rule_set = get_object_or_404(RuleSet, pk=pk)
    selected = _selected_rule(rule_set, request.GET.get("rule"))
    case = _tester_case(rule_set, request.GET.get("case"))
    if request.GET.get("recent") and case is None:
        # One of the user's recent inputs, loaded into the tester as the user left it there.
        recent = tester_recent_get(user=request.user, rule_set=rule_set, pk=db_id(request.GET["recent"]))
        if recent is None:
            raise Http404("No such recent input of yours in this rule set.")
        origin = recent.values.get("origin")
        tester_inputs_put(
            request.session, rule_set.pk, recent.values, origin if isinstance(origin, dict) else None
        )
    return render(
        request,
        "rules/rule_set_editor.html",
        _editor_context(request, rule_set, selected=selected, tester_case=case),
    )


@require_POST
@require_role("editor")
def rule_save(request: HtmxHttpRequest, pk: int, rule_pk: int | None = None) -> HttpResponse:
    """Create or update one rule; on any refusal the editor comes back with the input kept."""
    rule_set = get_object_or_404(RuleSet, pk=pk)
    rule = get_object_or_404(Rule, pk=rule_pk, rule_set=rule_set) if rule_pk else None
    form = RuleForm(request.POST, prefix="rule")
    status = 400
    if form.is_valid():
        data = {k: v for k, v in form.cleaned_data.items() if k != "revision"}
        try:
            if rule is None:
                saved = services.rule_create(actor=request.user, rule_set=rule_set, **data)
            else:
                saved = services.rule_update(
                    actor=request.user, rule=rule, revision=form.cleaned_data["revision"], **data
                )
        except StaleEditError as exc:
            messages.error(request, exc.message)
            status = 409
        except RuleError as exc:
            form.add_error(exc.field if exc.field in form.fields else None, exc.message)
        else:
            messages.success(request, _("Saved rule %(name)s.") % {"name": saved.name})
            _report_suite_changes(request, rule_set)
            return redirect(f"{reverse('rules:editor', args=[rule_set.pk])}?rule={saved.pk}")
    context = _editor_context(request, rule_set, rule_form=form, selected=rule)
    return render(request, "rules/rule_set_editor.html", context, status=status)


def _report_suite_changes(request: HttpRequest, rule_set: RuleSet) -> None:
    """After a save the regression suite runs again; say which cases changed outcome."""
    if not rule_set.cases.exists():
        return
    from rules.cases import suite_run

    suite = suite_run(rule_set=rule_set)
    if suite.changed:
        # Which case, which call, and why (the rule), one case a line.
        names = " · ".join(r.summary for r in suite.changed)
        messages.warning(request, _("Test cases that changed outcome: %(names)s.") % {"names": names})
    else:
        messages.info(
            request,
            _("Test cases: %(passed)s of %(total)s pass; none changed outcome.")
            % {"passed": suite.passed, "total": suite.total},
        )


@require_POST
@require_role("editor")
def rule_delete(request: HtmxHttpRequest, pk: int, rule_pk: int) -> HttpResponse:
    rule = get_object_or_404(Rule, pk=rule_pk, rule_set_id=pk)
    services.rule_delete(actor=request.user, rule=rule)
    messages.success(request, _("Deleted rule %(name)s.") % {"name": rule.name})
    return redirect("rules:editor", pk=pk)


@require_POST
@require_role("editor")
def rule_toggle(request: HtmxHttpRequest, pk: int, rule_pk: int) -> HttpResponse:
    """Enable or disable a rule (the row's checkbox, or a button without JavaScript)."""
    rule = get_object_or_404(Rule, pk=rule_pk, rule_set_id=pk)
    try:
        services.rule_update(actor=request.user, rule=rule, revision=None, enabled=not rule.enabled)
    except RuleError as exc:
        messages.error(request, exc.message)
    return _rule_list_response(request, rule.rule_set)


@require_POST
@require_role("editor")
def rule_move(request: HtmxHttpRequest, pk: int, rule_pk: int) -> HttpResponse:
    """Move a rule one place up or down (works without JavaScript)."""
    rule = get_object_or_404(Rule, pk=rule_pk, rule_set_id=pk)
    try:
        services.rule_move(
            actor=request.user,
            rule=rule,
            direction=request.POST.get("direction", ""),
            revision=_int(request.POST.get("revision")),
        )
    except RuleError as exc:
        messages.error(request, exc.message)
    return _rule_list_response(request, rule.rule_set)


@require_POST
@require_role("editor")
def rule_set_reorder(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Drag and drop: the full new order of rule ids."""
    rule_set = get_object_or_404(RuleSet, pk=pk)
    try:
        order = [int(x) for x in request.POST.getlist("order")]
        services.rule_set_reorder(
            actor=request.user, rule_set=rule_set, order=order, revision=_int(request.POST.get("revision"))
        )
    except ValueError:
        messages.error(request, _("The new order must be a list of rule ids."))
    except RuleError as exc:
        messages.error(request, exc.message)
    return _rule_list_response(request, rule_set)


def _rule_list_response(request: HtmxHttpRequest, rule_set: RuleSet) -> HttpResponse:
    rule_set.refresh_from_db()
    if request.htmx:
        return render(request, "rules/rule_set_editor.html#rule-list", _editor_context(request, rule_set))
    return redirect("rules:editor", pk=rule_set.pk)


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value not in (None, "") else None
    except ValueError:
        return None


@require_POST
@require_role("editor")
def rule_validate(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """As-you-type check of the edit panel: the errors of each field (line, column, reason)."""
    get_object_or_404(RuleSet, pk=pk)
    form = RuleForm(request.POST, prefix="rule")
    form.is_valid()
    response = render(request, "rules/_rule_errors.html", {"rule_form": form})
    # The live tester listens for this and re-runs on the unsaved edit.
    return trigger_client_event(response, "rule-edited")


@require_POST
@require_role("editor")
def expression_check(request: HttpRequest, pk: int) -> JsonResponse:
    """The expression editor's diagnostics: the compile check of one field, as JSON with line and column."""
    get_object_or_404(RuleSet, pk=pk)
    field = request.POST.get("field", "")
    if field not in engine.EXPRESSION_FIELDS:
        return JsonResponse({"detail": "field must be when or params."}, status=400)
    source = request.POST.get("source", "")
    return JsonResponse({"field": field, "diagnostics": engine.expression_diagnostics(field, source)})


@require_GET
@require_role("viewer")
def tool_info(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """The chosen tool's description, input schema and a params skeleton of its required fields."""
    get_object_or_404(RuleSet, pk=pk)
    server = server_selectors.mcp_server_list().filter(mcp_id=request.GET.get("rule-mcp_id", "")).first()
    tool_name = request.GET.get("rule-tool_name", "")
    tool = next((t for t in (server.tools if server else []) if t["name"] == tool_name), None)
    return render(
        request,
        "rules/_tool_info.html",
        {
            "chosen_server": server,
            "chosen_tool": tool,
            "skeleton": engine.params_skeleton(tool),
            "completions": json.dumps(engine.completion_data(server, tool)),
        },
    )


def _selected_rule(rule_set: RuleSet, wanted: str | None) -> Rule | None:
    """The rule named by ``?rule=`` (or the tester's hidden field); Http404 when it is not in the set."""
    if not wanted:
        return None
    pk = db_id(wanted)
    selected = rule_set.rules.filter(pk=pk).first() if pk is not None else None
    if selected is None:
        raise Http404("No such rule in this rule set.")
    return selected


def _tester_case(rule_set: RuleSet, wanted: str | None) -> TestCase | None:
    """The case opened in the tester (``?case=`` or the tester's hidden field); Http404 when not in the set."""
    if not wanted:
        return None
    pk = db_id(wanted)
    case = rule_set.cases.filter(pk=pk).first() if pk is not None else None
    if case is None:
        raise Http404("No such test case in this rule set.")
    return case


def _is_blank_new_rule(post: Any) -> bool:
    return not any((post.get(f"rule-{f}") or "").strip() for f in ("name", "tool_name", "when"))


@require_POST
@require_role("viewer")
def rule_set_test(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """The live tester: the draft (with the unsaved edit, if any) on one sample request.

    With htmx the answer is the results fragment, swapped in place; a plain form post (no
    JavaScript) gets the whole editor back, with the inputs kept and the results in place.
    """
    rule_set = get_object_or_404(RuleSet, pk=pk)
    # "1" asks to execute; "1:<digest>" confirms the calls a first ask listed (live_calls_digest).
    asked, _sep, confirmed = request.POST.get("execute", "").partition(":")
    execute = asked == "1"
    tester = TesterForm(request.POST, prefix="t")
    tester_inputs_store(request.session, rule_set.pk, request.POST)
    case = _tester_case(rule_set, request.POST.get("case"))
    context: dict[str, Any] = {"rule_set": rule_set, "tester": tester, "tester_case": case}
    status = 200
    if execute and not has_role(request.user, "editor"):
        context["error"] = _("Executing calls real tools: it needs the editor role.")
        status = 403
    elif not tester.is_valid():
        status = 422
    else:
        origin = None if case else tester_origin_load(request.session, rule_set.pk)
        masked_left = tester_masked_left(origin, tester.to_request().to_json())
        context["masked_left"], context["origin"] = masked_left, origin
        if execute and masked_left and origin is not None:
            # A masked value is the mask's text, not the customer's: real tools must not get it as if real.
            context["error"] = _(
                "Execute would send masked values to real tools as if they were real: replace "
                "%(fields)s (loaded masked from run %(run)s) first, or use Dry run."
            ) % {"fields": ", ".join(masked_left), "run": (origin or {}).get("run")}
            status = 422
        else:
            try:
                context.update(
                    _tester_results(
                        request, rule_set, tester, execute=execute, origin=origin, confirmed=confirmed
                    )
                )
            except RuleError as exc:  # a hand-made "list more" post (offset): said, nothing lost
                context["error"], status = exc.message, 422
        if status == 200 and "evaluation" in context:
            try:  # among the user's recent inputs; a keystroke's run goes on replacing the newest
                tester_recent_record(
                    user=request.user,
                    rule_set=rule_set,
                    values={f: request.POST.get(f"t-{f}", "") for f in TESTER_FIELDS},
                    typing=bool(request.htmx) and "execute" not in request.POST,
                    origin=origin,
                )
            except RuleError as exc:
                context["recent_refused"] = exc.message
    if request.htmx:
        return render(request, "rules/_tester_results.html", context, status=status)
    selected = _selected_rule(rule_set, request.POST.get("rule"))
    page = _editor_context(request, rule_set, selected=selected, tester=tester, tester_case=case)
    return render(request, "rules/rule_set_editor.html", {**page, **context, "tested": True}, status=status)


def _served_version(rule_set: RuleSet, origin: dict[str, Any] | None) -> RuleSetVersion | None:
    """The published version that served the run the tester's inputs came from (None: the draft)."""
    number = (origin or {}).get("version")
    if not isinstance(number, int) or isinstance(number, bool):
        return None
    return rule_set.versions.filter(number=number).first()


def _tester_results(
    request: HtmxHttpRequest,
    rule_set: RuleSet,
    tester: TesterForm,
    *,
    execute: bool,
    origin: dict[str, Any] | None = None,
    confirmed: str = "",
) -> dict:
    draft = original_name = draft_note = None
    if "rule-name" in request.POST and not _is_blank_new_rule(request.POST):
        edit = RuleForm(request.POST, prefix="rule")
        if edit.is_valid():
            draft, original_name = edit.cleaned_data, request.POST.get("rule-original") or None
        else:
            draft_note = _("The rule you are editing has errors, so the tester uses its saved version.")
    arguments: dict[str, Any] = {
        "rule_set": rule_set,
        "sample": tester.to_request(),
        "draft": draft,
        "original_name": original_name,
        "pins": tester.cleaned_data.get("pinned") or [],
        "version": _served_version(rule_set, origin),
        "detail": "all" if request.POST.get("show") == "all" else "summary",
        "offset": typed_count(request.POST.get("offset")),
    }
    confirm = None
    result = tester_evaluate(**arguments, execute=False)
    if execute:
        # Live tools may act on the world (page a doctor, refund an order): the page's Execute first
        # names the calls it would make and runs them only once that exact list is confirmed.
        calls = live_calls(result, arguments["pins"])
        digest = live_calls_digest(calls)
        if calls and confirmed != digest:
            confirm = {"calls": calls, "token": f"1:{digest}"}
        else:
            result = tester_evaluate(**arguments, execute=True)
    execute = execute and confirm is None
    if result.edited:
        draft_note = _("Includes your unsaved edit of this rule.")
    evaluation = result.evaluation
    shown = tester_rows(result)
    # Skipped rules, and rules whose own `when` failed (no call): which operand said no, or failed.
    skipped = [
        rec.rule
        for rec in shown.records
        if rec.status is RuleStatus.SKIPPED or (rec.status is RuleStatus.ERROR and rec.tool_name is None)
    ]
    why = result.explain(skipped)
    rows = [(rec, evaluation.schema_errors.get(rec.rule), why.get(rec.rule)) for rec in shown.records]
    backend = result.backend
    pins = tester.cleaned_data.get("pinned") or []
    return {
        "confirm_execute": confirm,
        "execute": execute,
        "evaluation": evaluation,
        "tested_version": result.version,
        "draft_differs": result.draft_differs,
        "outcome": evaluation.outcome,
        "draft_note": draft_note,
        "request_json": json.dumps(result.sample.to_json(), ensure_ascii=False),
        "rows": rows,
        "shown": shown,
        "expected_json": json.dumps(result.expected, ensure_ascii=False),
        "expected": result.expected,
        "can_edit": has_role(request.user, "editor"),
        "pinned_rules": {
            rec.rule for rec in shown.records if rec.status is RuleStatus.FIRED and result.was_pinned(rec)
        },
        "pinned_count": len(backend.pinned_calls) if backend is not None else 0,
        "live_count": evaluation.outcome.calls - len(backend.pinned_calls) if backend is not None else 0,
        "pinned_json": json.dumps(pins, ensure_ascii=False) if pins else "",
        "a2a_extracted": tester.a2a_extracted(),
    }


# --- Versions -----------------------------------------------------------------------------------


@require_GET
@require_role("viewer")
def version_list(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Published versions, newest first, with publish, diff and restore."""
    rule_set = get_object_or_404(RuleSet, pk=pk)
    versions = selectors.version_list(rule_set=rule_set)
    return render(
        request,
        "rules/version_list.html",
        {
            "rule_set": rule_set,
            "versions": versions,
            "publish_form": PublishForm(initial={"revision": rule_set.revision}),
            "latest_agents": selectors.agents_following_latest(rule_set=rule_set, protected=False),
            "protected_agents": selectors.agents_following_latest(rule_set=rule_set, protected=True),
            "stage_agent": selectors.agent_to_stage(rule_set=rule_set),
            "can_edit": has_role(request.user, "editor"),
        },
    )


@require_POST
@require_role("editor")
def rule_set_publish(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    rule_set = get_object_or_404(RuleSet, pk=pk)
    form = PublishForm(request.POST)
    if form.is_valid():
        try:
            version = services.rule_set_publish(actor=request.user, rule_set=rule_set, **form.cleaned_data)
        except PendingApproval as exc:  # a protected agent serves it: a change request, not a version
            messages.info(request, str(exc))
            return redirect(exc.url)
        except RuleError as exc:
            messages.error(request, exc.message)
        else:
            messages.success(
                request,
                _("Published v%(number)s (%(content_hash)s).")
                % {"number": version.number, "content_hash": version.content_hash[:12]},
            )
    return redirect("rules:versions", pk=pk)


@require_GET
@require_role("viewer")
def version_diff(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Rule-by-rule differences between two versions (``a``, ``b``: numbers, or ``draft``)."""
    rule_set = get_object_or_404(RuleSet, pk=pk)
    sides = {}
    for key in ("a", "b"):
        value = request.GET.get(key, "draft")
        if value == "draft":
            sides[key] = ("draft", engine.rule_set_snapshot(rule_set))
        else:
            version = rule_set.versions.filter(number=_int(value) or -1).first()
            if version is None:
                messages.error(
                    request, _("There is no version %(value)r of this rule set.") % {"value": value}
                )
                return redirect("rules:versions", pk=pk)
            sides[key] = (f"v{version.number}", version.content)
    rows = selectors.version_diff(old=sides["a"][1], new=sides["b"][1])
    return render(
        request,
        "rules/version_diff.html",
        {
            "rule_set": rule_set,
            "a": sides["a"][0],
            "b": sides["b"][0],
            "rows": rows,
            "versions": selectors.version_list(rule_set=rule_set),
        },
    )


@require_POST
@require_role("editor")
def version_restore(request: HtmxHttpRequest, pk: int, number: int) -> HttpResponse:
    rule_set = get_object_or_404(RuleSet, pk=pk)
    version = get_object_or_404(RuleSetVersion, rule_set=rule_set, number=number)
    try:
        services.rule_set_restore(
            actor=request.user,
            rule_set=rule_set,
            version=version,
            revision=_int(request.POST.get("revision")),
        )
    except RuleError as exc:
        messages.error(request, exc.message)
        return redirect("rules:versions", pk=pk)
    messages.success(request, _("The draft now holds the rules of v%(number)s.") % {"number": version.number})
    if request.htmx:
        return HttpResponseClientRedirect(reverse("rules:editor", args=[pk]))
    return redirect("rules:editor", pk=pk)


# --- Audit --------------------------------------------------------------------------------------


@require_GET
@require_role("viewer")
def audit_list(request: HtmxHttpRequest) -> HttpResponse:
    """The audit log with filters (actor, object, action, time) and before/after of each event."""
    form = AuditFilterForm(request.GET or None)
    filters = form.cleaned_data if form.is_valid() else {}
    events = selectors.audit_list(**{k: v for k, v in filters.items() if v})
    page = Paginator(events, 50).get_page(request.GET.get("page"))
    template = "rules/audit_list.html#audit-table" if request.htmx else "rules/audit_list.html"
    return render(request, template, {"form": form, "page": page, "chain_check": chain_last_check()})


# --- Test cases ---------------------------------------------------------------------------------


@require_http_methods(["GET", "POST"])
@require_role("viewer")
def case_list(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """The rule set's regression cases; POST (editors) runs the suite on the draft."""
    rule_set = get_object_or_404(RuleSet, pk=pk)
    suite = None
    if request.method == "POST":
        if not has_role(request.user, "editor"):
            raise PermissionDenied(_("Running the suite needs the editor role."))
        suite = suite_run(rule_set=rule_set)
    return render(
        request,
        "rules/case_list.html",
        {
            "rule_set": rule_set,
            "cases": [
                (case, cases.case_modes(case), cases.case_notice_text(case))
                for case in rule_set.cases.order_by("name")
            ],
            "suite": suite,
            "can_edit": has_role(request.user, "editor"),
        },
    )


@require_POST
@require_role("editor")
def case_create(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Save a tester input as a case, with the expected outcome proposed from what fired.

    From the tester (htmx) the answer is a line in place: the editor and the tester keep their
    state, and the user keeps typing. Without JavaScript, the cases page."""
    rule_set = get_object_or_404(RuleSet, pk=pk)
    try:
        case = cases.case_create(
            actor=request.user,
            rule_set=rule_set,
            name=request.POST.get("name", ""),
            input=_json_post(request, "input"),
            expected=_expected_post(request),
            pinned=_json_post(request, "pinned"),
        )
    except RuleError as exc:
        return _case_saved(
            request, rule_set, None, error=exc.message, fallback=reverse("rules:editor", args=[pk])
        )
    return _case_saved(request, rule_set, case, updated=False)


def _case_saved(
    request: HtmxHttpRequest,
    rule_set: RuleSet,
    case: TestCase | None,
    *,
    updated: bool = False,
    error: str = "",
    fallback: str = "",
) -> HttpResponse:
    """How a save from the tester is answered: in place for htmx, a message and a redirect otherwise."""
    if request.htmx:
        modes = cases.case_modes(case) if case is not None and not error else []
        context = {"rule_set": rule_set, "case": case, "updated": updated, "error": error, "modes": modes}
        return render(request, "rules/_case_saved.html", context, status=422 if error else 200)
    if error:
        messages.error(request, _("The case was not saved: %(message)s") % {"message": error})
        return redirect(fallback)
    assert case is not None
    if updated:
        messages.success(request, _("Updated test case %(name)r.") % {"name": case.name})
    else:
        messages.success(request, _("Saved test case %(name)r.") % {"name": case.name})
    return redirect("rules:cases", pk=rule_set.pk)


@require_POST
@require_role("editor")
def case_update(request: HtmxHttpRequest, pk: int, case_pk: int) -> HttpResponse:
    """Save what the tester shows (its input and the proposed outcome) into an existing case."""
    case = get_object_or_404(TestCase, pk=case_pk, rule_set_id=pk)
    try:
        case = cases.case_update(
            actor=request.user,
            case=case,
            input=_json_post(request, "input"),
            expected=_expected_post(request),
            pinned=_json_post(request, "pinned") or [],
        )
    except RuleError as exc:
        fallback = f"{reverse('rules:editor', args=[pk])}?case={case.pk}"
        return _case_saved(request, case.rule_set, case, error=exc.message, fallback=fallback)
    return _case_saved(request, case.rule_set, case, updated=True)


@require_POST
@require_role("editor")
def case_delete(request: HtmxHttpRequest, pk: int, case_pk: int) -> HttpResponse:
    case = get_object_or_404(TestCase, pk=case_pk, rule_set_id=pk)
    cases.case_delete(actor=request.user, case=case)
    messages.success(request, _("Deleted test case %(name)r.") % {"name": case.name})
    return redirect("rules:cases", pk=pk)


def _expected_post(request: HttpRequest) -> object:
    """The tester's proposed outcome, made looser only where the user ticked a looser mode."""
    expected = _json_post(request, "expected")
    if not isinstance(expected, dict):
        return expected  # the service refuses it with its message
    return cases.case_expected_loosen(
        expected,
        allow_other_calls=request.POST.get("allow_other_calls") == "1",
        ignore_params=request.POST.get("ignore_params") == "1",
    )


def _json_post(request: HttpRequest, field: str) -> object:
    try:
        return strictjson.loads(request.POST.get(field) or "null")
    except strictjson.JSONInputError as exc:
        raise RuleError(f"{field}: {exc}.", field=field) from None


# --- Export and import --------------------------------------------------------------------------


@require_GET
@require_role("viewer")
def export_json(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """The draft and its cases as JSON (imports back exactly)."""
    rule_set = get_object_or_404(RuleSet, pk=pk)
    body = json.dumps(exporting.rule_set_export_json(rule_set), ensure_ascii=False, indent=2)
    response = HttpResponse(body, content_type="application/json; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{_filename(rule_set.name)}.json"'
    return response


@require_GET
@require_role("viewer")
def export_tools(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """The draft as an app/tools.py of @deterministic_tool functions for llamon_agent."""
    rule_set = get_object_or_404(RuleSet, pk=pk)
    try:
        body = exporting.rule_set_export_tools_py(rule_set)
    except RuleError as exc:
        messages.error(request, _("Cannot export as tools.py: %(message)s") % {"message": exc.message})
        return redirect("rules:editor", pk=pk)
    response = HttpResponse(body, content_type="text/x-python; charset=utf-8")
    response["Content-Disposition"] = 'attachment; filename="tools.py"'
    return response


@require_http_methods(["GET", "POST"])
@require_role("editor")
def import_json(request: HtmxHttpRequest) -> HttpResponse:
    """Import a rule set exported as JSON (pasted or uploaded) as a new set or into an existing draft."""
    error = None
    if request.method == "POST":
        upload = request.FILES.get("file")
        data = upload.read() if upload else request.POST.get("data", "").encode()
        replace = RuleSet.objects.filter(pk=_int(request.POST.get("replace")) or -1).first()
        try:
            rule_set = exporting.rule_set_import_json(
                actor=request.user, data=data, name=request.POST.get("name") or None, replace=replace
            )
        except RuleError as exc:
            error = exc.message
        else:
            messages.success(
                request,
                _("Imported %(count)s rules into %(name)s.")
                % {"count": rule_set.rules.count(), "name": rule_set.name},
            )
            return redirect("rules:editor", pk=rule_set.pk)
    return render(
        request,
        "rules/import.html",
        {"error": error, "rule_sets": selectors.rule_set_list(), "data": request.POST.get("data", "")},
        status=400 if error else 200,
    )


@require_http_methods(["GET", "POST"])
@require_role("editor")
def import_tools(request: HtmxHttpRequest) -> HttpResponse:
    """Import an app/tools.py: preview the rules and what is left out, then confirm to write them."""
    error = None
    preview = None
    source = ""
    filename = request.POST.get("filename") or "app/tools.py"
    replace = RuleSet.objects.filter(pk=_int(request.POST.get("replace")) or -1).first()
    if request.method == "POST":
        upload = request.FILES.get("file")
        raw = upload.read() if upload else request.POST.get("source", "").encode()
        if upload and upload.name:
            filename = f"app/{upload.name}" if "/" not in upload.name else upload.name
        try:
            # Browsers send a form's text with CRLF line ends: one form of the text for the hash.
            source = raw.decode("utf-8").replace("\r\n", "\n")
        except UnicodeDecodeError:
            source = ""
        try:
            if request.POST.get("action") == "confirm":
                rule_set, done = tools_import.rule_set_import_tools_py(
                    actor=request.user,
                    source=source or raw,
                    filename=filename,
                    name=request.POST.get("name") or None,
                    replace=replace,
                    sha256=request.POST.get("sha256") or "",
                )
                messages.success(
                    request,
                    _(
                        "Imported %(count)s rules from %(filename)s into %(name)s; %(left)s functions were left out."
                    )
                    % {
                        "count": len(done.rules),
                        "filename": filename,
                        "name": rule_set.name,
                        "left": len(done.untranslatable),
                    },
                )
                return redirect("rules:editor", pk=rule_set.pk)
            preview = tools_import.tools_py_preview(source or raw, filename=filename)
        except RuleError as exc:
            error = exc.message
            if request.POST.get("action") == "confirm":
                try:
                    preview = tools_import.tools_py_preview(source or raw, filename=filename)
                except RuleError:
                    preview = None
    return render(
        request,
        "rules/import_tools.html",
        {
            "error": error,
            "preview": preview,
            "source": source,
            "filename": filename,
            "name": request.POST.get("name", ""),
            "replace": replace,
            "rule_sets": selectors.rule_set_list(),
        },
        status=400 if error else 200,
    )


def _filename(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in name) or "rule-set"
