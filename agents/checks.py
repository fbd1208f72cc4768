"""Checks of model connections and of an agent's model, made when saved and again when a run starts."""

from __future__ import annotations

from django.utils.translation import gettext as _

from agents.errors import AgentError


def llm_url_check(url: str, *, field: str = "base_url") -> None:
    """An LLM endpoint gets the MCP URL policy: the worker would otherwise fetch any address typed in."""
    from servers.urlguard import UnsafeUrlError, check_mcp_url_configured

    try:
        check_mcp_url_configured(url)
    except UnsafeUrlError as exc:
        raise AgentError(_("The model's base URL is refused: %(exc)s") % {"exc": exc}, field=field) from None


def llm_key_env_check(name: str, *, field: str = "api_key_env") -> None:
    """A connection's key variable must be one the operator allows: its value is sent to the model endpoint."""
    from core.env_policy import llm_key_policy

    reason = llm_key_policy().refusal(name)
    if reason is not None:
        raise AgentError(_("The API key variable is refused: %(reason)s.") % {"reason": reason}, field=field)


def connection_check(connection) -> None:
    """A connection's base URL passes the URL guard and its key variable the operator's allow-list."""
    llm_url_check(connection.base_url)
    if connection.api_key_env:
        llm_key_env_check(connection.api_key_env)


def agent_model_problem(agent) -> str | None:
    """Why the agent's model cannot run now (None: it can). The runtime refuses a run for it.

    An openai-compatible model runs only through a connection an admin defined, with one of its
    models: the agent holds no URL or key variable of its own (docs/security.md).
    """
    from agents.models import Agent

    if agent.model_provider != Agent.Provider.OPENAI:
        return None
    connection = agent.model_connection
    if connection is None:
        if agent.legacy_base_url:
            return _(
                "This agent cannot run: its model has no connection. It was saved with base URL %(url)s "
                "and key variable %(env)s, which no connection an admin defined pairs; an admin must "
                "assign a connection (or create one with that URL and key variable)."
            ) % {"url": agent.legacy_base_url, "env": agent.legacy_api_key_env or "-"}
        return _("This agent cannot run: its model has no connection. Choose one an admin defined.")
    if agent.model_name not in connection.model_names:
        return _("Model %(model)r is not one of the models of connection %(name)r (%(models)s).") % {
            "model": agent.model_name,
            "name": connection.name,
            "models": ", ".join(connection.model_names) or "-",
        }
    return None
