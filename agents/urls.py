from django.urls import path

from agents import views

app_name = "agents"

urlpatterns = [
    path("", views.agent_list, name="list"),
    path("new", views.agent_edit, name="create"),
    path("<int:pk>/edit", views.agent_edit, name="edit"),
    path("connections/", views.connection_list, name="connection_list"),
    path("connections/new", views.connection_edit, name="connection_create"),
    path("connections/<int:pk>/edit", views.connection_edit, name="connection_edit"),
    path("<int:pk>/rollout", views.agent_rollout, name="rollout"),
    path("<int:pk>/rollout/set", views.agent_rollout_set, name="rollout_set"),
    path("<int:pk>/rollout/promote", views.agent_rollout_end, {"action": "promote"}, name="rollout_promote"),
    path(
        "<int:pk>/rollout/rollback", views.agent_rollout_end, {"action": "rollback"}, name="rollout_rollback"
    ),
    path("<int:pk>/shadow", views.agent_shadow_set, name="shadow_set"),
    path("<int:pk>/protect", views.agent_protect, name="protect"),
    path("changes/", views.change_list, name="change_list"),
    path("changes/<int:pk>/", views.change_detail, name="change_detail"),
    path("changes/<int:pk>/review", views.change_review, name="change_review"),
    path("changes/<int:pk>/withdraw", views.change_withdraw, name="change_withdraw"),
    path("runs/", views.run_list, name="run_list"),
    path("runs/new", views.run_start, name="run_start"),
    path("runs/export", views.run_export, name="run_export"),
    path("runs/evidence", views.run_evidence, name="run_evidence"),
    path("runs/<int:pk>/json", views.run_json, name="run_json"),
    path("runs/compare", views.run_compare, name="run_compare"),
    path("runs/<int:pk>/", views.run_detail, name="run_detail"),
    path("runs/<int:pk>/steps", views.run_steps, name="run_steps"),
    path("runs/<int:pk>/steps/<int:seq>/value", views.run_step_value, name="run_step_value"),
    path("runs/<int:pk>/rules", views.run_rules, name="run_rules"),
    path("runs/<int:pk>/cancel", views.run_cancel, name="run_cancel"),
    path("runs/<int:pk>/rerun", views.run_rerun, name="run_rerun"),
    path("runs/<int:pk>/replay", views.run_replay, name="run_replay"),
    path("runs/<int:pk>/save-case", views.run_save_case, name="run_save_case"),
    path("runs/<int:pk>/open-in-tester", views.run_open_in_tester, name="run_open_in_tester"),
    path("privacy", views.privacy, name="privacy"),
]
