"""AuditEvent moves from the rules app to the project (every app writes it); its table stays as it is."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

import core.fields


class Migration(migrations.Migration):
    dependencies = [
        ("rules", "0003_ordered_json"),
        ("llamon_web", "0002_apitoken"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="AuditEvent",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("actor_name", models.CharField(blank=True, max_length=150)),
                        ("action", models.CharField(max_length=64)),
                        ("object_type", models.CharField(max_length=64)),
                        ("object_id", models.CharField(blank=True, max_length=64)),
                        ("object_repr", models.CharField(blank=True, max_length=200)),
                        ("before", core.fields.OrderedJSONField(blank=True, null=True)),
                        ("after", core.fields.OrderedJSONField(blank=True, null=True)),
                        ("created_at", models.DateTimeField(auto_now_add=True, db_index=True)),
                        (
                            "actor",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                    ],
                    options={
                        "db_table": "rules_auditevent",
                        "ordering": ["-created_at", "-id"],
                        "indexes": [
                            models.Index(
                                fields=["object_type", "object_id"], name="rules_audit_object__4dada7_idx"
                            )
                        ],
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
