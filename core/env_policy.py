"""The two allow-lists of environment variable names, from settings (the rules are in llamon_agent.envnames)."""

from __future__ import annotations

from django.conf import settings

from llamon_agent.envnames import EnvNamePolicy


def llm_key_policy() -> EnvNamePolicy:
    """Which variables an agent's API key variable may name (``LLAMON_LLM_KEY_ENVS``)."""
    return EnvNamePolicy(
        "LLAMON_LLM_KEY_ENVS", tuple(settings.LLAMON_LLM_KEY_ENVS), "an agent's API key variable"
    )


def mcp_env_policy() -> EnvNamePolicy:
    """Which variables an MCP server's env and header names may read (``LLAMON_MCP_ENV_NAMES``)."""
    return EnvNamePolicy("LLAMON_MCP_ENV_NAMES", tuple(settings.LLAMON_MCP_ENV_NAMES), "an MCP server")
