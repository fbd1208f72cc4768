"""What every API operation shares: ids the database can hold, the one error shape, a 404 that says what.

The apps' routers and the API's composition (``llamon_web.api``) use these; who may call an
operation is ``accounts.api_auth``'s.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, ClassVar

from django.db.models import Model
from django.http import Http404
from django.utils.translation import gettext as _
from ninja import Field, Schema
from pydantic import BeforeValidator, ConfigDict, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError


def _not_a_boolean(value: Any) -> Any:
    """JSON's true and false are not numbers (pydantic would take true as the id 1)."""
    if isinstance(value, bool):
        raise ValueError("a number is needed here, not true or false")
    return value


# Ids and revisions as the database can hold them (SQLite integers are 64-bit signed): a larger
# number is a 422 here rather than an OverflowError (500) in the query; a boolean is no id.
DbId = Annotated[int, BeforeValidator(_not_a_boolean), Field(ge=1, le=2**63 - 1)]
Revision = Annotated[int, BeforeValidator(_not_a_boolean), Field(ge=0, le=2**63 - 1)]


def unknown_field_message(name: str, valid: Iterable[str], hints: Mapping[str, str] | None = None) -> str:
    """The sentence for a field no operation reads: the field, and the closest valid one (difflib;
    ``hints`` first: a name used elsewhere for the same thing, e.g. the tester's ``a2a_data``)."""
    names = sorted(valid)
    hints = hints or {}
    close = [hints.get(c, c) for c in difflib.get_close_matches(name, [*names, *hints], n=1, cutoff=0.6)]
    if close:
        return _("Unknown field `%(name)s`; did you mean `%(close)s`?") % {"name": name, "close": close[0]}
    if not names:
        return _("Unknown field `%(name)s`; this takes no fields.") % {"name": name}
    return _("Unknown field `%(name)s`; the fields are %(fields)s.") % {
        "name": name,
        "fields": ", ".join(f"`{n}`" for n in names),
    }


class StrictIn(Schema):
    """The base of every input schema of the REST API and the MCP endpoint: a field it does not
    declare is refused, naming it and the closest valid one, instead of being dropped in silence
    (a misspelled ``a2a_dta`` lost every run's DataParts). ``llamon_web.api`` refuses to start when
    an operation's body is not a StrictIn, so a new operation cannot forget it."""

    # extra="forbid" also makes ninja's Schema validate the raw dict first (not its DjangoGetter),
    # so the check below sees the keys as sent, and names the field before any other error.
    model_config = ConfigDict(from_attributes=True, extra="forbid")
    # Names used elsewhere for one of this schema's fields (e.g. what a GET answers), for the message.
    FIELD_HINTS: ClassVar[dict[str, str]] = {}

    @model_validator(mode="before")
    @classmethod
    def _no_unknown_fields(cls, data: Any) -> Any:
        if isinstance(data, dict):
            valid = set(cls.model_fields) | {f.alias for f in cls.model_fields.values() if f.alias}
            for key in data:
                if key not in valid:
                    raise PydanticCustomError(
                        "unknown_field",
                        "{message}",
                        {
                            "message": unknown_field_message(str(key), valid, cls.FIELD_HINTS),
                            "field": str(key),
                        },
                    )
        return data


class PatchIn(StrictIn):
    """A partial change: an absent field keeps its value, and ``null`` is refused (a 422 naming the
    field) unless the field can be empty (``NULLABLE``): sent to a NOT NULL column it was a 500.
    Every PATCH schema of the REST API, and so every MCP tool that takes one, builds on this."""

    NULLABLE: ClassVar[frozenset[str]] = frozenset()

    @field_validator("*", mode="before")
    @classmethod
    def _null_is_no_value(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None and info.field_name not in cls.NULLABLE:
            raise ValueError("null is not a value for this field; leave the field out to keep its value")
        return value


class ChangeRequestedOut(Schema):
    """202: the agent is protected, so the change was recorded as a change request, not applied."""

    detail: str
    change_request: int
    url: str


# The operations a protected agent turns into change requests (docs/governance.md) also answer this.
CHANGE_REQUESTED = {202: ChangeRequestedOut}


class ErrorOut(Schema):
    """Every 4xx answer: a sentence a person can act on, the field at fault, and the details."""

    detail: str
    field: str | None = None
    errors: list[dict[str, Any]] | None = None


def error_responses(*codes: int) -> dict[int, type[ErrorOut]]:
    """``{code: ErrorOut}`` for an operation's declared errors (401 and 403 are always possible)."""
    # 400: a body that is not JSON; 422: a body or parameter of the wrong shape.
    return dict.fromkeys(sorted({400, 401, 403, 422, *codes}), ErrorOut)


def error_field(path: list[Any], err: Mapping[str, Any]) -> str | None:
    """Where a validation error is, dotted: its location, and the field a check named in its context
    (an unknown field names itself; a value refused by a service's check names the field at fault)."""
    named = (err.get("ctx") or {}).get("field")
    return ".".join(str(p) for p in [*path, *([named] if named else [])]) or None


def get_or_404(model: type[Model], what: str, **lookup: Any) -> Any:
    """One object, or a 404 whose message says what was not found ("There is no rule set with id 7.")."""
    found = model._default_manager.filter(**lookup).first()
    if found is None:
        shown = ", ".join(f"{'id' if k == 'pk' else k.removesuffix('_id')} {v}" for k, v in lookup.items())
        raise Http404(f"There is no {what} with {shown}.")
    return found
