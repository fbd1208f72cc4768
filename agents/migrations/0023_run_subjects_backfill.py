"""Data: the subject rows of the runs that ended before 0021, in batches of BATCH runs (by id, so
memory stays flat and each batch is one short transaction on PostgreSQL's side of the loop).

The rows are what ``agents.subjects.run_subjects`` derives from each run's request, the same
derivation the verifier checks them against: an old run's decision record already commits to
that request, so the rows written here are covered like those written when a run ends.
"""

from django.db import migrations

from agents.subjects import run_subjects

BATCH = 2000
FINISHED = ("succeeded", "failed", "timed_out", "cancelled")


def backfill(apps, schema_editor):
    Run = apps.get_model("agents", "Run")
    RunSubject = apps.get_model("agents", "RunSubject")
    last = 0
    while True:
        runs = list(
            Run.objects.filter(pk__gt=last, status__in=FINISHED)
            .order_by("pk")
            .values("pk", "context", "a2a_data", "created_at")[:BATCH]
        )
        if not runs:
            return
        RunSubject.objects.bulk_create(
            [
                RunSubject(run_id=run["pk"], key=key, value=value, created_at=run["created_at"])
                for run in runs
                for key, value in run_subjects(run["context"], run["a2a_data"])
            ],
            ignore_conflicts=True,
            batch_size=BATCH,
        )
        last = runs[-1]["pk"]


class Migration(migrations.Migration):
    dependencies = [("agents", "0022_run_subjects")]

    operations = [migrations.RunPython(backfill, migrations.RunPython.noop, elidable=True)]
