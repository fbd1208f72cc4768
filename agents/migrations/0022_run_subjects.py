"""Expand: RunSubject, the key=value pairs a finished run is found by (agents.subjects), with the
run's created_at, for the subject filter (``patientId=P-2002``). A new table only: the release
before neither reads nor writes it. 0022 fills it for the runs that ended before.
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("agents", "0021_change_request_grants")]

    operations = [
        migrations.CreateModel(
            name="RunSubject",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("key", models.CharField(max_length=64)),
                ("value", models.CharField(max_length=200)),
                ("created_at", models.DateTimeField()),
                (
                    "run",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="subjects",
                        to="agents.run",
                    ),
                ),
            ],
            options={
                "indexes": [
                    models.Index(fields=["key", "value", "created_at", "run"], name="runsubject_created")
                ],
                "constraints": [
                    models.UniqueConstraint(fields=("run", "key", "value"), name="runsubject_unique")
                ],
            },
        ),
    ]
