from django.urls import include, path

from llamon_web import views
from llamon_web.api import api
from llamon_web.mcp_endpoint import mcp_view

# The MCP endpoint joins the API's URL namespace ("api:mcp"): bearer tokens only, roles checked per tool.
api_patterns, api_app_name, api_namespace = api.urls

# Under /api/ a URL that matches no operation answers JSON (ErrorOut), like every API error.
handler404 = "llamon_web.api.not_found"

urlpatterns = [
    path("", views.home, name="home"),
    path("healthz", views.healthz, name="healthz"),
    path("favicon.ico", views.favicon, name="favicon"),
    path("", include("accounts.urls")),
    path("mcp/", include("servers.urls")),
    path("rules/", include("rules.urls")),
    path("agents/", include("agents.urls")),
    path("governance/", include("governance.urls")),
    path("api/", ([path("mcp", mcp_view, name="mcp"), *api_patterns], api_app_name, api_namespace)),
]
