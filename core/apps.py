from django.apps import AppConfig


class CoreConfig(AppConfig):
    """The shared kernel every app builds on: the audit log, errors, fields, user input, API helpers."""

    name = "core"
    verbose_name = "llamon-web core"

    def ready(self) -> None:
        from core import checks  # noqa: F401  (registers the system checks)
