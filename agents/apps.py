from django.apps import AppConfig


class AgentsConfig(AppConfig):
    name = "agents"
    verbose_name = "Agents and runs"

    def ready(self) -> None:
        from agents import signals  # noqa: F401 - connects the Celery worker signals
