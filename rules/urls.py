from django.urls import path

from rules import views

app_name = "rules"

urlpatterns = [
    path("", views.rule_set_list, name="list"),
    path("new", views.rule_set_create, name="create"),
    path("audit/", views.audit_list, name="audit"),
    path("<int:pk>/", views.rule_set_editor, name="editor"),
    path("<int:pk>/rules/new", views.rule_save, name="rule_create"),
    path("<int:pk>/rules/<int:rule_pk>", views.rule_save, name="rule_update"),
    path("<int:pk>/rules/<int:rule_pk>/delete", views.rule_delete, name="rule_delete"),
    path("<int:pk>/rules/<int:rule_pk>/toggle", views.rule_toggle, name="rule_toggle"),
    path("<int:pk>/rules/<int:rule_pk>/move", views.rule_move, name="rule_move"),
    path("<int:pk>/reorder", views.rule_set_reorder, name="reorder"),
    path("<int:pk>/validate", views.rule_validate, name="validate"),
    path("<int:pk>/expression-check", views.expression_check, name="expression_check"),
    path("<int:pk>/tool", views.tool_info, name="tool_info"),
    path("<int:pk>/test", views.rule_set_test, name="test"),
    path("<int:pk>/versions/", views.version_list, name="versions"),
    path("<int:pk>/publish", views.rule_set_publish, name="publish"),
    path("<int:pk>/versions/diff", views.version_diff, name="diff"),
    path("<int:pk>/versions/<int:number>/restore", views.version_restore, name="restore"),
    path("<int:pk>/cases/", views.case_list, name="cases"),
    path("<int:pk>/cases/new", views.case_create, name="case_create"),
    path("<int:pk>/cases/<int:case_pk>/update", views.case_update, name="case_update"),
    path("<int:pk>/cases/<int:case_pk>/delete", views.case_delete, name="case_delete"),
    path("<int:pk>/export.json", views.export_json, name="export_json"),
    path("<int:pk>/tools.py", views.export_tools, name="export_tools"),
    path("import", views.import_json, name="import"),
    path("import/tools-py", views.import_tools, name="import_tools"),
]
