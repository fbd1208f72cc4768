from django.urls import path

from rules import views

app_name = "servers"

urlpatterns = [
    path("", views.server_list, name="list"),
]
