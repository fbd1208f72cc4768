import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0009_rollout_shadow"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="replay_of",
            field=models.ForeignKey(
                blank=True,
                null=True,
                db_constraint=False,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="replays",
                to="agents.run",
            ),
        ),
    ]
