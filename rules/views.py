"""Pages for MCP servers and rule sets. Views authorize, validate, call one service or selector, render."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from llamon_web.roles import require_role
from rules.selectors import mcp_server_list


@require_GET
@require_role("viewer")
def server_list(request: HttpRequest) -> HttpResponse:
    """The registered MCP servers with their health and tools."""
    return render(request, "rules/server_list.html", {"servers": mcp_server_list()})
