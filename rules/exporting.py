"""Rule sets out of and into llamon-web: a JSON file that round-trips exactly, and an ``app/tools.py``.

The JSON format (``llamon-ruleset/1``) is documented in docs/rulesets.md. An import is
checked in full before anything is written, each rule with the editor's own checks
(``rule_fields_check``) outside the write transaction; then the rules are written in bulk, with
their ``rule.create`` events, and the cases through ``case_create``, in one short transaction.
A rule the editor would refuse is refused here too and a bad rule leaves nothing behind.

The ``app/tools.py`` export turns each enabled rule into a readable ``@deterministic_tool``
function whose condition and params stay in the safe expression language
(``llamon_agent.expr``), so the project gets exactly the dashboard's pre-step results. Every
user string enters the generated code only as a literal built from ``repr()``; the output is
parsed again and checked statement by statement before it is returned.
"""

from __future__ import annotations

import ast
import builtins
import json
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone
from django.utils.translation import gettext as _

from core.audit import audit_record, audit_write, insert_many
from core.content_hash import sha256
from core.json_messages import json_error_reason
from llamon_agent import strictjson
from llamon_agent.expr import ExprError, check_rule_name, expression_rule
from llamon_agent.mcp.spec import MCP_ID_RE
from rules.cases import case_create, case_delete, case_expected_clean, case_input_clean, case_update
from rules.engine import SNAPSHOT_FIELDS, rule_set_snapshot, server_view
from rules.errors import STALE_MESSAGE, RuleError, StaleEditError, json_type_name
from rules.expr_messages import expr_reason, expr_text
from rules.models import Rule, RuleSet, RuleSetVersion
from rules.selectors import draft_state
from rules.services import RULE_FIELDS, rule_fields_check, rule_set_create, rule_tool_check
from servers.models import McpServer

FORMAT = "llamon-ruleset/1"
MAX_IMPORT_BYTES = 2 * 1024 * 1024
MAX_IMPORT_RULES = 2_000
MAX_IMPORT_CASES = 2_000

_TOP_KEYS = frozenset({"format", "name", "description", "rules", "cases"})
_RULE_DEFAULTS: dict[str, Any] = {"description": "", "params": "{}", "stop": False, "enabled": True}
_RULE_REQUIRED = ("name", "mcp_id", "tool_name", "when")
_RULE_TYPES: dict[str, type] = {
    "name": str,
    "description": str,
    "mcp_id": str,
    "tool_name": str,
    "when": str,
    "params": str,
    "stop": bool,
    "enabled": bool,
}
_CASE_KEYS = frozenset({"name", "input", "expected"})

# Names the generated module defines or imports; a rule named like one would replace it.
_MODULE_NAMES = frozenset(
    {"compile_when", "compile_params", "deterministic_tool", "DeterministicContext", "DETERMINISTIC_TOOLS"}
)
_LINE = 88  # ruff's and black's default line length: the exported file lands in someone else's project


# --- JSON ---------------------------------------------------------------------------------------


def rule_set_export_json(rule_set: RuleSet) -> dict[str, Any]:
    """The draft rules and the test cases of ``rule_set`` as a ``llamon-ruleset/1`` document."""
    return {
        "format": FORMAT,
        "name": rule_set.name,
        "description": rule_set.description,
        "rules": rule_set_snapshot(rule_set),
        "cases": [
            # "pinned" only when the case has pins: a file without them stays what it was.
            {"name": case.name, "input": case.input, "expected": case.expectation}
            | ({"pinned": case.pinned} if case.pinned else {})
            for case in rule_set.cases.order_by("name", "id")
        ],
    }


def rule_set_content(rule_set: RuleSet) -> dict[str, Any]:
    """What ``llamon rules pull`` writes: the export, the revision it is at, and its servers' tool lists.

    The servers are every registered one (not only those the rules name now): ``enabled``, ``listed``
    and the tools (name, description, input schema) that a dry run binds and the static checks read
    (rules.engine.server_view), so ``llamon rules test`` gives the workbench's answer with the engine
    alone, also after a rule on a server the set did not use before is added in git.
    """
    with transaction.atomic():  # the revision and the document read together
        current = RuleSet.objects.get(pk=rule_set.pk)
        document = rule_set_export_json(current)
        published_as = draft_state(rule_set=current).published_as
        servers = {server.mcp_id: server_view(server) for server in McpServer.objects.order_by("mcp_id")}
    return {
        "rule_set": current.pk,
        "name": current.name,
        "revision": current.revision,
        "published_as": published_as,
        "document": document,
        "servers": servers,
    }


def rule_set_content_replace(
    *, actor: Any, rule_set: RuleSet, data: Mapping[str, Any], revision: int
) -> RuleSet:
    """Replace the whole draft and the cases with ``data`` (a llamon-ruleset/1 document): ``llamon rules push``.

    The import with ``replace``, and the cases the document does not name are deleted; refused
    (StaleEditError) when ``revision`` is not the set's current one. All or nothing.
    """
    return rule_set_import_json(actor=actor, data=data, replace=rule_set, revision=revision, prune_cases=True)


def rule_set_import_json(
    *,
    actor: Any,
    data: Mapping[str, Any] | str | bytes,
    name: str | None = None,
    replace: RuleSet | None = None,
    revision: int | None = None,
    prune_cases: bool = False,
) -> RuleSet:
    """Create a rule set from an export (or replace the draft rules of ``replace``); all or nothing, audited.

    ``data`` is the parsed document or its JSON text; ``name`` overrides the file's name for a
    new set. With ``replace``, the set keeps its name (the file's and ``name`` are ignored), the
    file's description replaces its own, the file's cases are added or, when a case of that
    name exists, update it; other cases stay. ``revision`` (optional) is the set revision
    the user saw: a stale one is refused like any concurrent edit. With ``prune_cases``, the set's
    cases the file does not name are deleted (the file is the whole suite).
    """
    doc = _load(data)
    rules, cases = _checked_document(doc)
    description = doc.get("description", "")
    # Every check that needs no database runs before the write transaction: on SQLite that
    # transaction holds the one write lock, and compiling 2,000 rules inside it made other
    # editors' saves wait until they failed with "database is locked".
    for i, rule in enumerate(rules):
        _check_rule(index=i, rule=rule)
    _check_tools(rules)

    with transaction.atomic():
        if replace is None:
            target = _create_set(
                actor=actor, name=name if name is not None else doc["name"], description=description
            )
            before = None
        else:
            target, before = _clear_set(
                actor=actor, rule_set=replace, revision=revision, description=description
            )
        _import_rules(actor=actor, rule_set=target, rules=rules)
        existing = {c.name: c for c in target.cases.all()}
        for i, case in enumerate(cases):
            try:
                if case["name"].strip() in existing:
                    case_update(
                        actor=actor,
                        case=existing[case["name"].strip()],
                        input=case["input"],
                        expected=case["expected"],
                        pinned=case.get("pinned") or [],
                    )
                else:
                    case_create(actor=actor, rule_set=target, **case)
            except RuleError as exc:
                raise RuleError(
                    _("Case %(value)s %(name)r: %(message)s")
                    % {"value": i + 1, "name": case["name"], "message": exc.message},
                    field=f"cases.{i}.{exc.field or ''}".rstrip("."),
                ) from None
        if prune_cases:
            keep = {case["name"].strip() for case in cases}
            for stale in target.cases.exclude(name__in=keep).order_by("name", "id"):
                case_delete(actor=actor, case=stale)
        target.refresh_from_db()
        audit_record(
            actor=actor,
            action="rule_set.import",
            obj=target,
            before=before,
            # The rules' content is in their own rule.create events; here, what the file brought.
            after={
                "description": target.description,
                "rules": [r["name"] for r in rules],
                "cases": [c["name"] for c in cases],
            },
        )
    return target


def _load(data: Mapping[str, Any] | str | bytes) -> dict[str, Any]:
    """The document as a dict, refusing oversized input before parsing it."""
    if isinstance(data, (str, bytes)):
        raw = data.encode("utf-8") if isinstance(data, str) else data
        if len(raw) > MAX_IMPORT_BYTES:
            raise RuleError(_too_big(len(raw)))
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            raise RuleError(_("The file is not UTF-8 text; export it again from llamon-web.")) from None
        try:
            data = strictjson.loads(raw)
        except strictjson.JSONInputError as exc:
            if (err := exc.decode_error) is not None:
                raise RuleError(
                    _("The file is not valid JSON: line %(lineno)s, column %(colno)s: %(msg)s.")
                    % {"lineno": err.lineno, "colno": err.colno, "msg": json_error_reason(err.msg)}
                ) from None
            raise RuleError(_("The file is refused: %(exc)s.") % {"exc": exc}) from None
    if not isinstance(data, Mapping):
        raise RuleError(
            _("A rule set export is a JSON object, not %(data)s.") % {"data": json_type_name(data)}
        )
    try:
        size = len(json.dumps(data, ensure_ascii=False).encode("utf-8"))
    except (TypeError, ValueError, RecursionError):
        raise RuleError(_("The document holds values JSON cannot carry.")) from None
    if size > MAX_IMPORT_BYTES:
        raise RuleError(_too_big(size))
    return dict(data)


def _too_big(size: int) -> str:
    return (
        f"The file is {size / 1024 / 1024:.1f} MiB; imports are limited to {MAX_IMPORT_BYTES // 1024 // 1024} MiB. "
        "Split the rule set into smaller ones."
    )


def _checked_document(doc: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every structural check of the file, before any write: rules and cases with defaults filled in."""
    fmt = doc.get("format")
    if fmt != FORMAT:
        got = "no format tag" if fmt is None else f"format {fmt!r}"
        raise RuleError(
            _('This is not a llamon-web rule set export: expected "format": "%(FORMAT)s", found %(got)s.')
            % {"FORMAT": FORMAT, "got": got},
            field="format",
        )
    unknown = sorted(set(doc) - _TOP_KEYS)
    if unknown:
        raise RuleError(
            _("Unknown top-level key(s) %(join)s; expected %(join2)s.")
            % {"join": ", ".join(map(repr, unknown)), "join2": ", ".join(sorted(_TOP_KEYS))}
        )
    if not isinstance(doc.get("name"), str) or not doc["name"].strip():
        raise RuleError(_('"name" must be a non-empty text.'), field="name")
    if not isinstance(doc.get("description", ""), str):
        raise RuleError(_('"description" must be a text.'), field="description")
    rules = doc.get("rules")
    if not isinstance(rules, list):
        raise RuleError(
            _('"rules" must be a list of rules, not %(rules)s.') % {"rules": json_type_name(rules)},
            field="rules",
        )
    if len(rules) > MAX_IMPORT_RULES:
        raise RuleError(
            _("The file has %(n_rules)s rules; imports are limited to %(MAX_IMPORT_RULES)s.")
            % {"n_rules": format(len(rules), ","), "MAX_IMPORT_RULES": format(MAX_IMPORT_RULES, ",")},
            field="rules",
        )
    cases = doc.get("cases", [])
    if not isinstance(cases, list):
        raise RuleError(
            _('"cases" must be a list of test cases, not %(cases)s.') % {"cases": json_type_name(cases)},
            field="cases",
        )
    if len(cases) > MAX_IMPORT_CASES:
        raise RuleError(
            _("The file has %(n_cases)s test cases; imports are limited to %(MAX_IMPORT_CASES)s.")
            % {"n_cases": format(len(cases), ","), "MAX_IMPORT_CASES": format(MAX_IMPORT_CASES, ",")},
            field="cases",
        )

    checked_rules: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for i, rule in enumerate(rules):
        label = f"Rule {i + 1}"
        if not isinstance(rule, dict):
            raise RuleError(
                _("%(label)s: a rule is an object, not %(rule)s.")
                % {"label": label, "rule": json_type_name(rule)},
                field=f"rules.{i}",
            )
        if isinstance(rule.get("name"), str):
            label = f"Rule {i + 1} {rule['name']!r}"
        extra = sorted(set(rule) - set(_RULE_TYPES))
        if extra:
            raise RuleError(
                _("%(label)s: unknown field(s) %(join)s; a rule has %(join2)s.")
                % {"label": label, "join": ", ".join(map(repr, extra)), "join2": ", ".join(SNAPSHOT_FIELDS)},
                field=f"rules.{i}",
            )
        for key in _RULE_REQUIRED:
            if key not in rule:
                raise RuleError(
                    _("%(label)s: the field %(key)r is missing.") % {"label": label, "key": key},
                    field=f"rules.{i}.{key}",
                )
        full = {**_RULE_DEFAULTS, **rule}
        for key, kind in _RULE_TYPES.items():
            if type(full[key]) is not kind:
                wanted = "true or false" if kind is bool else "a text"
                raise RuleError(
                    _("%(label)s: %(key)s must be %(wanted)s, not %(full)s.")
                    % {"label": label, "key": key, "wanted": wanted, "full": json_type_name(full[key])},
                    field=f"rules.{i}.{key}",
                )
        if full["name"] in seen:
            raise RuleError(
                _("%(label)s: the name is used twice (also by rule %(value)s).")
                % {"label": label, "value": seen[full["name"]] + 1},
                field=f"rules.{i}.name",
            )
        seen[full["name"]] = i
        checked_rules.append({key: full[key] for key in SNAPSHOT_FIELDS})

    checked_cases: list[dict[str, Any]] = []
    case_names: set[str] = set()
    for i, case in enumerate(cases):
        label = f"Case {i + 1}"
        if not isinstance(case, dict):
            raise RuleError(
                _("%(label)s: a test case is an object, not %(case)s.")
                % {"label": label, "case": json_type_name(case)},
                field=f"cases.{i}",
            )
        if isinstance(case.get("name"), str):
            label = f"Case {i + 1} {case['name']!r}"
        if not _CASE_KEYS <= set(case) <= _CASE_KEYS | {"pinned"}:
            raise RuleError(
                _(
                    "%(label)s: a test case has exactly the fields name, input and expected (and optionally pinned)."
                )
                % {"label": label},
                field=f"cases.{i}",
            )
        if not isinstance(case["name"], str) or not case["name"].strip():
            raise RuleError(
                _("%(label)s: the name must be a non-empty text.") % {"label": label}, field=f"cases.{i}.name"
            )
        if case["name"].strip() in case_names:
            raise RuleError(
                _("%(label)s: the name is used twice.") % {"label": label}, field=f"cases.{i}.name"
            )
        case_names.add(case["name"].strip())
        try:
            case_input_clean(case["input"])
            case_expected_clean(case["expected"])
        except RuleError as exc:
            raise RuleError(
                f"{label}: {exc.message}", field=f"cases.{i}.{exc.field}" if exc.field else f"cases.{i}"
            ) from None
        checked_cases.append(
            {"name": case["name"], "input": case["input"], "expected": case["expected"]}
            | ({"pinned": case["pinned"]} if case.get("pinned") else {})
        )
    return checked_rules, checked_cases


def _create_set(*, actor: Any, name: Any, description: str) -> RuleSet:
    if not isinstance(name, str):
        raise RuleError(_("The rule set name must be a text."), field="name")
    return rule_set_create(actor=actor, name=name, description=description)


def _clear_set(
    *, actor: Any, rule_set: RuleSet, revision: int | None, description: str
) -> tuple[RuleSet, dict[str, Any]]:
    """Lock the set, check the revision, drop its draft rules; returns it and the audit 'before'."""
    locked = RuleSet.objects.select_for_update().get(pk=rule_set.pk)
    if revision is not None and revision != locked.revision:
        raise StaleEditError(
            STALE_MESSAGE.format(
                what=f"Rule set {locked.name!r}", who="someone else", theirs=locked.revision, yours=revision
            )
        )
    before = {"description": locked.description, "rules": rule_set_snapshot(locked)}
    locked.rules.all().delete()
    # One bump for the replacement itself: an import of zero rules still changes the draft.
    RuleSet.objects.filter(pk=locked.pk).update(
        revision=F("revision") + 1, description=description, updated_at=timezone.now()
    )
    locked.refresh_from_db()
    return locked, before


def _check_tools(rules: list[dict[str, Any]]) -> None:
    """Each rule's tool is one its server offers, as a rule save checks it (one query for all)."""
    servers = {s.mcp_id: s for s in McpServer.objects.filter(mcp_id__in={r["mcp_id"] for r in rules})}
    for i, rule in enumerate(rules):
        try:
            rule_tool_check(
                mcp_id=rule["mcp_id"],
                tool_name=rule["tool_name"],
                server=servers.get(rule["mcp_id"]),
                registered=False,
            )
        except RuleError as exc:
            raise RuleError(
                _("Rule %(value)s %(name)r: %(message)s")
                % {"value": i + 1, "name": rule["name"], "message": exc.message},
                field=f"rules.{i}.{exc.field}",
            ) from None


def _check_rule(*, index: int, rule: dict[str, Any]) -> None:
    try:
        rule_fields_check(**{k: rule[k] for k in ("name", "mcp_id", "tool_name", "when", "params")})
    except RuleError as exc:
        # The editor's message names the field; the import adds which rule of the file it was.
        raise RuleError(
            _("Rule %(value)s %(name)r: %(message)s")
            % {"value": index + 1, "name": rule["name"], "message": exc.message},
            field=f"rules.{index}.{exc.field}" if exc.field else f"rules.{index}",
        ) from None


def _import_rules(*, actor: Any, rule_set: RuleSet, rules: list[dict[str, Any]]) -> None:
    """Append the checked rules to the (empty) draft, each with its rule.create event.

    What rule_create does one rule at a time (a lock, a check, a bump, an event: thousands of
    statements inside the write transaction) in two INSERTs run with executemany: the set is new
    or was just emptied and the file's names are unique, so no check needs the database. Rows
    are prepared by the model fields (the same conversions Django's save makes), not bulk_create,
    whose per-row SQL compilation took seconds of the write lock for 2,000 rules.
    """
    if not rules:
        return
    user = actor if getattr(actor, "is_authenticated", False) else None
    now = timezone.now()
    rows = [{**rule, "position": i + 1} for i, rule in enumerate(rules)]
    insert_many(
        Rule,
        [
            {**row, "rule_set": rule_set.pk, "revision": 1, "updated_at": now, "updated_by": user and user.pk}
            for row in rows
        ],
    )
    # One revision per rule, as rule_create counts them.
    RuleSet.objects.filter(pk=rule_set.pk).update(revision=F("revision") + len(rules), updated_at=now)
    ids = dict(Rule.objects.filter(rule_set=rule_set).values_list("name", "pk"))
    audit_write(
        actor=actor,
        events=[
            {
                "action": "rule.create",
                "object_type": Rule._meta.label_lower,
                "object_id": str(ids[row["name"]]),
                "object_repr": row["name"][:200],
                "after": {k: row[k] for k in RULE_FIELDS},
            }
            for row in rows
        ],
    )


# --- app/tools.py -------------------------------------------------------------------------------


def rule_set_export_tools_py(
    rule_set_or_snapshot: RuleSet | RuleSetVersion | Sequence[Mapping[str, Any]], *, title: str | None = None
) -> str:
    """An ``app/tools.py`` of ``@deterministic_tool`` functions giving the same pre-step results; RuleError if a rule cannot be exported."""
    snapshot, label, content_hash = _export_source(rule_set_or_snapshot)
    if title is not None:
        label = title
    rules = [_checked_export_rule(i, dict(r)) for i, r in enumerate(snapshot)]
    enabled = [r for r in rules if r["enabled"]]
    _check_names(rules)

    # The whole hash: a served agent reads this line back (llamon_agent.project.served_version) and
    # its runs carry the version and hash it serves.
    header = f"Routing rules exported from llamon-web {label} (content sha256 {content_hash})."
    out = [
        _lit(header),
        "",
        "from llamon_agent.expr import compile_params, compile_when",
        "from llamon_agent.tools import DeterministicContext, deterministic_tool",
    ]
    disabled = [r["name"] for r in rules if not r["enabled"]]
    if disabled:
        # Names are checked identifiers, so they are safe inside a comment.
        out += ["", f"# Disabled in llamon-web, so left out: {', '.join(disabled)}."]
    for n, rule in enumerate(enabled):
        # isort wants one blank line after the imports, ruff format two around each function.
        out += ["", *_rule_lines(rule)] if n == 0 else ["", "", *_rule_lines(rule)]
    out += ["", ""] if enabled else [""]
    if enabled:
        out += ["DETERMINISTIC_TOOLS = [", *(f"    {r['name']}," for r in enabled), "]"]
    else:
        out += ["DETERMINISTIC_TOOLS = []"]
    source = "\n".join(out) + "\n"
    _verify(source, enabled, header)
    return source


def _export_source(obj: Any) -> tuple[list[Mapping[str, Any]], str, str]:
    """(snapshot, label for the header, content hash) of a rule set, a version or a plain snapshot."""
    if isinstance(obj, RuleSet):
        snapshot = rule_set_snapshot(obj)
        return snapshot, f"rule set {obj.name!r} (draft revision {obj.revision})", sha256(snapshot)
    if isinstance(obj, RuleSetVersion):
        content = obj.content
        snapshot = content.get("rules", []) if isinstance(content, dict) else content
        return (
            list(snapshot),
            f"rule set {obj.rule_set.name!r} version {obj.number}",
            obj.content_hash or sha256(snapshot),
        )
    if isinstance(obj, Sequence) and not isinstance(obj, (str, bytes)):
        snapshot = list(obj)
        return snapshot, "rule snapshot", sha256([dict(r) for r in snapshot])
    raise TypeError(
        f"cannot export {type(obj).__name__}: pass a RuleSet, a RuleSetVersion or a snapshot list"
    )


def _checked_export_rule(index: int, rule: dict[str, Any]) -> dict[str, Any]:
    """The rule with defaults, checked so that the generated module imports and behaves like the dashboard."""
    full = {**_RULE_DEFAULTS, **rule}
    name = full.get("name")
    label = f"Rule {index + 1} {name!r}" if isinstance(name, str) else f"Rule {index + 1}"
    for key in SNAPSHOT_FIELDS:
        value = full.get(key)
        if type(value) is not _RULE_TYPES[key]:
            raise RuleError(
                _("%(label)s: %(key)s must be %(value)s.")
                % {
                    "label": label,
                    "key": key,
                    "value": _("true or false") if _RULE_TYPES[key] is bool else _("a text"),
                },
                field=key,
            )
        if isinstance(value, str) and "\x00" in value:
            raise RuleError(
                _("%(label)s: %(key)s contains a NUL character, which cannot be exported.")
                % {"label": label, "key": key},
                field=key,
            )
    try:
        check_rule_name(name)
    except ExprError as exc:
        raise RuleError(f"{label}: {expr_reason(exc)}", field="name") from None
    if not MCP_ID_RE.match(full["mcp_id"]):
        raise RuleError(
            _("%(label)s: %(mcp_id)r is not a valid MCP server id.")
            % {"label": label, "mcp_id": full["mcp_id"]},
            field="mcp_id",
        )
    if full["enabled"]:
        # Compiling here means the module never fails at import time on a bad expression.
        try:
            expression_rule(
                name=name,
                mcp_id=full["mcp_id"],
                tool_name=full["tool_name"],
                when=full["when"],
                params=full["params"],
                stop=full["stop"],
            )
        except ExprError as exc:
            raise RuleError(f"{label}: {expr_text(exc)}", field=exc.field) from None
    return {key: full[key] for key in SNAPSHOT_FIELDS}


def _check_names(rules: list[dict[str, Any]]) -> None:
    """Refuse names that would collide in, or break, the generated module."""
    names = [r["name"] for r in rules]
    helpers = {f"_{n}_{part}": n for n in names for part in ("when", "params")}
    seen: set[str] = set()
    for rule in rules:
        name = rule["name"]
        why = None
        if name in seen:
            why = "is used by two rules"
        elif name.startswith("__") and name.endswith("__"):
            why = "is a Python special name (it would change how the module itself behaves)"
        elif name in _MODULE_NAMES:
            why = "is a name the exported module itself uses"
        elif name in helpers and helpers[name] != name:
            why = f"collides with the generated helper of rule {helpers[name]!r}"
        elif hasattr(builtins, name):
            why = "shadows a Python built-in"
        if why:
            raise RuleError(
                _("Rule %(name)r cannot be exported to app/tools.py: the name %(why)s. Rename the rule.")
                % {"name": name, "why": why},
                field="name",
            )
        seen.add(name)


def _rule_lines(rule: dict[str, Any]) -> list[str]:
    name = rule["name"]
    lines = [
        _call_line(f"_{name}_when = compile_when(", [_lit(rule["when"])]),
        _call_line(f"_{name}_params = compile_params(", [_lit(rule["params"])]),
        "",
        "",
    ]
    args = [f"mcp_id={_lit(rule['mcp_id'])}"] + (["stop=True"] if rule["stop"] else [])
    lines.append(_call_line("@deterministic_tool(", args))
    signature = f"def {name}(ctx: DeterministicContext) -> dict | None:"
    if _width(signature) <= _LINE:
        lines.append(signature)
    else:
        lines += [f"def {name}(", "    ctx: DeterministicContext,", ") -> dict | None:"]
    # Formatters strip a docstring's outer whitespace; stripping first keeps the file format-stable.
    doc = rule["description"].strip()
    if doc:
        lines.append(f"    {_lit(doc)}")
    lines += [
        _ctx_call(f"    if not _{name}_when(", "):"),
        "        return None",
        "    return {",
        f'        "tool_name": {_lit(rule["tool_name"])},',
        _ctx_call(f'        "params": _{name}_params(', "),"),
        "    }",
    ]
    return lines


def _ctx_call(opening: str, closing: str) -> str:
    """``opening`` + ``ctx`` + ``closing``, split the way ruff format splits a call that is too long."""
    flat = f"{opening}ctx{closing}"
    if _width(flat) <= _LINE:
        return flat
    indent = " " * (len(opening) - len(opening.lstrip()))
    return f"{opening}\n{indent}    ctx\n{indent}{closing.lstrip()}"


def _call_line(opening: str, args: list[str]) -> str:
    """``opening`` + args + ``)`` laid out the way ruff format would (line length 88)."""
    flat = opening + ", ".join(args) + ")"
    if _width(flat) <= _LINE:
        return flat
    inner = "    " + ", ".join(args)
    if len(args) == 1 or _width(inner) <= _LINE:
        return f"{opening}\n{inner}\n)"
    return opening + "\n" + "\n".join(f"    {a}," for a in args) + "\n)"


def _width(line: str) -> int:
    """Display width as formatters measure it: East Asian wide characters count twice (Korean)."""
    return sum(
        2 if unicodedata.east_asian_width(c) in "WF" else 0 if unicodedata.combining(c) else 1 for c in line
    )


def _lit(text: str) -> str:
    """A Python string literal for ``text``, built from ``repr()`` (quote style as ruff format prefers)."""
    singles, doubles = text.count("'"), text.count('"')
    if doubles > singles:
        # Fewer escapes with single quotes: repr() picks them itself here.
        literal = repr(text)
    else:
        # repr() of a piece without '"' escapes every control, separator and non-printable
        # character and never ends in a lone backslash; joining with \" is therefore safe.
        literal = '"' + '\\"'.join(repr(piece)[1:-1] for piece in text.split('"')) + '"'
    if ast.literal_eval(literal) != text:  # belt and braces: never emit a literal we did not mean
        literal = repr(text)
    return literal


# --- self-check of the generated module -----------------------------------------------------


def _verify(source: str, rules: list[dict[str, Any]], header: str) -> None:
    """Parse the output and check it holds exactly the intended statements and values."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:  # pragma: no cover - a bug in this module, never user input
        raise RuleError(
            _("internal error: the generated app/tools.py does not parse (%(msg)s)") % {"msg": exc.msg}
        ) from None
    body = list(tree.body)
    expected_imports = [
        ("llamon_agent.expr", ["compile_params", "compile_when"]),
        ("llamon_agent.tools", ["DeterministicContext", "deterministic_tool"]),
    ]
    ok = _const(body.pop(0)) == header if body else False
    for module, names in expected_imports:
        stmt = body.pop(0) if body else None
        ok = ok and isinstance(stmt, ast.ImportFrom) and stmt.module == module and stmt.level == 0
        ok = ok and [a.name for a in stmt.names] == names and all(a.asname is None for a in stmt.names)
    for rule in rules:
        if not ok:
            break
        ok = len(body) >= 3 and _is_compile(body[0], f"_{rule['name']}_when", "compile_when", rule["when"])
        ok = ok and _is_compile(body[1], f"_{rule['name']}_params", "compile_params", rule["params"])
        ok = ok and _is_rule_function(body[2], rule)
        body = body[3:]
    if ok:
        names = [r["name"] for r in rules]
        last = body.pop(0) if len(body) == 1 else None
        ok = (
            isinstance(last, ast.Assign)
            and [_name(t) for t in last.targets] == ["DETERMINISTIC_TOOLS"]
            and isinstance(last.value, ast.List)
            and [_name(e) for e in last.value.elts] == names
        )
    if not ok:  # pragma: no cover - a bug in this module, never user input
        raise RuleError(
            _(
                "internal error: the generated app/tools.py does not have the expected shape; nothing was exported"
            )
        )


def _const(node: ast.AST | None) -> Any:
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and type(node.value.value) is str:
        return node.value.value
    return None


def _name(node: ast.AST) -> str | None:
    return node.id if isinstance(node, ast.Name) else None


def _is_compile(node: ast.AST, target: str, func: str, source: str) -> bool:
    return (
        isinstance(node, ast.Assign)
        and [_name(t) for t in node.targets] == [target]
        and isinstance(node.value, ast.Call)
        and _name(node.value.func) == func
        and not node.value.keywords
        and len(node.value.args) == 1
        and isinstance(node.value.args[0], ast.Constant)
        and node.value.args[0].value == source
        and type(node.value.args[0].value) is str
    )


def _is_rule_function(node: ast.AST, rule: dict[str, Any]) -> bool:
    if not isinstance(node, ast.FunctionDef) or node.name != rule["name"] or len(node.decorator_list) != 1:
        return False
    deco = node.decorator_list[0]
    if not (isinstance(deco, ast.Call) and _name(deco.func) == "deterministic_tool" and not deco.args):
        return False
    kwargs = {k.arg: k.value for k in deco.keywords}
    want = {"mcp_id": rule["mcp_id"], **({"stop": True} if rule["stop"] else {})}
    if set(kwargs) != set(want) or any(
        not isinstance(v, ast.Constant) or v.value != want[k] for k, v in kwargs.items()
    ):
        return False
    args = node.args
    if [a.arg for a in args.args] != ["ctx"] or args.vararg or args.kwarg or args.kwonlyargs or args.defaults:
        return False
    statements = list(node.body)
    doc = rule["description"].strip()
    if doc and (not statements or _const(statements.pop(0)) != doc):
        return False
    expected = (
        f"if not _{rule['name']}_when(ctx):\n    return None\n"
        f"return {{'tool_name': {rule['tool_name']!r}, 'params': _{rule['name']}_params(ctx)}}"
    )
    return [ast.dump(s) for s in statements] == [ast.dump(s) for s in ast.parse(expected).body]
