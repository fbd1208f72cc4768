from django.apps import AppConfig


class AgentsConfig(AppConfig):
    name = "agents"
    verbose_name = "Agents and runs"

    def ready(self) -> None:
        from agents import evidence, pricing, signals  # noqa: F401 - Celery worker signals; the price table's check
        from agents.services.gate import grant_gate, publish_gate, server_gate
        from core.gates import gate_register
        from rules.services import publish_gate_register

        evidence.register()  # the evidence chain's verifier reads runs back through agents.evidence
        publish_gate_register(publish_gate)  # a publish a protected agent would serve needs approval
        gate_register("grant", grant_gate)  # so does a grant of power while any agent is protected
        gate_register("mcp_server", server_gate)  # and a change of a server a protected agent uses
