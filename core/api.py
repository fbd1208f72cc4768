"""What every API operation shares: ids the database can hold, the one error shape, a 404 that says what.

The apps' routers and the API's composition (``llamon_web.api``) use these; who may call an
operation is ``accounts.api_auth``'s.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from django import forms
from django.db.models import Model
from django.http import Http404
from ninja import Field, Schema
from pydantic import BeforeValidator, ValidationInfo, field_validator


def _not_a_boolean(value: Any) -> Any:
    """JSON's true and false are not numbers (pydantic would take true as the id 1)."""
    if isinstance(value, bool):
        raise ValueError("a number is needed here, not true or false")
    return value


# Ids and revisions as the database can hold them (SQLite integers are 64-bit signed): a larger
# number is a 422 here rather than an OverflowError (500) in the query; a boolean is no id.
DbId = Annotated[int, BeforeValidator(_not_a_boolean), Field(ge=1, le=2**63 - 1)]
Revision = Annotated[int, BeforeValidator(_not_a_boolean), Field(ge=0, le=2**63 - 1)]


class PatchIn(Schema):
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


class FormInvalid(Exception):
    """A Django form (the pages' own validation, reused by the API) refused the input: a 422."""

    def __init__(self, form: forms.Form, *, field_prefix: str = "") -> None:
        self.form = form
        self.field_prefix = field_prefix
        super().__init__(form.errors.as_text())

    def body(self) -> dict[str, Any]:
        """The ErrorOut body: the first message as ``detail`` with its field, all of them in ``errors``."""
        errors = [
            {"field": None if name == "__all__" else self.field_prefix + name, "message": str(message)}
            for name, messages in self.form.errors.items()
            for message in messages
        ]
        first = errors[0] if errors else {"field": None, "message": "The input is not valid."}
        return {"detail": first["message"], "field": first["field"], "errors": errors}


def get_or_404(model: type[Model], what: str, **lookup: Any) -> Any:
    """One object, or a 404 whose message says what was not found ("There is no rule set with id 7.")."""
    found = model._default_manager.filter(**lookup).first()
    if found is None:
        shown = ", ".join(f"{'id' if k == 'pk' else k.removesuffix('_id')} {v}" for k, v in lookup.items())
        raise Http404(f"There is no {what} with {shown}.")
    return found
