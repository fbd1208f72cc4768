"""Checks of an agent's model settings, made when it is saved and again when a run starts."""

from __future__ import annotations

from django.utils.translation import gettext as _

from agents.errors import AgentError


def llm_url_check(url: str) -> None:
    """An LLM endpoint gets the MCP URL policy: the worker would otherwise fetch any address an editor types."""
    from servers.urlguard import UnsafeUrlError, check_mcp_url_configured

    try:
        check_mcp_url_configured(url)
    except UnsafeUrlError as exc:
        raise AgentError(
            _("The model's base URL is refused: %(exc)s") % {"exc": exc}, field="model_base_url"
        ) from None


def llm_key_env_check(name: str) -> None:
    """An agent's key variable must be one the operator allows: its value is sent to the model endpoint."""
    from core.env_policy import llm_key_policy

    reason = llm_key_policy().refusal(name)
    if reason is not None:
        raise AgentError(
            _("The API key variable is refused: %(reason)s.") % {"reason": reason}, field="model_api_key_env"
        )
