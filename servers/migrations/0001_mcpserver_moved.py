"""McpServer moves from the rules app to its own room; its table (rules_mcpserver) stays as it is."""

import re

import django.core.validators
from django.db import migrations, models

import core.fields


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("rules", "0003_ordered_json"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="McpServer",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        (
                            "mcp_id",
                            models.CharField(
                                max_length=64,
                                unique=True,
                                validators=[
                                    django.core.validators.RegexValidator(
                                        re.compile("^[a-z0-9][a-z0-9_.-]{0,63}$"),
                                        "Use 1-64 lowercase letters, digits, '-', '_' or '.', starting with a letter or digit.",
                                    )
                                ],
                            ),
                        ),
                        ("description", models.TextField(blank=True)),
                        (
                            "transport",
                            models.CharField(
                                choices=[("stdio", "stdio (runs a command)"), ("http", "streamable HTTP")],
                                max_length=8,
                            ),
                        ),
                        ("command", models.CharField(blank=True, max_length=500)),
                        ("args", core.fields.OrderedJSONField(blank=True, default=list)),
                        (
                            "env_names",
                            core.fields.OrderedJSONField(
                                blank=True,
                                default=list,
                                help_text="Names of environment variables passed to the child.",
                            ),
                        ),
                        ("url", models.CharField(blank=True, max_length=2000)),
                        (
                            "header_names",
                            core.fields.OrderedJSONField(
                                blank=True,
                                default=list,
                                help_text="'Header-Name=ENV_NAME' or 'ENV_NAME' (sent as a bearer token).",
                            ),
                        ),
                        ("timeout_s", models.FloatField(default=30.0)),
                        ("enabled", models.BooleanField(default=True)),
                        ("tools", core.fields.OrderedJSONField(blank=True, default=list)),
                        ("tools_hash", models.CharField(blank=True, max_length=64)),
                        ("tools_refreshed_at", models.DateTimeField(blank=True, null=True)),
                        ("last_error", models.TextField(blank=True)),
                        ("last_checked_at", models.DateTimeField(blank=True, null=True)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("updated_at", models.DateTimeField(auto_now=True)),
                    ],
                    options={
                        "db_table": "rules_mcpserver",
                        "ordering": ["mcp_id"],
                        "constraints": [
                            models.CheckConstraint(
                                condition=models.Q(("timeout_s__gt", 0), ("timeout_s__lte", 600)),
                                name="mcp_timeout_range",
                            )
                        ],
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
