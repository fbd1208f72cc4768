from django.contrib import admin

from core.models import AuditEvent
from servers.models import McpServer


@admin.register(McpServer)
class McpServerAdmin(admin.ModelAdmin):
    list_display = ["mcp_id", "transport", "enabled", "tools_refreshed_at"]
    search_fields = ["mcp_id", "description"]


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    list_display = ["created_at", "actor_name", "action", "object_type", "object_repr"]
    list_filter = ["action", "object_type"]

    def has_add_permission(self, request):
        return False  # written only by core.audit.audit_write, with its evidence link

    def has_change_permission(self, request, obj=None):
        return False  # the audit log is append-only

    def has_delete_permission(self, request, obj=None):
        return False
