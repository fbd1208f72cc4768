"""Template helpers for MCP servers' pages."""

from __future__ import annotations

from typing import Any

from django import template

from servers.selectors import mcp_error_for

register = template.Library()


@register.filter
def mcp_error(text: str, roles: Any) -> str:
    """An MCP error for the viewer of the page: the stdio stderr tail only when ``roles`` holds admin."""
    return mcp_error_for(text=text or "", admin="admin" in (roles or ()))
