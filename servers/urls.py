from django.urls import path

from servers import views

app_name = "servers"

urlpatterns = [
    path("", views.server_list, name="list"),
    path("new/", views.server_create, name="create"),
    path("<int:pk>/", views.server_detail, name="detail"),
    path("<int:pk>/edit/", views.server_edit, name="edit"),
    path("<int:pk>/refresh/", views.server_refresh, name="refresh"),
    path("<int:pk>/call/", views.tool_call, name="call"),
    path("<int:pk>/delete/", views.server_delete, name="delete"),
]
