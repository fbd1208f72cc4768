"""Domain errors of the governance app (the API answers them as 422, llamon_web.api)."""

from __future__ import annotations

from core.errors import DomainError


class ImpactError(DomainError):
    """An impact analysis was refused; ``field`` names the input at fault."""


class HealthError(DomainError):
    """A rule health report was refused (days out of range); ``field`` names the input at fault."""


class SuggestionError(DomainError):
    """Savings or a mining job was refused (period, precision, suggestion); ``field`` names the input."""
