from django.contrib.auth import views as auth_views
from django.urls import include, path

from llamon_web import views
from llamon_web.roles import require_role

urlpatterns = [
    path("", views.home, name="home"),
    path("healthz", views.healthz, name="healthz"),
    path(
        "accounts/login/",
        require_role("public")(auth_views.LoginView.as_view(redirect_authenticated_user=True)),
        name="login",
    ),
    path("accounts/logout/", require_role("public")(auth_views.LogoutView.as_view()), name="logout"),
    path("mcp/", include("rules.urls_servers")),
    path("rules/", include("rules.urls")),
    path("agents/", include("agents.urls")),
]
