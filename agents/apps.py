from django.apps import AppConfig


class AgentsConfig(AppConfig):
    name = "agents"
    verbose_name = "Agents and runs"

    def ready(self) -> None:
        from agents import evidence, pricing, signals  # noqa: F401 - Celery worker signals; the price table's check
        from agents.services.gate import publish_gate
        from rules.services import publish_gate_register

        evidence.register()  # the evidence chain's verifier reads runs back through agents.evidence
        publish_gate_register(publish_gate)  # a publish a protected agent would serve needs approval
