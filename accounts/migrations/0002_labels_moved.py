"""What named the moved models by their old app now names them by the new one.

Audit events recorded ``llamon_web.apitoken`` (and so on) as their object type, and the content
types (which permissions hang on) were ``llamon_web``'s: both now say ``accounts`` / ``core``, so
the audit log's filters and links find the old entries beside the new ones.
"""

from django.db import migrations

MOVED = {"apitoken": "accounts", "userprofile": "accounts", "userinvite": "accounts", "auditevent": "core"}


def forwards(apps, schema_editor):
    _relabel(apps, {model: ("llamon_web", app) for model, app in MOVED.items()})


def backwards(apps, schema_editor):
    _relabel(apps, {model: (app, "llamon_web") for model, app in MOVED.items()})


def _relabel(apps, moves):
    AuditEvent = apps.get_model("core", "AuditEvent")
    ContentType = apps.get_model("contenttypes", "ContentType")
    for model, (old, new) in moves.items():
        AuditEvent.objects.filter(object_type=f"{old}.{model}").update(object_type=f"{new}.{model}")
        if not ContentType.objects.filter(app_label=new, model=model).exists():
            ContentType.objects.filter(app_label=old, model=model).update(app_label=new)


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0001_people_moved"),
        ("core", "0001_auditevent_moved"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]
