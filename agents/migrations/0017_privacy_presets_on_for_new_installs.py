"""The mask presets are on for a new install (issue #40, point 6); an existing one keeps its choice.

Expand only: a help text and one row written on a database that has no privacy settings, no agent
and no run yet (a fresh ``migrate``). Nothing the previous release reads changes.
"""

from django.db import migrations

import core.fields

# The presets of this release (llamon_agent.guardrails.MASK_PRESETS), written out: a migration
# must do the same thing whatever later releases add.
DEFAULT_PRESETS = [
    "kr_rrn",
    "kr_frn",
    "kr_phone",
    "account_number",
    "card_number",
    "email",
    "passport",
    "credential",
]


def presets_on_for_a_new_install(apps, schema_editor):
    privacy = apps.get_model("agents", "PrivacySettings")
    if privacy.objects.exists():
        return
    if apps.get_model("agents", "Agent").objects.exists() or apps.get_model("agents", "Run").objects.exists():
        return  # an install in use that never saved the Privacy page: its choice (none) stands
    privacy.objects.create(pk=1, mask_presets=DEFAULT_PRESETS)


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0016_step_warnings"),
    ]

    operations = [
        migrations.AlterField(
            model_name="privacysettings",
            name="mask_presets",
            field=core.fields.OrderedJSONField(
                blank=True, default=list, help_text="Built-in masks (llamon_agent.guardrails.MASK_PRESETS)."
            ),
        ),
        migrations.RunPython(presets_on_for_a_new_install, migrations.RunPython.noop),
    ]
