"""Import an ``app/tools.py``: a preview that writes nothing, then the rules written on confirmation.

The page, the API (``POST /api/rule-sets/import/tools-py``) and ``manage.py``-free ``llamon
import-tools`` all use the SDK's translator (``llamon_agent.tools_import``, parse only). Here the
translation gets its messages in the user's language, and a confirmed import goes through
:func:`rules.exporting.rule_set_import_json`, the JSON import: the same checks, the same audit
event (``rule_set.import``), all or nothing. The confirmation names the SHA-256 of the source the
user saw, so what is written is what was previewed.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from llamon_agent.tools_import import ToolsImport, ToolsImportError, Untranslatable, translate_tools_module
from rules.checks import rule_set_problems
from rules.errors import RuleError
from rules.exporting import rule_set_import_json
from rules.expr_messages import expr_text
from rules.models import RuleSet
from rules.services import rule_fields_check, rule_tool_check
from servers.models import McpServer

# The translator's reasons by code, in the interface's language; ``detail`` is the name or the
# checker's message the reason is about.
_REASONS = {
    "listed-twice": gettext_lazy("listed twice in DETERMINISTIC_TOOLS"),
    "not-defined": gettext_lazy("not a function defined in this module"),
    "redefined": gettext_lazy("the name is bound more than once in the module"),
    "not-decorated": gettext_lazy("not decorated with @deterministic_tool(mcp_id=...): it has no MCP server"),
    "decorators": gettext_lazy("has decorators besides @deterministic_tool"),
    "decorator": gettext_lazy('@deterministic_tool takes mcp_id="..." and stop=True|False only'),
    "mcp-id": gettext_lazy('mcp_id must be a literal MCP server id such as "order-service"'),
    "signature": gettext_lazy("a routing function takes exactly one argument, ctx"),
    "rule-name": gettext_lazy("the function name cannot be a rule name"),
    "no-call": gettext_lazy("never returns a tool call, so there is no rule to make"),
    "expression": gettext_lazy("the expression checker refuses the result: %(detail)s"),
    "assign": gettext_lazy("only assignments of one local name (x = ...) are translated"),
    "reassigned": gettext_lazy("the local %(detail)s is assigned more than once (a rule has no variables)"),
    "statement": gettext_lazy("%(detail)s cannot be translated into a rule"),
    "too-complex": gettext_lazy("more than %(detail)s paths through the function once its ifs are unfolded"),
    "module-too-complex": gettext_lazy(
        "the file has more than %(detail)s paths in all; this function and the ones after it are not translated"
    ),
    "too-long": gettext_lazy("the function is too long to translate (limit: %(detail)s)"),
    "loop-value": gettext_lazy(
        "uses the loop variable %(detail)s after the match: a rule keeps it only in a loop over "
        'ctx.a2a_data or ctx.a2a_files whose test cannot fail (.get(), "k" in part, ==)'
    ),
    "return": gettext_lazy('returns something other than None or {"tool_name": "...", "params": {...}}'),
    "tool-name": gettext_lazy("tool_name must be a literal text: a rule calls one named tool"),
    "tools": gettext_lazy(
        "%(detail)s: tools are objects in Python and dicts in a rule; only t.name in a comprehension "
        "over ctx.mcp_tools, and len(ctx.mcp_tools), are translated"
    ),
    "unbound": gettext_lazy("the local %(detail)s may be used before it is assigned"),
    "global": gettext_lazy("uses the module-level name %(detail)s: globals and imports are not translated"),
    "name": gettext_lazy("uses the name %(detail)s, which a rule does not have"),
    "ctx-attr": gettext_lazy("ctx has no attribute %(detail)s in Python"),
    "call": gettext_lazy("calls %(detail)s: calls of other functions are not translated"),
    "syntax": gettext_lazy("%(detail)s cannot be translated into a rule"),
}
_FILE_ERRORS = {
    "too-big": gettext_lazy("The file is too big to import (at most %(detail)s bytes or syntax-tree nodes)."),
    "not-utf8": gettext_lazy("The file is not UTF-8 text."),
    "nul": gettext_lazy("The file contains a NUL character."),
    "syntax": gettext_lazy("The file is not valid Python: %(detail)s."),
    "too-deep": gettext_lazy("The file is nested too deeply (more than %(detail)s levels)."),
    "tools-list": gettext_lazy(
        "DETERMINISTIC_TOOLS must be assigned once, as a list of the routing functions' names."
    ),
}


@dataclass
class ToolsPreview:
    """What an import would write, and what it leaves out; nothing is written to make it."""

    translation: ToolsImport
    sha256: str
    problems: list[dict[str, Any]]

    @property
    def blocking(self) -> list[dict[str, Any]]:
        """The problems that make a confirmation fail (the confirmation runs the same checks)."""
        return [p for p in self.problems if p["blocks"]]

    @property
    def rules(self) -> list[dict[str, Any]]:
        return [r.to_json() | {"function": r.function, "line": r.line} for r in self.translation.rules]

    @property
    def untranslatable(self) -> list[dict[str, Any]]:
        return [u.to_json() | {"message": untranslatable_message(u)} for u in self.translation.untranslatable]

    @property
    def notes(self) -> list[str]:
        return list(self.translation.notes)

    def to_json(self) -> dict[str, Any]:
        return {
            "filename": self.translation.filename,
            "sha256": self.sha256,
            "rules": self.rules,
            "untranslatable": self.untranslatable,
            "notes": self.notes,
            "problems": self.problems,
        }


def untranslatable_message(item: Untranslatable) -> str:
    """``file:line: function: reason`` in the interface's language."""
    template = _REASONS.get(item.code)
    detail = expr_text(item.expr_error) if item.expr_error is not None else item.detail
    reason = str(template) % {"detail": detail} if template is not None else item.reason
    return f"{item.file}:{item.line}: {item.function}: {reason}"


def tools_py_preview(source: str | bytes, *, filename: str = "app/tools.py") -> ToolsPreview:
    """Translate ``source`` (parsed, never run); RuleError when the file cannot be read at all."""
    raw = source.encode("utf-8", "surrogatepass") if isinstance(source, str) else bytes(source)
    try:
        translation = translate_tools_module(raw, filename=filename or "app/tools.py")
    except ToolsImportError as exc:
        template = _FILE_ERRORS.get(exc.code)
        message = str(template) % {"detail": exc.detail} if template is not None else exc.reason
        if exc.line:
            message = _("Line %(line)s: %(message)s") % {"line": exc.line, "message": message}
        raise RuleError(message, field="source") from None
    return ToolsPreview(
        translation=translation,
        sha256=hashlib.sha256(raw).hexdigest(),
        problems=preview_problems(translation),
    )


def preview_problems(translation: ToolsImport) -> list[dict[str, Any]]:
    """Every problem of the rules an import would write, before anything is written: what would
    refuse the confirmation (the checks a rule save runs: its expressions, a tool its server does
    not offer), then the rule editor's static checks against the registered servers (an unknown or
    disabled server, params that do not fit, a rule an earlier stop rule hides, a repeated rule, a
    DataPart value compared with a number), a function imported disabled, a default set name taken.
    Each: level, code, rule, function, line, message and whether it blocks the import."""
    rules = translation.rules
    servers = {s.mcp_id: s for s in McpServer.objects.filter(mcp_id__in={r.mcp_id for r in rules})}
    everyone = {s.mcp_id: s for s in McpServer.objects.all()} if rules else {}
    problems: list[dict[str, Any]] = []

    def add(rule: Any, level: str, code: str, message: str, *, blocks: bool = False) -> None:
        problems.append(
            {
                "level": level,
                "code": code,
                "rule": rule.name,
                "function": rule.function,
                "line": rule.line,
                "message": f"{translation.filename}:{rule.line}: {rule.name}: {message}",
                "blocks": blocks,
            }
        )

    blocked: set[str] = set()
    for rule in rules:
        try:
            rule_fields_check(
                name=rule.name,
                mcp_id=rule.mcp_id,
                tool_name=rule.tool_name,
                when=rule.when,
                params=rule.params,
            )
            rule_tool_check(
                mcp_id=rule.mcp_id,
                tool_name=rule.tool_name,
                server=servers.get(rule.mcp_id),
                registered=False,
            )
        except RuleError as exc:
            blocked.add(rule.name)
            add(
                rule,
                "error",
                "refused",
                _("the import would refuse it: %(reason)s") % {"reason": exc.message},
                blocks=True,
            )
    seen: dict[str, Any] = {}
    for rule in rules:  # a function named like another's split rule (f__tool): the import refuses both
        if rule.name in seen:
            blocked.add(rule.name)
            add(
                rule,
                "error",
                "name_clash",
                _("two rules would be named %(name)s (also from %(function)s): rename one of the functions")
                % {"name": rule.name, "function": seen[rule.name].function},
                blocks=True,
            )
        seen.setdefault(rule.name, rule)
    by_name = {r.name: r for r in rules}
    enabled = [r.to_json() for r in rules if r.enabled]
    found = rule_set_problems(enabled, everyone)
    for rule in rules:
        if not rule.enabled:
            add(
                rule,
                "warning",
                "disabled",
                _("decorated but not listed in DETERMINISTIC_TOOLS: imported disabled, it never runs"),
            )
            # A disabled rule's server and tool are still checked: the confirmation checks them.
            found[rule.name] = rule_set_problems([rule.to_json() | {"enabled": True}], everyone).get(
                rule.name, []
            )
    for name, items in found.items():
        for item in items:
            if item.code == "tool_missing" and name in blocked:
                continue  # said above, as what refuses the import
            add(by_name[name], item.level, item.code, item.message)
    default = _default_name(translation.filename)
    if rules and RuleSet.objects.filter(name=default).exists():
        problems.append(
            {
                "level": "warning",
                "code": "name_taken",
                "rule": "",
                "function": "",
                "line": 0,
                "message": _(
                    "A rule set named %(name)s exists already: give the new set another name or replace its draft."
                )
                % {"name": default},
                "blocks": False,
            }
        )
    order = {r.name: i for i, r in enumerate(rules)}
    problems.sort(key=lambda p: (not p["blocks"], order.get(p["rule"], -1)))
    return problems


def rule_set_import_tools_py(
    *,
    actor: Any,
    source: str | bytes,
    filename: str = "app/tools.py",
    name: str | None = None,
    replace: RuleSet | None = None,
    revision: int | None = None,
    sha256: str | None = None,
) -> tuple[RuleSet, ToolsPreview]:
    """Write the previewed rules as a new rule set (or into ``replace``'s draft); all or nothing, audited.

    ``sha256`` (of the source shown in the preview) must match when given: a file changed since
    the preview is refused instead of writing rules nobody saw.
    """
    preview = tools_py_preview(source, filename=filename)
    if sha256 is not None and sha256 != preview.sha256:
        raise RuleError(
            _("The file is not the one previewed (its SHA-256 differs); preview it again."), field="sha256"
        )
    if not preview.translation.rules:
        raise RuleError(
            _("No function of the file could be translated into a rule; nothing was imported."),
            field="source",
        )
    if preview.blocking:
        # Every problem the preview showed as blocking, at once: never the first one alone.
        raise RuleError(
            _("Nothing was imported: %(count)s rules would be refused.") % {"count": len(preview.blocking)}
            + "\n"
            + "\n".join(p["message"] for p in preview.blocking),
            field="source",
        )
    set_name = (name or "").strip() or _default_name(filename)
    description = _("Imported from %(filename)s.") % {"filename": filename or "app/tools.py"}
    document = preview.translation.ruleset(set_name, description)
    rule_set = rule_set_import_json(
        actor=actor, data=document, name=set_name, replace=replace, revision=revision
    )
    return rule_set, preview


def _default_name(filename: str) -> str:
    stem = (filename or "tools.py").replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
    return stem.removesuffix(".py") or "tools"
