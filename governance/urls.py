from django.urls import path

from governance import views

app_name = "governance"

urlpatterns = [
    path("rule-sets/<int:pk>/impact/", views.impact_new, name="impact_new"),
    path("rule-sets/<int:pk>/impact/start", views.impact_start, name="impact_start"),
    path("rule-sets/<int:pk>/health/", views.rule_health, name="rule_health"),
    path("impact/<int:pk>/", views.impact_detail, name="impact_detail"),
    path("impact/<int:pk>/progress", views.impact_progress, name="impact_progress"),
    path("impact/<int:pk>/report", views.impact_report, name="impact_report"),
    path("changes/<int:pk>/impact", views.change_impact, name="change_impact"),
    path("agents/<int:pk>/savings/", views.agent_savings, name="agent_savings"),
    path("agents/<int:pk>/suggestions/start", views.suggestions_start, name="suggestions_start"),
    path("suggestions/<int:pk>/progress", views.suggestions_progress, name="suggestions_progress"),
    path("suggestions/<int:pk>/<int:index>/draft", views.suggestion_draft, name="suggestion_draft"),
]
