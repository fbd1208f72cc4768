"""The MCP pool of a process that serves (or checks) a project: the registry's trust rules applied.

Shared by ``llamon run`` (llamon_agent.serve) and ``llamon check`` (llamon_agent.project), which
asks the same servers for their tool lists and must start nothing ``llamon run`` would refuse.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llamon_agent.settings import Settings

logger = logging.getLogger("llamon_agent")


def served_pool(settings: Settings) -> Any:
    """The served process's MCP pool, which distrusts a registry answered over the network.

    The web's pool checks its stdio allow-list, env-name policy and URL guard; a served agent must
    too, or whoever controls its registry's answer (or the path to a plain-http one) runs commands
    on its host. A registry *file* is the operator's own: its stdio entries start. So are those of
    a registry URL the operator declares their own (``LLAMON_REGISTRY_TRUSTED=1``, e.g. the
    workbench on this machine, whose admins registered them under its allow-list); a loopback URL
    is not trusted for being loopback (any local process may listen there). From any other
    registry a stdio command starts only when ``LLAMON_MCP_STDIO_ALLOW`` names it (none by default).
    Env and header names follow ``LLAMON_MCP_ENV_NAMES``; HTTP servers pass the URL guard (cloud
    metadata and link-local never; private addresses unless ``LLAMON_MCP_ALLOW_PRIVATE=0``).
    Every refusal is logged.
    """
    from llamon_agent.envnames import EnvNamePolicy, parse_patterns
    from llamon_agent.mcp.pool import McpPool
    from llamon_agent.urlguard import UrlPolicy

    untrusted = (
        settings.registry_file is None and bool(settings.registry_url) and not settings.registry_trusted
    )
    allowed = {c.strip() for c in settings.mcp_stdio_allow.split(",") if c.strip()}

    def stdio_allowed(spec: Any) -> bool:
        if not untrusted or spec.command in allowed:
            return True
        logger.error(
            "refused MCP server %r from the registry %s: stdio command %r is not in LLAMON_MCP_STDIO_ALLOW "
            "(or set LLAMON_REGISTRY_TRUSTED=1 if this registry is your own)",
            spec.mcp_id,
            settings.registry_url,
            spec.command,
        )
        return False

    names = parse_patterns(settings.mcp_env_names.split(","), setting="LLAMON_MCP_ENV_NAMES")
    return McpPool(
        stdio_allowed=stdio_allowed,
        http_guard=UrlPolicy(allow_private=settings.mcp_allow_private).check,
        env_policy=EnvNamePolicy("LLAMON_MCP_ENV_NAMES", names, "an MCP server"),
    )
