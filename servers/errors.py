"""Domain errors of the MCP servers app."""

from __future__ import annotations

from core.errors import DomainError


class McpServerError(DomainError):
    """A server write or action was refused; the message says why and ``field`` names the form field."""
