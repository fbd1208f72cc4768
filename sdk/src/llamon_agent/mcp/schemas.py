"""Checking a value against a tool's JSON schema (its input or its output schema), as readable lines.

One implementation for every caller: the workbench checks a rule's ``params`` against the input schema
before anything is called, and the pool checks a result's structured content against the output
schema after a call (a warning, never a failure: the value is handed on as the server sent it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jsonschema
from referencing.exceptions import Unresolvable

MAX_PROBLEM_CHARS = 300  # a jsonschema message quotes the value: a long one is cut


def schema_errors(
    schema: Mapping[str, Any] | None, value: Any, *, what: str = "input", limit: int = 20
) -> list[str]:
    """Why ``value`` does not fit a JSON schema, as short readable lines; empty when it fits (or no schema).

    ``what`` names the schema in the lines about a broken schema ("the tool's input schema ...")."""
    if not schema:
        return []
    schema = dict(schema)
    validator_cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        validator_cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        return [f"the tool's {what} schema is itself invalid: {_cut(exc.message)}"]
    try:
        found = sorted(
            validator_cls(schema).iter_errors(value), key=lambda e: list(map(str, e.absolute_path))
        )
    except Unresolvable as exc:  # a $ref to nowhere: the schema passes check_schema, yet cannot be used
        return [f"the tool's {what} schema has a reference that leads nowhere: {_cut(str(exc.ref))}"]
    lines = []
    for error in found[:limit]:
        where = "/".join(str(p) for p in error.absolute_path)
        message = _cut(error.message)
        lines.append(f"{where}: {message}" if where else message)
    return lines


def _cut(text: str) -> str:
    return text if len(text) <= MAX_PROBLEM_CHARS else text[:MAX_PROBLEM_CHARS] + "…"
