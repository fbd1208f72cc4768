"""Static checks of a rule set: problems visible without running anything.

Per rule: its server is unknown or disabled, its tool is not in the server's current tool list,
an earlier ``stop`` rule with the same condition always fires first, it repeats an earlier rule.
(Params against the tool's input schema are checked on the tester's input: rules.engine.evaluate.)
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from llamon_agent.prestep import MCP_NOT_LOADED
from servers.models import McpServer


@dataclass(frozen=True)
class Problem:
    level: str  # "error" (the pre-step will fail or the rule is dead) | "warning"
    code: str
    message: str


def _normal(source: str) -> str:
    """The expression's syntax tree as text, so that spacing and line breaks don't count."""
    try:
        return ast.dump(ast.parse(source.strip(), mode="eval"))
    except SyntaxError:
        return source.strip()


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
                    f"{MCP_NOT_LOADED.format(mcp_id=rule['mcp_id'])}: no server with this id is registered",
                )
            )
        elif not server.enabled:
            found.append(
                Problem(
                    "error",
                    "server_disabled",
                    f"{MCP_NOT_LOADED.format(mcp_id=rule['mcp_id'])}: the server is disabled",
                )
            )
        elif server.tools_refreshed_at is None:
            found.append(
                Problem(
                    "warning",
                    "tools_unknown",
                    f"The tools of '{server.mcp_id}' were never listed: refresh them on the server's page.",
                )
            )
        elif rule["tool_name"] not in {t["name"] for t in server.tools}:
            names = ", ".join(sorted(t["name"] for t in server.tools)) or "none"
            found.append(
                Problem(
                    "error",
                    "tool_missing",
                    f"Tool '{rule['tool_name']}' is not in the current tool list of '{server.mcp_id}' (it has: {names}).",
                )
            )
        when = _normal(rule["when"])
        if when in stop_conditions:
            found.append(
                Problem(
                    "error",
                    "unreachable",
                    f"Never fires: the earlier stop rule '{stop_conditions[when]}' has the same condition and ends the pre-step first.",
                )
            )
        elif "always" in stop_conditions:
            found.append(
                Problem(
                    "error",
                    "unreachable",
                    f"Never fires: the earlier stop rule '{stop_conditions['always']}' always fires and ends the pre-step.",
                )
            )
        call = (rule["mcp_id"], rule["tool_name"], when, _normal(rule["params"]))
        if call in seen_calls:
            found.append(
                Problem(
                    "warning",
                    "duplicate",
                    f"Same server, tool, condition and params as the earlier rule '{seen_calls[call]}': the tool would be called twice.",
                )
            )
        else:
            seen_calls[call] = rule["name"]
        if rule.get("stop"):
            stop_conditions.setdefault(when, rule["name"])
            if when == _normal("True"):
                stop_conditions.setdefault("always", rule["name"])
        if found:
            problems[rule["name"]] = found
    return problems
