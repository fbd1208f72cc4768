"""OrderedJSONField: a JSONField whose objects come back with their keys in the order written.

On PostgreSQL Django stores JSONField as ``jsonb``, which keeps keys sorted by length and then
bytes: a tool's schema, a rule's params, DataParts and traces came back reordered, so the call
form listed a tool's arguments in a different order than the server declared them. PostgreSQL's
``json`` type keeps the text as written (and still checks that it is JSON), so this field uses it.
The price is jsonb's operators (containment, key existence, indexing, equality and so DISTINCT),
none of which the product uses; key transforms (``->``) work on both. SQLite stores text either way.
A custom encoder/decoder cannot help: jsonb reorders the keys after the text reaches the server.
"""

from __future__ import annotations

import json
from typing import Any

from django.db import models


class OrderedJSONField(models.JSONField):
    def db_type(self, connection: Any) -> str | None:
        if connection.vendor == "postgresql":
            return "json"
        return super().db_type(connection)

    def get_db_prep_value(self, value: Any, connection: Any, prepared: bool = False) -> Any:
        if connection.vendor != "postgresql":
            return super().get_db_prep_value(value, connection, prepared)
        from psycopg.types.json import Json  # only imported where PostgreSQL is used

        if not prepared:
            value = self.get_prep_value(value)
        return Json(value, dumps=lambda obj: json.dumps(obj, cls=self.encoder))

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        # psycopg decodes json itself (Django asks only for jsonb as text), keeping key order; a
        # JSON string arrives as a str that must not be decoded a second time.
        if connection.vendor == "postgresql":
            return value
        return super().from_db_value(value, expression, connection)
