"""An unknown MCP server or tool, said the same way everywhere, with a "did you mean" when a known
name is close (difflib, as the expression checker does for its names)."""

from __future__ import annotations

from collections.abc import Iterable

from django.utils.translation import gettext as _

from llamon_agent.expr.messages import close_matches, quoted_list


def unknown_server_message(mcp_id: str, known: Iterable[str]) -> str:
    known = sorted(known)
    close = close_matches(mcp_id, known)
    if close:
        return _(
            "No MCP server %(mcp_id)r is registered; did you mean %(close)s? (registered: %(known)s)"
        ) % {
            "mcp_id": mcp_id,
            "close": quoted_list(close),
            "known": ", ".join(known),
        }
    return _("No MCP server %(mcp_id)r is registered (registered: %(known)s).") % {
        "mcp_id": mcp_id,
        "known": ", ".join(known) or _("none yet"),
    }


def unknown_tool_message(mcp_id: str, tool_name: str, tools: Iterable[str]) -> str:
    tools = sorted(tools)
    close = close_matches(tool_name, tools)
    if close:
        return _("%(mcp_id)s has no tool %(tool_name)r; did you mean %(close)s? (its tools: %(tools)s)") % {
            "mcp_id": mcp_id,
            "tool_name": tool_name,
            "close": quoted_list(close),
            "tools": ", ".join(tools),
        }
    return _("%(mcp_id)s has no tool %(tool_name)r (its tools: %(tools)s).") % {
        "mcp_id": mcp_id,
        "tool_name": tool_name,
        "tools": ", ".join(tools) or _("none"),
    }
