"""Static checks of a rule set: problems visible without running anything.

Per rule: its server is unknown or disabled, its tool is not in the server's current tool list,
its params no longer fit the tool's input schema, an earlier ``stop`` rule with the same
condition always fires first, it repeats an earlier rule.

The checks read the servers' *current* tool lists, so a refresh (from the server's page or the
periodic check on the beat, servers.tasks) that removes a tool or changes its schema flags the
rules that use it at once: tool drift. Params are checked statically here as far as the params
expression is a dict literal (its keys, and the values that are literals); what they evaluate to
on a given input is checked by the tester (rules.engine.evaluate).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.utils.translation import gettext as _

from core.library_messages import library_text
from llamon_agent.expr import ExprError, check_rule_cost, expression_rule
from llamon_agent.expr.reads import DYNAMIC, reads
from llamon_agent.mcp.schemas import schema_errors
from llamon_agent.prestep import MCP_NOT_LOADED
from rules.expr_messages import expr_text
from rules.type_checks import datapart_number_warnings
from servers.models import McpServer


@dataclass(frozen=True)
class Problem:
    level: str  # "error" (the pre-step will fail or the rule is dead) | "warning"
    code: str
    message: str


def _normal(source: str) -> str:
    """The expression's normal form (the engine's), so that spacing and line breaks don't count."""
    return reads(source).normal


def _cost_problems(rule: Mapping[str, Any]) -> list[Problem]:
    """A rule over the per-rule cost limit (saved before an upgrade, or under a higher limit): it
    still runs, under its run-time meter, but a save or a new version would refuse it."""
    try:
        check_rule_cost(
            expression_rule(name="r", mcp_id="m", tool_name="t", when=rule["when"], params=rule["params"])
        )
    except ExprError as exc:
        if exc.msg_id in ("expr.cost_bound", "rule.cost_bound"):
            return [Problem("warning", "cost_over", expr_text(exc))]
    return []  # (an expression that does not compile is reported where it is saved)


def _tool(server: McpServer, name: str) -> Mapping[str, Any] | None:
    return next((t for t in server.tools if t.get("name") == name), None)


def _params_problems(source: str, tool: Mapping[str, Any]) -> list[Problem]:
    """Where the params (as far as they are literal) no longer fit the tool's input schema."""
    schema = tool.get("input_schema") or {}
    literal = reads(source).params if isinstance(schema, Mapping) and schema else None
    if literal is None:
        return []
    params, complete = literal
    reasons: list[str] = []
    if complete:
        required = schema.get("required") or []
        missing = [name for name in required if isinstance(name, str) and name not in params]
        reasons += [
            _("%(name)r is required but the params do not set it") % {"name": name} for name in missing
        ]
    # The literal values (dynamic ones left out) against the schema, required keys aside.
    known = {key: value for key, value in params.items() if value is not DYNAMIC}
    properties = schema.get("properties")
    if schema.get("additionalProperties") is False and isinstance(properties, Mapping):
        reasons += [
            _("%(key)r is not a parameter of the tool") % {"key": key}
            for key in params
            if key not in properties
        ]
    loose = {k: v for k, v in schema.items() if k not in ("required", "additionalProperties")}
    reasons += [library_text(reason, "JSON Schema") for reason in schema_errors(loose, known, limit=5)]
    if not reasons:
        return []
    return [
        Problem(
            "error",
            "params_mismatch",
            _("The params no longer fit the input schema of %(tool)r: %(reasons)s.")
            % {"tool": tool["name"], "reasons": "; ".join(reasons)},
        )
    ]


def rule_set_problems(
    snapshot: Sequence[Mapping[str, Any]], servers: Mapping[str, McpServer]
) -> dict[str, list[Problem]]:
    """Problems per rule name (only rules that have some); disabled rules are not checked."""
    problems: dict[str, list[Problem]] = {}
    stop_conditions: dict[str, str] = {}  # normalized when -> name of the earlier stop rule
    seen_calls: dict[tuple[str, str, str, str], str] = {}
    for rule in snapshot:
        if not rule.get("enabled", True):
            continue
        found: list[Problem] = []
        server = servers.get(rule["mcp_id"])
        if server is None:
            found.append(
                Problem(
                    "error",
                    "server_unknown",
                    MCP_NOT_LOADED.format(mcp_id=rule["mcp_id"])
                    + ": "
                    + _("no server with this id is registered"),
                )
            )
        elif not server.enabled:
            found.append(
                Problem(
                    "error",
                    "server_disabled",
                    MCP_NOT_LOADED.format(mcp_id=rule["mcp_id"]) + ": " + _("the server is disabled"),
                )
            )
        elif server.tools_refreshed_at is None:
            found.append(
                Problem(
                    "warning",
                    "tools_unknown",
                    _("The tools of %(mcp_id)r were never listed: refresh them on the server's page.")
                    % {"mcp_id": server.mcp_id},
                )
            )
        elif (tool := _tool(server, rule["tool_name"])) is None:
            names = ", ".join(sorted(t["name"] for t in server.tools)) or _("none")
            found.append(
                Problem(
                    "error",
                    "tool_missing",
                    _("Tool %(tool)r is not in the current tool list of %(mcp_id)r (it has: %(names)s).")
                    % {"tool": rule["tool_name"], "mcp_id": server.mcp_id, "names": names},
                )
            )
        else:
            found.extend(_params_problems(rule["params"], tool))
        when = _normal(rule["when"])
        if when in stop_conditions:
            found.append(
                Problem(
                    "error",
                    "unreachable",
                    _(
                        "Never fires: the earlier stop rule %(rule)r has the same condition and ends the pre-step first."
                    )
                    % {"rule": stop_conditions[when]},
                )
            )
        elif "always" in stop_conditions:
            found.append(
                Problem(
                    "error",
                    "unreachable",
                    _("Never fires: the earlier stop rule %(rule)r always fires and ends the pre-step.")
                    % {"rule": stop_conditions["always"]},
                )
            )
        call = (rule["mcp_id"], rule["tool_name"], when, _normal(rule["params"]))
        if call in seen_calls:
            found.append(
                Problem(
                    "warning",
                    "duplicate",
                    _(
                        "Same server, tool, condition and params as the earlier rule %(rule)r: the tool would be called twice."
                    )
                    % {"rule": seen_calls[call]},
                )
            )
        else:
            seen_calls[call] = rule["name"]
        if rule.get("stop"):
            stop_conditions.setdefault(when, rule["name"])
            if when == _normal("True"):
                stop_conditions.setdefault("always", rule["name"])
        found += [Problem("warning", "datapart_number", m) for m in datapart_number_warnings(rule)]
        found += _cost_problems(rule)
        if found:
            problems[rule["name"]] = found
    return problems
