"""RunTool: the tools each run called, with the run's created_at, for the "tool called" filter.

Filled from the steps recorded so far (one INSERT ... SELECT DISTINCT); the steps' (tool_name,
kind, run) index, which served the filter until now, is dropped.
"""

import django.db.models.deletion
from django.db import migrations, models

BACKFILL = """
INSERT INTO agents_runtool (run_id, tool_name, created_at)
SELECT DISTINCT s.run_id, s.tool_name, r.created_at
FROM agents_runstep s JOIN agents_run r ON r.id = s.run_id
WHERE s.kind IN ('rule', 'tool') AND s.tool_name <> ''
"""


class Migration(migrations.Migration):
    dependencies = [("agents", "0007_run_query_trigram")]

    operations = [
        migrations.CreateModel(
            name="RunTool",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("tool_name", models.CharField(max_length=200)),
                ("created_at", models.DateTimeField()),
                (
                    "run",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="tools_called",
                        to="agents.run",
                    ),
                ),
            ],
            options={
                "indexes": [
                    models.Index(fields=["tool_name", "created_at", "run"], name="runtool_tool_created")
                ],
                "constraints": [models.UniqueConstraint(fields=("run", "tool_name"), name="runtool_unique")],
            },
        ),
        migrations.RunSQL(BACKFILL, reverse_sql=migrations.RunSQL.noop),
        migrations.RemoveIndex(model_name="runstep", name="step_tool_run"),
    ]
