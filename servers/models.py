"""MCP servers and their discovered tools."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models
from django.utils.translation import gettext_lazy as _

from core.fields import OrderedJSONField
from llamon_agent.guardrails import CREDENTIAL, Redactor
from llamon_agent.mcp.spec import MCP_ID_RE

_secrets_hidden = Redactor([CREDENTIAL])


def args_shown(args: list[str]) -> list[str]:
    """A stdio server's arguments as anyone but the admin editing them sees them: the value of a
    password, token or key written into one (``--password=…``, ``user:…@`` in a URL) replaced."""
    return list(_secrets_hidden(list(args)))


mcp_id_validator = RegexValidator(
    MCP_ID_RE,
    "Use 1-64 lowercase letters, digits, '-', '_' or '.', starting with a letter or digit.",
)


class McpServer(models.Model):
    """An MCP server the pre-step and agents may call; secrets are named, never stored."""

    class Transport(models.TextChoices):
        STDIO = "stdio", _("stdio (runs a command)")
        HTTP = "http", _("streamable HTTP")

    mcp_id = models.CharField(max_length=64, unique=True, validators=[mcp_id_validator])
    description = models.TextField(blank=True)
    transport = models.CharField(max_length=8, choices=Transport.choices)
    command = models.CharField(max_length=500, blank=True)
    args = OrderedJSONField(default=list, blank=True)
    env_names = OrderedJSONField(
        default=list, blank=True, help_text="Names of environment variables passed to the child."
    )
    url = models.CharField(max_length=2000, blank=True)
    header_names = OrderedJSONField(
        default=list, blank=True, help_text="'Header-Name=ENV_NAME' or 'ENV_NAME' (sent as a bearer token)."
    )
    timeout_s = models.FloatField(default=30.0)
    enabled = models.BooleanField(default=True)

    tools = OrderedJSONField(default=list, blank=True)
    tools_hash = models.CharField(max_length=64, blank=True)
    tools_refreshed_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    last_checked_at = models.DateTimeField(null=True, blank=True)

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "rules_mcpserver"  # created by the rules app before servers had a room of its own
        ordering = ["mcp_id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(timeout_s__gt=0, timeout_s__lte=600), name="mcp_timeout_range"
            ),
        ]

    def __str__(self) -> str:
        return self.mcp_id

    @property
    def args_shown(self) -> list[str]:
        """The arguments as pages, the API and the registry show them: a password, token or key
        written into one is replaced (``${NAME}`` placeholders stay; docs/security.md)."""
        return args_shown(self.args)

    @property
    def healthy(self) -> bool | None:
        """True after a good check, False after a failed one, None before any."""
        if self.last_checked_at is None:
            return None
        return not self.last_error


class ToolCallRecord(models.Model):
    """One tool call made from the server's "call a tool" page, with its JSON-RPC messages.

    Kept per server and per person (a person sees only their own calls: arguments may be personal
    data), at most ``servers.services.HISTORY_MAX_ENTRIES`` each, the oldest dropped first. Each
    message is stored as JSON text cut at ``HISTORY_MAX_MESSAGE_CHARS``, with the values of the
    server's environment variables and headers replaced by ``[redacted]``.
    """

    server = models.ForeignKey(McpServer, on_delete=models.CASCADE, related_name="call_records")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    tool_name = models.CharField(max_length=200)
    ok = models.BooleanField(default=True)
    error = models.TextField(blank=True)
    latency_ms = models.FloatField(null=True, blank=True)
    messages = OrderedJSONField(default=list, blank=True)  # [{"direction", "text", "chars", "truncated"}]
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["server", "user", "-created_at"], name="servers_call_history")]

    def __str__(self) -> str:
        return f"{self.tool_name} on {self.server_id}"
