"""Template helpers for MCP servers' pages."""

from __future__ import annotations

import re
from typing import Any

from django import template
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext

from llamon_agent.mcp.transports import STDERR_MARKER
from servers.mcp_messages import mcp_health_text

register = template.Library()


@register.filter
def mcp_error(text: str, roles: Any) -> str:
    """An MCP error for the viewer of the page, in the viewer's language (servers.mcp_messages): the
    stdio stderr tail (the child's own output, shown as it is) only when ``roles`` holds admin."""
    head, marker, tail = (text or "").partition(STDERR_MARKER)
    shown = mcp_health_text(head)
    if not marker:
        return shown
    if "admin" in (roles or ()):
        return gettext("%(error)s; last stderr lines: %(stderr)s") % {"error": shown, "stderr": tail}
    return shown + gettext(" (the server's stderr is shown to admins only)")


@register.filter
def mcp_error_html(text: str, roles: Any) -> SafeString:
    """Like ``mcp_error``, for a paragraph: the library's own words it quotes are set apart as code."""
    shown = escape(mcp_error(text, roles))
    return mark_safe(re.sub(r"“(.+?)”", r'“<code class="library-text" lang="en">\1</code>”', shown))  # noqa: S308 - escaped above
