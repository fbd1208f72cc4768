"""The rules app's API: rule sets, rules, versions and diffs, export/import, evaluate, checks, cases, audit.

MCP servers and the registry are the servers app's (servers/api.py).

Handlers authorize (``auth=roles(...)``), validate (a schema, or the pages' own form), make one
service or selector call and return. Domain errors become ErrorOut responses in llamon_web.api.
"""

from __future__ import annotations

from typing import Any

from django.http import Http404, HttpRequest
from django.utils.translation import gettext as _
from ninja import Query, Router, Status

from accounts.api_auth import require_api_role, roles
from core.api import CHANGE_REQUESTED, DbId, error_responses, get_or_404
from core.userinput import db_id
from rules import cases, content, engine, exporting, selectors, services
from rules.errors import RuleError
from rules.models import Rule, RuleSet, RuleSetVersion, TestCase
from rules.schemas import (
    AuditFilterIn,
    AuditPageOut,
    CaseIn,
    CaseOut,
    CasePatchIn,
    ContentIn,
    ContentOut,
    ContentSavedOut,
    DiffOut,
    EvaluateIn,
    EvaluateOut,
    ExportOut,
    ImportIn,
    ImportToolsIn,
    ImportToolsOut,
    ProblemOut,
    PublishIn,
    ReorderIn,
    RestoreIn,
    RuleIn,
    RuleOut,
    RulePatchIn,
    RuleSetIn,
    RuleSetOut,
    RuleSetPatchIn,
    SuiteOut,
    ToolsPyOut,
    VersionDetailOut,
    VersionOut,
)
from rules.tester import tester_evaluate
from rules.tools_import import rule_set_import_tools_py, tools_py_preview

router = Router()
VIEWER, EDITOR, ADMIN = roles("viewer"), roles("editor"), roles("admin")


# --- Rule sets -----------------------------------------------------------------------------------

SETS = ["rule-sets"]


def _rule_set(rule_set_id: int) -> RuleSet:
    return get_or_404(RuleSet, "rule set", pk=rule_set_id)


@router.get("/rule-sets", response={200: list[RuleSetOut], **error_responses()}, auth=VIEWER, tags=SETS)
def list_rule_sets(request: HttpRequest) -> Any:
    """Every rule set with its rule count and latest version number."""
    return selectors.rule_set_list()


@router.post("/rule-sets", response={201: RuleSetOut, **error_responses()}, auth=EDITOR, tags=SETS)
def create_rule_set(request: HttpRequest, payload: RuleSetIn) -> Any:
    """Create an empty rule set (editor)."""
    return Status(201, services.rule_set_create(actor=request.auth, **payload.dict()))


@router.post(
    "/rule-sets/import", response={201: RuleSetOut, **error_responses(404, 409)}, auth=EDITOR, tags=SETS
)
def import_rule_set(request: HttpRequest, payload: ImportIn) -> Any:
    """Import an exported document as a new rule set, or into an existing draft with ``replace`` (editor)."""
    replace = _rule_set(payload.replace) if payload.replace is not None else None
    rule_set = exporting.rule_set_import_json(
        actor=request.auth, data=payload.data, name=payload.name, replace=replace, revision=payload.revision
    )
    return Status(201, rule_set)


@router.post(
    "/rule-sets/import/tools-py",
    response={200: ImportToolsOut, 201: ImportToolsOut, **error_responses(404, 409)},
    auth=EDITOR,
    tags=SETS,
)
def import_tools_py(request: HttpRequest, payload: ImportToolsIn) -> Any:
    """Preview an ``app/tools.py`` as rules (200, nothing written), or write them with ``confirm`` (201; editor).

    The module is parsed, never run. The preview lists the rules in order and the functions that
    cannot be translated, each with its file, line and reason.
    """
    if not payload.confirm:
        return {"preview": tools_py_preview(payload.source, filename=payload.filename).to_json()}
    replace = _rule_set(payload.replace) if payload.replace is not None else None
    rule_set, preview = rule_set_import_tools_py(
        actor=request.auth,
        source=payload.source,
        filename=payload.filename,
        name=payload.name,
        replace=replace,
        revision=payload.revision,
        sha256=payload.sha256,
    )
    return Status(201, {"preview": preview.to_json(), "rule_set": rule_set})


@router.get(
    "/rule-sets/{rule_set_id}", response={200: RuleSetOut, **error_responses(404)}, auth=VIEWER, tags=SETS
)
def get_rule_set(request: HttpRequest, rule_set_id: DbId) -> Any:
    """One rule set (its ``revision`` is what writes send back)."""
    return _rule_set(rule_set_id)


@router.patch(
    "/rule-sets/{rule_set_id}",
    response={200: RuleSetOut, **error_responses(404, 409)},
    auth=EDITOR,
    tags=SETS,
)
def update_rule_set(request: HttpRequest, rule_set_id: DbId, payload: RuleSetPatchIn) -> Any:
    """Rename a rule set or change its description (editor; optimistic revision)."""
    return services.rule_set_update(
        actor=request.auth, rule_set=_rule_set(rule_set_id), **payload.dict(exclude_unset=True)
    )


@router.delete(
    "/rule-sets/{rule_set_id}", response={204: None, **error_responses(404)}, auth=EDITOR, tags=SETS
)
def delete_rule_set(request: HttpRequest, rule_set_id: DbId) -> Any:
    """Delete a rule set with its rules, versions and cases (editor); refused while an agent uses it."""
    services.rule_set_delete(actor=request.auth, rule_set=_rule_set(rule_set_id))
    return Status(204, None)


@router.get(
    "/rule-sets/{rule_set_id}/rules",
    response={200: list[RuleOut], **error_responses(404)},
    auth=VIEWER,
    tags=SETS,
)
def list_rules(request: HttpRequest, rule_set_id: DbId) -> Any:
    """The draft's rules in evaluation order."""
    return selectors.rule_list(rule_set=_rule_set(rule_set_id))


@router.get(
    "/rule-sets/{rule_set_id}/checks",
    response={200: list[ProblemOut], **error_responses(404)},
    auth=VIEWER,
    tags=SETS,
)
def list_checks(request: HttpRequest, rule_set_id: DbId) -> Any:
    """The draft's problems, rule by rule in evaluation order, against the servers' current tools
    (a vanished tool or params that no longer fit its schema: tool drift)."""
    found = selectors.rule_set_checks(_rule_set(rule_set_id))
    return [
        {"rule": name, "level": p.level, "code": p.code, "message": p.message}
        for name, problems in found.items()
        for p in problems
    ]


@router.post(
    "/rule-sets/{rule_set_id}/rules",
    response={201: RuleOut, **error_responses(404)},
    auth=EDITOR,
    tags=SETS,
)
def create_rule(request: HttpRequest, rule_set_id: DbId, payload: RuleIn) -> Any:
    """Append a rule to the draft (editor); expressions are compiled, errors name the field."""
    return Status(
        201, services.rule_create(actor=request.auth, rule_set=_rule_set(rule_set_id), **payload.dict())
    )


@router.get(
    "/rule-sets/{rule_set_id}/rules/{rule_id}",
    response={200: RuleOut, **error_responses(404)},
    auth=VIEWER,
    tags=SETS,
)
def get_rule(request: HttpRequest, rule_set_id: DbId, rule_id: DbId) -> Any:
    """One rule of the draft."""
    return get_or_404(Rule, "rule", pk=rule_id, rule_set_id=rule_set_id)


@router.patch(
    "/rule-sets/{rule_set_id}/rules/{rule_id}",
    response={200: RuleOut, **error_responses(404, 409)},
    auth=EDITOR,
    tags=SETS,
)
def update_rule(request: HttpRequest, rule_set_id: DbId, rule_id: DbId, payload: RulePatchIn) -> Any:
    """Change a rule (editor); ``revision`` must be the rule's current one, else 409 and nothing is overwritten."""
    rule = get_or_404(Rule, "rule", pk=rule_id, rule_set_id=rule_set_id)
    changes = payload.dict(exclude_unset=True)
    return services.rule_update(actor=request.auth, rule=rule, **changes)


@router.delete(
    "/rule-sets/{rule_set_id}/rules/{rule_id}",
    response={204: None, **error_responses(404)},
    auth=EDITOR,
    tags=SETS,
)
def delete_rule(request: HttpRequest, rule_set_id: DbId, rule_id: DbId) -> Any:
    """Remove a rule from the draft (editor)."""
    services.rule_delete(
        actor=request.auth, rule=get_or_404(Rule, "rule", pk=rule_id, rule_set_id=rule_set_id)
    )
    return Status(204, None)


@router.post(
    "/rule-sets/{rule_set_id}/reorder",
    response={200: list[RuleOut], **error_responses(404, 409)},
    auth=EDITOR,
    tags=SETS,
)
def reorder_rules(request: HttpRequest, rule_set_id: DbId, payload: ReorderIn) -> Any:
    """Put the draft's rules in a new order (editor): every rule id once."""
    rule_set = services.rule_set_reorder(
        actor=request.auth, rule_set=_rule_set(rule_set_id), order=payload.order, revision=payload.revision
    )
    return selectors.rule_list(rule_set=rule_set)


@router.post(
    "/rule-sets/{rule_set_id}/publish",
    response={201: VersionOut, **CHANGE_REQUESTED, **error_responses(404, 409)},
    auth=EDITOR,
    tags=SETS,
)
def publish_rule_set(request: HttpRequest, rule_set_id: DbId, payload: PublishIn) -> Any:
    """Freeze the draft into the next immutable version (editor)."""
    return Status(
        201, services.rule_set_publish(actor=request.auth, rule_set=_rule_set(rule_set_id), **payload.dict())
    )


@router.get(
    "/rule-sets/{rule_set_id}/versions",
    response={200: list[VersionOut], **error_responses(404)},
    auth=VIEWER,
    tags=SETS,
)
def list_versions(request: HttpRequest, rule_set_id: DbId) -> Any:
    """Published versions, newest first."""
    return selectors.version_list(rule_set=_rule_set(rule_set_id))


@router.get(
    "/rule-sets/{rule_set_id}/versions/{number}",
    response={200: VersionDetailOut, **error_responses(404)},
    auth=VIEWER,
    tags=SETS,
)
def get_version(request: HttpRequest, rule_set_id: DbId, number: DbId) -> Any:
    """One version with its frozen rules."""
    return get_or_404(RuleSetVersion, "version", rule_set_id=rule_set_id, number=number)


@router.post(
    "/rule-sets/{rule_set_id}/versions/{number}/restore",
    response={200: RuleSetOut, **error_responses(404, 409)},
    auth=EDITOR,
    tags=SETS,
)
def restore_version(request: HttpRequest, rule_set_id: DbId, number: DbId, payload: RestoreIn) -> Any:
    """Replace the draft's rules with a version's (editor); the version is unchanged."""
    rule_set = _rule_set(rule_set_id)
    version = get_or_404(RuleSetVersion, "version", rule_set_id=rule_set_id, number=number)
    return services.rule_set_restore(
        actor=request.auth, rule_set=rule_set, version=version, revision=payload.revision
    )


@router.get(
    "/rule-sets/{rule_set_id}/diff",
    response={200: DiffOut, **error_responses(404)},
    auth=VIEWER,
    tags=SETS,
)
def diff_versions(
    request: HttpRequest,
    rule_set_id: DbId,
    a: str = Query("draft", max_length=20, description="A version number, or 'draft'."),
    b: str = Query("draft", max_length=20, description="A version number, or 'draft'."),
) -> Any:
    """Rule-by-rule differences between two versions (or a version and the draft)."""
    rule_set = _rule_set(rule_set_id)
    sides = {key: _side(rule_set, value) for key, value in (("a", a), ("b", b))}
    rows = selectors.version_diff(old=sides["a"][1], new=sides["b"][1])
    return {"a": sides["a"][0], "b": sides["b"][0], "rows": rows}


def _side(rule_set: RuleSet, value: str) -> tuple[str, list[dict[str, Any]]]:
    if value == "draft":
        return "draft", engine.rule_set_snapshot(rule_set)
    number = db_id(value)  # "²".isdigit() is true and int() refuses it: that was a 500
    version = (
        get_or_404(RuleSetVersion, "version", rule_set_id=rule_set.pk, number=number)
        if number is not None
        else None
    )
    if version is None:
        raise Http404(f"There is no version {value!r} of rule set {rule_set.name!r}.")
    return f"v{version.number}", version.content


@router.get(
    "/rule-sets/{rule_set_id}/export",
    response={200: ExportOut, **error_responses(404)},
    auth=VIEWER,
    tags=SETS,
)
def export_rule_set(request: HttpRequest, rule_set_id: DbId) -> Any:
    """The draft and its cases as a llamon-ruleset/1 document (imports back exactly)."""
    return exporting.rule_set_export_json(_rule_set(rule_set_id))


@router.get(
    "/rule-sets/{rule_set_id}/content",
    response={200: ContentOut, **error_responses(404)},
    auth=VIEWER,
    tags=SETS,
)
def get_rule_set_content(request: HttpRequest, rule_set_id: DbId) -> Any:
    """The draft and cases with the revision they are at and the servers' tool lists (``llamon rules pull``)."""
    return content.rule_set_pull(_rule_set(rule_set_id))


@router.put(
    "/rule-sets/{rule_set_id}/content",
    response={200: ContentSavedOut, **error_responses(404, 409)},
    auth=EDITOR,
    tags=SETS,
)
def put_rule_set_content(request: HttpRequest, rule_set_id: DbId, payload: ContentIn) -> Any:
    """Replace the draft's rules and the cases with a document, all or nothing (editor; ``llamon rules push``).

    ``base`` is the content hash the document was pulled at: 409, with each change to resolve, only
    when the set changed since then in a way the push would undo. Without it, ``revision`` must be
    the set's current one. Cases the document does not name are deleted. The draft is edited;
    publishing stays its own step.
    """
    rule_set = _rule_set(rule_set_id)
    if payload.base is not None:
        saved, digest = content.rule_set_content_push(
            actor=request.auth, rule_set=rule_set, data=payload.data, bases=[*payload.ancestors, payload.base]
        )
        saved.content_sha256 = digest
        return saved
    if payload.revision is None:
        raise RuleError(_("Send base (the content_sha256 of the pull) or revision."), field="base")
    return exporting.rule_set_content_replace(
        actor=request.auth, rule_set=rule_set, data=payload.data, revision=payload.revision
    )


@router.get(
    "/rule-sets/{rule_set_id}/export/tools-py",
    response={200: ToolsPyOut, **error_responses(404)},
    auth=VIEWER,
    tags=SETS,
)
def export_tools_py(request: HttpRequest, rule_set_id: DbId) -> Any:
    """The draft as an ``app/tools.py`` of @deterministic_tool functions (source in ``source``)."""
    return {"filename": "tools.py", "source": exporting.rule_set_export_tools_py(_rule_set(rule_set_id))}


# --- Evaluate (the live tester) ------------------------------------------------------------------


@router.post(
    "/rule-sets/{rule_set_id}/evaluate",
    response={200: EvaluateOut, **error_responses(404)},
    auth=VIEWER,
    tags=SETS,
)
def evaluate_rule_set(request: HttpRequest, rule_set_id: DbId, payload: EvaluateIn) -> Any:
    """The pre-step of the draft on one request, as the live tester shows it; ``execute`` needs the editor role.

    Lists every rule that fired or failed, and of the others (skipped, not reached) the first 20,
    counted beyond (``counts``, ``omitted``); ``detail: "all"`` pages them 500 at a time (``offset``).
    """
    rule_set = _rule_set(rule_set_id)
    if payload.execute:
        require_api_role(request, "editor", "executing calls real tools.")
    result = tester_evaluate(
        rule_set=rule_set,
        sample=payload.to_request(),
        execute=payload.execute,
        draft=payload.draft_rule.dict() if payload.draft_rule is not None else None,
        original_name=payload.original_name,
        pins=payload.pinned or [],
        detail=payload.detail,
        offset=payload.offset,
    )
    return result.answer()


# --- Test cases ----------------------------------------------------------------------------------

CASES = ["cases"]


@router.get(
    "/rule-sets/{rule_set_id}/cases",
    response={200: list[CaseOut], **error_responses(404)},
    auth=VIEWER,
    tags=CASES,
)
def list_cases(request: HttpRequest, rule_set_id: DbId) -> Any:
    """The rule set's regression cases with their last results."""
    return _rule_set(rule_set_id).cases.order_by("name", "id")


@router.post(
    "/rule-sets/{rule_set_id}/cases",
    response={201: CaseOut, **error_responses(404)},
    auth=EDITOR,
    tags=CASES,
)
def create_case(request: HttpRequest, rule_set_id: DbId, payload: CaseIn) -> Any:
    """Add a regression case (editor): an input and its expected outcome."""
    return Status(
        201, cases.case_create(actor=request.auth, rule_set=_rule_set(rule_set_id), **payload.dict())
    )


@router.post(
    "/rule-sets/{rule_set_id}/cases/run",
    response={200: SuiteOut, **error_responses(404)},
    auth=EDITOR,
    tags=CASES,
)
def run_cases(request: HttpRequest, rule_set_id: DbId) -> Any:
    """Dry-run every case on the draft (editor: results are stored) and report pass, fail and changes."""
    suite = cases.suite_run(rule_set=_rule_set(rule_set_id))
    return {
        "total": len(suite.results),
        "passed": suite.passed,
        "failed": suite.failed,
        "ok": suite.ok,
        "results": [
            {
                "case_id": r.case.pk,
                "name": r.case.name,
                "passed": r.result.passed,
                "previous_passed": r.previous_passed,
                "changed": r.changed,
                "changes": r.changes,
                "problems": r.result.problems,
                "diff": r.result.diff,
            }
            for r in suite.results
        ],
    }


@router.get(
    "/rule-sets/{rule_set_id}/cases/{case_id}",
    response={200: CaseOut, **error_responses(404)},
    auth=VIEWER,
    tags=CASES,
)
def get_case(request: HttpRequest, rule_set_id: DbId, case_id: DbId) -> Any:
    """One case."""
    return get_or_404(TestCase, "test case", pk=case_id, rule_set_id=rule_set_id)


@router.patch(
    "/rule-sets/{rule_set_id}/cases/{case_id}",
    response={200: CaseOut, **error_responses(404)},
    auth=EDITOR,
    tags=CASES,
)
def update_case(request: HttpRequest, rule_set_id: DbId, case_id: DbId, payload: CasePatchIn) -> Any:
    """Change a case's name, input or expected outcome (editor)."""
    case = get_or_404(TestCase, "test case", pk=case_id, rule_set_id=rule_set_id)
    return cases.case_update(actor=request.auth, case=case, **payload.dict(exclude_unset=True))


@router.delete(
    "/rule-sets/{rule_set_id}/cases/{case_id}",
    response={204: None, **error_responses(404)},
    auth=EDITOR,
    tags=CASES,
)
def delete_case(request: HttpRequest, rule_set_id: DbId, case_id: DbId) -> Any:
    """Remove a case (editor)."""
    cases.case_delete(
        actor=request.auth, case=get_or_404(TestCase, "test case", pk=case_id, rule_set_id=rule_set_id)
    )
    return Status(204, None)


# --- Audit ---------------------------------------------------------------------------------------


@router.get("/audit", response={200: AuditPageOut, **error_responses()}, auth=VIEWER, tags=["audit"])
def list_audit(request: HttpRequest, filters: Query[AuditFilterIn]) -> Any:
    """Audit events, newest first, filtered by actor, object type, action prefix, time and object text."""
    events = selectors.audit_list(
        actor=filters.actor,
        object_type=filters.object_type,
        action=filters.action,
        since=filters.since,
        until=filters.until,
        query=filters.q,
    )
    return {"count": events.count(), "items": list(events[filters.offset : filters.offset + filters.limit])}
