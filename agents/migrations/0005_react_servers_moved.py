"""Agent.react_servers points at servers.McpServer: the same table, the same join table."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0004_run_delivery"),
        ("rules", "0003_ordered_json"),
        ("servers", "0001_mcpserver_moved"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="agent",
                    name="react_servers",
                    field=models.ManyToManyField(
                        blank=True, related_name="react_agents", to="servers.mcpserver"
                    ),
                ),
            ],
            database_operations=[],
        ),
    ]
