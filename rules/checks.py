"""Static checks of a rule set, on the workbench: the engine's checks (llamon_agent.rule_checks)
against the registered servers, in the user's language.

The checks are the SDK's, so ``llamon rules test`` on a pulled directory gives the same problems
(tests/rules/test_checker_agrees.py). They read the servers' *current* tool lists, so a refresh
(from the server's page or the periodic check on the beat, servers.tasks) that removes a tool or
changes its schema flags the rules that use it at once: tool drift.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.utils.translation import gettext_lazy as _

from core.library_messages import library_text
from llamon_agent import rule_checks
from rules.engine import server_view
from rules.expr_messages import expr_text
from servers.models import McpServer

# The engine's messages (llamon_agent.rule_checks.CHECK_MESSAGES), marked for translation:
# tests/rules/test_checker_agrees.py checks that both tables agree.
CHECK_MESSAGES: dict[str, Any] = {
    "check.server_unknown": _("%(not_loaded)s: no server with this id is registered"),
    "check.server_disabled": _("%(not_loaded)s: the server is disabled"),
    "check.tools_unknown": _("The tools of %(mcp_id)r were never listed: refresh them on the server's page."),
    "check.tool_missing": _(
        "Tool %(tool)r is not in the current tool list of %(mcp_id)r (it has: %(names)s)."
    ),
    "check.params_mismatch": _("The params no longer fit the input schema of %(tool)r: %(reasons)s."),
    "check.param_required": _("%(name)r is required but the params do not set it"),
    "check.param_unknown": _("%(key)r is not a parameter of the tool"),
    "check.cost_over": "%(reason)s",  # the engine's own error, translated by its id (check_text)
    "check.unreachable_same": _(
        "Never fires: the earlier stop rule %(rule)r has the same condition and ends the pre-step first."
    ),
    "check.unreachable_always": _(
        "Never fires: the earlier stop rule %(rule)r always fires and ends the pre-step."
    ),
    "check.duplicate": _(
        "Same server, tool, condition and params as the earlier rule %(rule)r: the tool would be called twice."
    ),
    "check.datapart_number": _(
        "%(value)s is compared with a number, but a DataPart value may arrive as text "
        '(such as "86"): the whole pre-step then fails. Convert it: to_number(%(value)s, default) gives '
        "the number, or the default when the value is missing or not a number."
    ),
}


@dataclass(frozen=True)
class Problem:
    level: str  # "error" (the pre-step will fail or the rule is dead) | "warning"
    code: str
    message: str


def check_text(problem: rule_checks.Problem) -> str:
    """The problem's sentence in the user's language."""
    if problem.error is not None:  # cost_over: the engine's own message, translated by its id
        return expr_text(problem.error)
    params = dict(problem.params)
    if params.get("names") == "none":
        params["names"] = str(_("none"))
    if problem.reasons:
        params["reasons"] = "; ".join(
            library_text(value, "JSON Schema") if kind == "schema" else str(CHECK_MESSAGES[kind]) % value
            for kind, value in problem.reasons
        )
    template = CHECK_MESSAGES.get(problem.msg_id)
    return str(template) % params if template is not None else problem.message


def rule_set_problems(
    snapshot: Sequence[Mapping[str, Any]], servers: Mapping[str, McpServer]
) -> dict[str, list[Problem]]:
    """Problems per rule name (only rules that have some); disabled rules are not checked.
    ``servers``: every registered server by id (an id absent from it is an unknown server)."""
    found = rule_checks.rule_set_problems(
        snapshot, {mcp_id: server_view(server) for mcp_id, server in servers.items()}
    )
    return {
        name: [Problem(p.level, p.code, check_text(p)) for p in problems] for name, problems in found.items()
    }
