"""People's pages: log in and out, invitations, the language, users (admin) and API tokens."""

from django.contrib.auth import views as auth_views
from django.urls import path

from accounts import token_views
from accounts import views as user_views
from accounts.roles import require_role

urlpatterns = [
    path(
        "accounts/login/",
        require_role("public")(auth_views.LoginView.as_view(redirect_authenticated_user=True)),
        name="login",
    ),
    path("accounts/logout/", require_role("public")(auth_views.LogoutView.as_view()), name="logout"),
    path("tokens/", token_views.token_list, name="tokens"),
    path("tokens/new", token_views.token_create, name="token_create"),
    path("tokens/<int:pk>/revoke", token_views.token_revoke, name="token_revoke"),
    path("users/", user_views.user_list, name="users"),
    path("users/new", user_views.user_create, name="user_create"),
    path("users/<int:pk>/", user_views.user_detail, name="user_detail"),
    path("users/<int:pk>/role", user_views.user_set_role, name="user_set_role"),
    path("users/<int:pk>/active", user_views.user_set_active, name="user_set_active"),
    path("users/<int:pk>/approver", user_views.user_set_approver, name="user_set_approver"),
    path("users/<int:pk>/invite", user_views.user_invite, name="user_invite"),
    path(
        "users/<int:pk>/tokens/<int:token_pk>/revoke", user_views.user_token_revoke, name="user_token_revoke"
    ),
    path("accounts/invite/<str:secret>/", user_views.invite_accept, name="invite_accept"),
    path("accounts/language", user_views.language_set, name="language_set"),
]
