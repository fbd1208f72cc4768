"""The rules app lets go of McpServer and AuditEvent (now servers.McpServer and llamon_web.AuditEvent); no table changes.

Audit entries written before the move name servers as ``rules.mcpserver``: they are renamed, so a
server's history reads as one."""

from django.db import migrations


def _rename_audit_labels(apps, schema_editor):
    apps.get_model("llamon_web", "AuditEvent").objects.filter(object_type="rules.mcpserver").update(
        object_type="servers.mcpserver"
    )


def _restore_audit_labels(apps, schema_editor):
    apps.get_model("llamon_web", "AuditEvent").objects.filter(object_type="servers.mcpserver").update(
        object_type="rules.mcpserver"
    )


class Migration(migrations.Migration):
    dependencies = [
        ("llamon_web", "0003_auditevent_moved"),
        ("servers", "0001_mcpserver_moved"),
        ("agents", "0005_react_servers_moved"),
        ("rules", "0003_ordered_json"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveField(
                    model_name="auditevent",
                    name="actor",
                ),
                migrations.DeleteModel(
                    name="McpServer",
                ),
                migrations.DeleteModel(
                    name="AuditEvent",
                ),
            ],
            database_operations=[migrations.RunPython(_rename_audit_labels, _restore_audit_labels)],
        ),
    ]
