"""A tool list's content hash and checking arguments against a tool's input schema (jsonschema)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jsonschema
from referencing.exceptions import Unresolvable

from core.content_hash import sha256


def tools_hash(tools: Sequence[Mapping[str, Any]]) -> str:
    """A hash of one server's tool list."""
    return sha256(sorted((t["name"], t.get("description", ""), t.get("input_schema", {})) for t in tools))


def schema_errors(schema: Mapping[str, Any], value: Any, *, limit: int = 20) -> list[str]:
    """Why ``value`` does not fit a JSON schema, as short readable lines; empty when it fits (or no schema)."""
    if not schema:
        return []
    validator_cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        validator_cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        return [f"the tool's input schema is itself invalid: {exc.message}"]
    try:
        found = sorted(
            validator_cls(schema).iter_errors(value), key=lambda e: list(map(str, e.absolute_path))
        )
    except Unresolvable as exc:  # a $ref to nowhere: the schema passes check_schema, yet cannot be used
        return [f"the tool's input schema has a reference that leads nowhere: {exc.ref}"]
    lines = []
    for error in found[:limit]:
        where = "/".join(str(p) for p in error.absolute_path)
        lines.append(f"{where}: {error.message}" if where else error.message)
    return lines
