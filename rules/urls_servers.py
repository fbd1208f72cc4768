from django.urls import path

from rules import mcp_views

app_name = "servers"

urlpatterns = [
    path("", mcp_views.server_list, name="list"),
    path("new/", mcp_views.server_create, name="create"),
    path("<int:pk>/", mcp_views.server_detail, name="detail"),
    path("<int:pk>/edit/", mcp_views.server_edit, name="edit"),
    path("<int:pk>/refresh/", mcp_views.server_refresh, name="refresh"),
    path("<int:pk>/call/", mcp_views.tool_call, name="call"),
    path("<int:pk>/delete/", mcp_views.server_delete, name="delete"),
]
