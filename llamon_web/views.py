"""Site-wide pages: home and the health check."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.templatetags.static import static
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from accounts.roles import require_role
from agents.selectors import agent_list, run_list, runs_for_display, worker_live_list
from llamon_web.health import service_checks
from rules.selectors import rule_set_list
from servers.selectors import mcp_server_list


@require_GET
@require_role("viewer")
def home(request: HttpRequest) -> HttpResponse:
    """Dashboard: the servers, the services and where to go next."""
    checks = service_checks()
    workers = worker_live_list(within_s=settings.CELERY_WORKER_HEARTBEAT_S * 3)
    return render(
        request,
        "home.html",
        {
            "checks": checks,
            "servers": mcp_server_list(),
            "workers": workers,
            "rule_sets": rule_set_list()[:8],
            "agents": agent_list()[:8],
            "runs": runs_for_display(run_list(filters={})[:8]),
        },
    )


@require_GET
@never_cache
@require_role("public")
def healthz(request: HttpRequest) -> JsonResponse:
    """Machine-readable health: 200 when the database and the broker work, else 503."""
    checks = service_checks()
    ok = all(c.ok for c in checks)
    body = {"status": "ok" if ok else "error", **{c.name: {"ok": c.ok, "detail": c.detail} for c in checks}}
    return JsonResponse(body, status=200 if ok else 503)


@require_GET
@require_role("public")
def favicon(request: HttpRequest) -> HttpResponse:
    """Browsers ask for /favicon.ico whatever the page links: send them to the static icon."""
    return redirect(static("favicon.svg"), permanent=True)
