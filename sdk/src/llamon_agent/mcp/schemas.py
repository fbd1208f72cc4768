"""Checking a value against a tool's JSON schema (its input or its output schema), as readable lines.

One implementation for every caller: the workbench checks a rule's ``params`` against the input schema
before anything is called, and the pool checks a result's structured content against the output
schema after a call (a warning, never a failure: the value is handed on as the server sent it).
"""

from __future__ import annotations

import functools
import json
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
    try:
        key = json.dumps(schema, sort_keys=True, default=str)
    except ValueError:  # a circular structure: no JSON schema at all
        return [f"the tool's {what} schema is itself invalid: it refers to itself"]
    validator, broken = _validator(key)
    if validator is None:
        return [f"the tool's {what} schema {broken}"]
    try:
        found = sorted(validator.iter_errors(value), key=lambda e: list(map(str, e.absolute_path)))
    except Unresolvable as exc:  # a $ref to nowhere: the schema passes check_schema, yet cannot be used
        return [f"the tool's {what} schema has a reference that leads nowhere: {_cut(str(exc.ref))}"]
    lines = []
    for error in found[:limit]:
        where = "/".join(str(p) for p in error.absolute_path)
        message = _cut(error.message)
        lines.append(f"{where}: {message}" if where else message)
    return lines


@functools.lru_cache(maxsize=512)
def _validator(key: str) -> tuple[Any, str]:
    """The checked validator of one schema (by its canonical JSON), or None and why the schema is
    invalid. Checking a schema and building its validator cost about 2 ms: once per schema, not once
    per call (every tool result with structured content is checked, and every rule's params)."""
    schema = json.loads(key)
    validator_cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        validator_cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        return None, f"is itself invalid: {_cut(exc.message)}"
    return validator_cls(schema), ""


def _cut(text: str) -> str:
    return text if len(text) <= MAX_PROBLEM_CHARS else text[:MAX_PROBLEM_CHARS] + "…"
