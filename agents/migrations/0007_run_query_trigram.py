"""PostgreSQL only: a trigram index for the run list's query-text filter (icontains).

Without it a search for text that few runs contain reads every run (1.3 s at a million runs,
docs/performance.md). pg_trgm ships with PostgreSQL and is a trusted extension (the database
owner may create it); where it cannot be created the index is skipped and the filter still works.
SQLite has no such index: the embedded database stays small enough to scan.
"""

from __future__ import annotations

import logging

from django.db import migrations, transaction

logger = logging.getLogger(__name__)
INDEX = "run_query_trgm"


def create(apps, schema_editor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    try:
        with transaction.atomic(using=schema_editor.connection.alias):
            schema_editor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    except Exception as exc:  # noqa: BLE001 - no extension, no index; the filter works without it
        logger.warning("pg_trgm is not available (%s): the run list's text search will scan runs", exc)
        return
    # The expression Django's icontains compares: UPPER("query"::text) LIKE UPPER(%s).
    schema_editor.execute(
        f"CREATE INDEX IF NOT EXISTS {INDEX} ON agents_run USING gin ((UPPER(query::text)) gin_trgm_ops)"
    )


def drop(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX IF EXISTS {INDEX}")


class Migration(migrations.Migration):
    dependencies = [("agents", "0006_run_list_indexes")]
    operations = [migrations.RunPython(create, drop, elidable=False)]
