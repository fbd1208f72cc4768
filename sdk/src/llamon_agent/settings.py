"""Settings of the SDK (registry, LLM, trace) from ``LLAMON_*`` variables and `.env`.

Secrets never live in settings by value except the two tokens (kept as ``SecretStr``): the
LLM key is read from the environment variable *named* by ``llm_api_key_env``.
"""

from __future__ import annotations

import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from llamon_agent.envnames import parse_patterns

ENV_PREFIX = "LLAMON_"
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Never echo these fields' input in an error message: they are, or may be, secrets.
_SECRET_FIELDS = frozenset({"registry_token", "trace_token", "llm_api_key_env"})


class SettingsError(ValueError):
    """Settings that do not validate; the message names each ``LLAMON_*`` variable and what is wrong."""


def _check_http_url(value: str | None) -> str | None:
    if value is None:
        return None
    value = value.strip()
    if not value:
        return None  # LLAMON_X= in a .env means "not set"
    if not re.match(r"^https?://[^\s/]+", value):
        raise ValueError(f"must be an http:// or https:// URL, like http://127.0.0.1:8000 (got {value!r})")
    return value


# The cost limits of routing-rule expressions (docs/expressions.md, "Cost bound"): a rule's static
# bound (and its run-time meter), and what a rule set's bounds may add up to when it is published;
# the defaults are llamon_agent.expr.DEFAULT_EXPR_BUDGET and DEFAULT_REQUEST_BUDGET.
DEFAULT_EXPR_COST_BUDGET = 4_000_000
DEFAULT_REQUEST_COST_BUDGET = 1_000_000_000
_MAX_COST_BUDGET = 10**10
# A served agent's finished A2A tasks: how many are kept for tasks/get, and for how long.
DEFAULT_A2A_TASKS_KEPT = 1_000
DEFAULT_A2A_TASK_TTL_S = 3_600.0
# ... and how many bytes of them one caller may keep (its oldest are forgotten first).
DEFAULT_A2A_TASK_BYTES_PER_CALLER = 8 * 1024 * 1024


class CostBudgets(BaseSettings):
    """``LLAMON_EXPR_COST_BUDGET`` (units a rule) and ``LLAMON_REQUEST_COST_BUDGET`` (a rule set's total)."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_file=".env",
        env_file_encoding="utf-8",
        # A shared .env also holds DATABASE_URL, OPENAI_API_KEY, ...: not ours, not an error.
        extra="ignore",
        validate_default=True,
    )

    expr_cost_budget: int = Field(default=DEFAULT_EXPR_COST_BUDGET, ge=1_000, le=_MAX_COST_BUDGET)
    request_cost_budget: int = Field(default=DEFAULT_REQUEST_COST_BUDGET, ge=1_000, le=_MAX_COST_BUDGET)

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise SettingsError(_readable(exc)) from exc


@lru_cache(maxsize=1)
def cost_budgets() -> CostBudgets:
    """The cost budgets from the environment and `.env`, read once (``cost_budgets.cache_clear()`` to re-read)."""
    return CostBudgets()


class Settings(CostBudgets):
    """Registry, LLM, trace and expression-budget settings from ``LLAMON_*`` variables, `.env`, or keyword arguments."""

    registry_url: str | None = None
    registry_token: SecretStr | None = None
    registry_file: Path | None = None
    llm_provider: Literal["offline", "scripted", "openai-compatible"] = "offline"
    llm_base_url: str | None = None
    llm_model: str = "gpt-4o-mini"
    llm_api_key_env: str = "OPENAI_API_KEY"
    llm_timeout_s: float = Field(default=60, gt=0, le=3600)
    trace_url: str | None = None
    trace_token: SecretStr | None = None
    # A served agent distrusts what a registry answers over the network (docs/cli.md, "Serving"):
    # stdio commands it may start from such a registry (none by default), the variables an MCP
    # server's env and headers may read, and whether a plain-http registry off this machine is allowed.
    mcp_stdio_allow: str = ""
    mcp_env_names: str = "LLAMON_MCP_*"
    mcp_allow_private: bool = True
    registry_allow_http: bool = False
    # What a served agent masks in the OTel spans it exports (docs/observability.md): preset names
    # (comma-separated; "all", or "none"). Unset: the registry's llamon-web privacy settings.
    mask_presets: str = ""
    # The registry URL is the operator's own (a llamon-web whose admins registered its stdio
    # servers): its stdio entries start. Never assumed, not even for a loopback URL.
    registry_trusted: bool = False
    # ``llamon run``'s A2A task store (docs/cli.md): finished tasks kept for tasks/get, at most
    # this many (oldest forgotten first) and for at most this long.
    a2a_tasks_kept: int = Field(default=DEFAULT_A2A_TASKS_KEPT, ge=0, le=1_000_000)
    a2a_task_ttl_s: float = Field(default=DEFAULT_A2A_TASK_TTL_S, gt=0, le=7 * 86_400)
    a2a_task_bytes_per_caller: int = Field(default=DEFAULT_A2A_TASK_BYTES_PER_CALLER, ge=0, le=2**34)

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as exc:
            # pydantic's text names fields, not the variables people actually set; say both.
            raise SettingsError(_readable(exc)) from exc

    @field_validator("registry_url", "llm_base_url", "trace_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        return _check_http_url(value)

    @model_validator(mode="after")
    def _registry_over_tls(self) -> Settings:
        """A plain-http registry off this machine: whoever is on the path chooses what runs here."""
        url = self.registry_url or ""
        off_this_machine = (urlsplit(url).hostname or "") not in ("127.0.0.1", "::1", "localhost")
        if url.startswith("http://") and off_this_machine and not self.registry_allow_http:
            raise ValueError(
                "LLAMON_REGISTRY_URL: a registry off this machine must be https:// (what it answers "
                "decides which MCP servers start here); set LLAMON_REGISTRY_ALLOW_HTTP=1 to accept "
                "plain http anyway"
            )
        return self

    @field_validator("mcp_env_names")
    @classmethod
    def _env_name_patterns(cls, value: str) -> str:
        parse_patterns(value.split(","), setting="LLAMON_MCP_ENV_NAMES")
        return value

    @field_validator("registry_file", mode="before")
    @classmethod
    def _empty_file_is_unset(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("llm_api_key_env")
    @classmethod
    def _is_a_variable_name(cls, value: str) -> str:
        if not ENV_NAME_RE.match(value):
            # The usual mistake is pasting the key itself here; the value is not repeated back.
            raise ValueError(
                "is the NAME of the environment variable that holds the API key (like OPENAI_API_KEY), "
                "not the key itself"
            )
        return value

    def llm_api_key(self) -> SecretStr | None:
        """The LLM API key read from the variable named by ``llm_api_key_env`` (environment, then `.env`)."""
        from llamon_agent.env import resolve_env_override

        value = resolve_env_override(self.llm_api_key_env, "", source_file=os.getcwd())
        return SecretStr(value) if value else None


def _readable(exc: ValidationError) -> str:
    lines = ["Invalid llamon settings:"]
    for error in exc.errors(include_url=False):
        field = str(error["loc"][0]) if error["loc"] else "?"
        message = error["msg"].removeprefix("Value error, ")
        if field not in _SECRET_FIELDS and error["type"] != "value_error" and "input" in error:
            message += f" (got {error['input']!r})"
        lines.append(f"  {ENV_PREFIX}{field.upper()} ({field}): {message}")
    return "\n".join(lines)
