"""Static checks of a rule set: problems visible without running anything.

One implementation for the workbench (rules.checks gives it the registered servers and translates
the messages) and for ``llamon rules test`` (llamon_agent.rules_code gives it a pulled directory's
ruleset.json), so both give the same answer for the same content.

Per rule: its server is unknown or disabled, its tools were never listed, its tool is not in the
server's current tool list, its params no longer fit the tool's input schema, an earlier ``stop``
rule with the same condition always fires first, it repeats an earlier rule, it compares a DataPart
value with a number without converting it, its static cost bound is over the per-rule limit. What
a rule reads (its normal form, its params literal, the DataPart values it compares with numbers)
comes from the engine (``llamon_agent.expr.reads``).

A server is a plain mapping (``server_view``): ``enabled``, ``listed`` (its tools were listed at
least once) and ``tools`` (each with ``name`` and ``input_schema``). Params are checked statically
as far as the params expression is a dict literal (its keys, and the values that are literals);
what they evaluate to on a given input is checked by the tester.

Each problem has a stable ``msg_id`` and its ``params`` beside the English ``message``, so an
application can show it in its own language (like the expression checker's messages).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from llamon_agent.expr import ExprError, check_rule_cost, expression_rule
from llamon_agent.expr.reads import DYNAMIC, reads
from llamon_agent.mcp.schemas import schema_errors
from llamon_agent.prestep import MCP_NOT_LOADED

CHECK_MESSAGES: dict[str, str] = {
    "check.server_unknown": "%(not_loaded)s: no server with this id is registered",
    "check.server_disabled": "%(not_loaded)s: the server is disabled",
    "check.tools_unknown": "The tools of %(mcp_id)r were never listed: refresh them on the server's page.",
    "check.tool_missing": "Tool %(tool)r is not in the current tool list of %(mcp_id)r (it has: %(names)s).",
    "check.params_mismatch": "The params no longer fit the input schema of %(tool)r: %(reasons)s.",
    "check.param_required": "%(name)r is required but the params do not set it",
    "check.param_unknown": "%(key)r is not a parameter of the tool",
    "check.cost_over": "%(reason)s",
    "check.unreachable_same": (
        "Never fires: the earlier stop rule %(rule)r has the same condition and ends the pre-step first."
    ),
    "check.unreachable_always": "Never fires: the earlier stop rule %(rule)r always fires and ends the pre-step.",
    "check.duplicate": (
        "Same server, tool, condition and params as the earlier rule %(rule)r: the tool would be called twice."
    ),
    "check.datapart_number": (
        "%(value)s is compared with a number, but a DataPart value may arrive as text "
        '(such as "86"): the whole pre-step then fails. Convert it: to_number(%(value)s, default) gives '
        "the number, or the default when the value is missing or not a number."
    ),
}


@dataclass(frozen=True)
class Problem:
    level: str  # "error" (the pre-step will fail or the rule is dead) | "warning"
    code: str
    msg_id: str
    params: Mapping[str, Any] = field(default_factory=dict)
    # params_mismatch: each reason as (msg_id, params), or ("schema", the JSON Schema line)
    reasons: tuple[tuple[str, Any], ...] = ()
    # cost_over: the engine's error, whose message id an application translates
    error: ExprError | None = field(default=None, compare=False)

    @property
    def message(self) -> str:
        """The English sentence."""
        params = dict(self.params)
        if self.reasons:
            params["reasons"] = "; ".join(
                value if kind == "schema" else CHECK_MESSAGES[kind] % value for kind, value in self.reasons
            )
        return CHECK_MESSAGES[self.msg_id] % params

    def to_json(self) -> dict[str, str]:
        return {"level": self.level, "code": self.code, "message": self.message}


def server_view(*, enabled: bool, listed: bool, tools: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A server as the checks and a pulled directory know it."""
    return {
        "enabled": bool(enabled),
        "listed": bool(listed),
        "tools": [
            {
                "name": str(tool.get("name")),
                "description": str(tool.get("description") or ""),
                "input_schema": tool.get("input_schema") or {},
            }
            for tool in tools
            if isinstance(tool, Mapping)
        ],
    }


def _normal(source: str) -> str:
    """The expression's normal form (the engine's), so that spacing and line breaks don't count."""
    return reads(source).normal


def _params_problems(source: str, tool: Mapping[str, Any]) -> list[Problem]:
    """Where the params (as far as they are literal) no longer fit the tool's input schema."""
    schema = tool.get("input_schema") or {}
    literal = reads(source).params if isinstance(schema, Mapping) and schema else None
    if literal is None:
        return []
    params, complete = literal
    reasons: list[tuple[str, Any]] = []
    if complete:
        required = schema.get("required") or []
        missing = [name for name in required if isinstance(name, str) and name not in params]
        reasons += [("check.param_required", {"name": name}) for name in missing]
    # The literal values (dynamic ones left out) against the schema, required keys aside.
    known = {key: value for key, value in params.items() if value is not DYNAMIC}
    properties = schema.get("properties")
    if schema.get("additionalProperties") is False and isinstance(properties, Mapping):
        reasons += [("check.param_unknown", {"key": key}) for key in params if key not in properties]
    loose = {k: v for k, v in schema.items() if k not in ("required", "additionalProperties")}
    reasons += [("schema", line) for line in schema_errors(loose, known, limit=5)]
    if not reasons:
        return []
    return [
        Problem(
            "error",
            "params_mismatch",
            "check.params_mismatch",
            {"tool": tool["name"]},
            reasons=tuple(reasons),
        )
    ]


def _cost_problems(rule: Mapping[str, Any]) -> list[Problem]:
    """A rule over the per-rule cost limit (saved before an upgrade, or under a higher limit): it
    still runs, under its run-time meter, but a save or a new version would refuse it."""
    try:
        check_rule_cost(
            expression_rule(
                name="r", mcp_id="m", tool_name="t", when=rule["when"], params=rule.get("params", "{}")
            )
        )
    except ExprError as exc:
        if exc.msg_id in ("expr.cost_bound", "rule.cost_bound"):
            return [Problem("warning", "cost_over", "check.cost_over", {"reason": str(exc)}, error=exc)]
    return []  # (an expression that does not compile is reported where it is saved)


def _server_problems(rule: Mapping[str, Any], server: Mapping[str, Any] | None) -> list[Problem]:
    mcp_id = str(rule["mcp_id"])
    not_loaded = MCP_NOT_LOADED.format(mcp_id=mcp_id)
    if server is None:
        return [Problem("error", "server_unknown", "check.server_unknown", {"not_loaded": not_loaded})]
    if not server.get("enabled", True):
        return [Problem("error", "server_disabled", "check.server_disabled", {"not_loaded": not_loaded})]
    if not server.get("listed", True):
        return [Problem("warning", "tools_unknown", "check.tools_unknown", {"mcp_id": mcp_id})]
    tools = [t for t in server.get("tools") or [] if isinstance(t, Mapping)]
    tool = next((t for t in tools if t.get("name") == rule["tool_name"]), None)
    if tool is None:
        names = ", ".join(sorted(str(t.get("name")) for t in tools)) or "none"
        return [
            Problem(
                "error",
                "tool_missing",
                "check.tool_missing",
                {"tool": rule["tool_name"], "mcp_id": mcp_id, "names": names},
            )
        ]
    return _params_problems(str(rule["params"]), tool)


def rule_set_problems(
    snapshot: Sequence[Mapping[str, Any]], servers: Mapping[str, Mapping[str, Any]]
) -> dict[str, list[Problem]]:
    """Problems per rule name (only rules that have some), in evaluation order; disabled rules are
    not checked. ``servers`` maps every registered server's id to its ``server_view``."""
    problems: dict[str, list[Problem]] = {}
    stop_conditions: dict[str, str] = {}  # normalized when -> name of the earlier stop rule
    seen_calls: dict[tuple[str, str, str, str], str] = {}
    for rule in snapshot:
        if not rule.get("enabled", True):
            continue
        params_source = str(rule.get("params", "{}"))
        found = _server_problems(rule, servers.get(str(rule["mcp_id"])))
        when = _normal(str(rule["when"]))
        if when in stop_conditions:
            found.append(
                Problem("error", "unreachable", "check.unreachable_same", {"rule": stop_conditions[when]})
            )
        elif "always" in stop_conditions:
            found.append(
                Problem(
                    "error", "unreachable", "check.unreachable_always", {"rule": stop_conditions["always"]}
                )
            )
        call = (str(rule["mcp_id"]), str(rule["tool_name"]), when, _normal(params_source))
        if call in seen_calls:
            found.append(Problem("warning", "duplicate", "check.duplicate", {"rule": seen_calls[call]}))
        else:
            seen_calls[call] = str(rule["name"])
        if rule.get("stop"):
            stop_conditions.setdefault(when, str(rule["name"]))
            if when == _normal("True"):
                stop_conditions.setdefault("always", str(rule["name"]))
        found += [
            Problem("warning", "datapart_number", "check.datapart_number", {"value": value})
            for value in reads(str(rule.get("when", ""))).data_numbers
        ]
        found += _cost_problems(rule)
        if found:
            problems[str(rule["name"])] = found
    return problems
