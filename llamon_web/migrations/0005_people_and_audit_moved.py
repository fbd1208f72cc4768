"""The project package keeps no models: they moved by state to core and accounts (tables kept)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0001_auditevent_moved"),
        ("accounts", "0001_people_moved"),
        ("llamon_web", "0004_user_profile_invite"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveField(
                    model_name="auditevent",
                    name="actor",
                ),
                migrations.RemoveField(
                    model_name="userinvite",
                    name="created_by",
                ),
                migrations.RemoveField(
                    model_name="userinvite",
                    name="user",
                ),
                migrations.RemoveField(
                    model_name="userprofile",
                    name="user",
                ),
                migrations.DeleteModel(
                    name="ApiToken",
                ),
                migrations.DeleteModel(
                    name="AuditEvent",
                ),
                migrations.DeleteModel(
                    name="UserInvite",
                ),
                migrations.DeleteModel(
                    name="UserProfile",
                ),
            ],
            database_operations=[],
        )
    ]
