"""Checks for values a person chooses that the database would otherwise refuse with a server error.

- JSON: :func:`llamon_agent.strictjson.loads` (NaN, deep nesting, huge integers, NUL); here the
  django-ninja parser that applies it to every API body (forms call it directly).
- Date filters: PostgreSQL takes UTC offsets up to +-15:59 and every backend converts to UTC, so an
  offset beyond that or a date that leaves years 1..9999 in UTC is refused with a message, never
  passed on (:class:`FilterDateTimeField` for forms, :data:`FilterDateTime` for API schemas).
- NUL in text: forms' CharField already refuses it (ProhibitNullCharactersValidator); the API's
  query strings and form bodies go through :class:`StrictParser`, which refuses it the same way.
"""

from __future__ import annotations

import unicodedata
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from django import forms
from django.http import HttpRequest
from django.utils.datastructures import MultiValueDict
from django.utils.translation import gettext as _
from ninja.parser import Parser
from pydantic import AfterValidator

from llamon_agent.strictjson import JSONInputError, loads

MAX_UTC_OFFSET = timedelta(hours=15, minutes=59)
MAX_DB_ID = 2**63 - 1  # a bigint primary key


def db_id(text: str | None) -> int | None:
    """A primary key typed by a person (``?rule=12``), or None when it cannot be one.

    Only ASCII digits count ("²".isdigit() is true, and int() refuses it) and at most 19 of them:
    int() of a 5,000-digit text raises ValueError (Python's 4,300-digit limit), and a key past
    2**63 - 1 overflows the database's bigint. Callers answer None with their own 404 or 400.
    """
    if not text or len(text) > 19 or not (text.isascii() and text.isdigit()):
        return None
    value = int(text)
    return value if 1 <= value <= MAX_DB_ID else None


def typed_count(text: str | None) -> int | str:
    """A whole number typed by a person (``?offset=500``) as an int (empty: 0), else the text as typed,
    for the service that takes it to refuse with its own message (same digit rules as :func:`db_id`)."""
    if not text:
        return 0
    if len(text) <= 18 and text.isascii() and text.isdigit():
        return int(text)
    return text


# Characters a name shown in lists, logs and the audit may not hold: controls (CR, LF, tab, ...),
# invisible format characters (the bidi overrides and isolates among them), line and paragraph
# separators, surrogates, private-use and unassigned code points; and right-to-left letters, which
# reorder what is shown around them in an English or Korean list.
_NOT_PLAIN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
_RIGHT_TO_LEFT = frozenset({"R", "AL", "RLE", "RLO", "RLI", "LRE", "LRO", "LRI", "FSI", "PDF", "PDI"})


def plain_text_refusal(text: str) -> str | None:
    """Why ``text`` is not plain printable left-to-right text on one line (the first character at
    fault, named), or None when it is. The message is translated."""
    for char in text:
        if (
            unicodedata.category(char) in _NOT_PLAIN_CATEGORIES
            or unicodedata.bidirectional(char) in _RIGHT_TO_LEFT
        ):
            name = unicodedata.name(char, "")
            shown = f"U+{ord(char):04X} {name}".strip()
            return _(
                "Use plain printable text on one line: %(character)s is not allowed (no line breaks, "
                "control, invisible or right-to-left characters)."
            ) % {"character": shown}
    return None


NUL_MESSAGE = "Null characters are not allowed."  # Django's ProhibitNullCharactersValidator says the same


class UserInputError(ValueError):
    """A value from the request that is refused; ``str()`` is the message for the person."""


def check_filter_datetime(value: datetime) -> datetime:
    """``value`` in UTC, or UserInputError when its offset or its UTC date is out of range."""
    offset = value.utcoffset()
    if offset is not None and abs(offset) > MAX_UTC_OFFSET:
        sign = "-" if offset < timedelta(0) else "+"
        minutes = int(abs(offset).total_seconds()) // 60
        raise UserInputError(
            _("The UTC offset %(offset)s is out of range; use one between -15:59 and +15:59.")
            % {"offset": f"{sign}{minutes // 60:02d}:{minutes % 60:02d}"}
        )
    if offset is None:
        return value
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise UserInputError(
            _("The date is out of range: in UTC it must fall in the years 1 to 9999.")
        ) from None


def _pydantic_filter_datetime(value: datetime) -> datetime:
    try:
        return check_filter_datetime(value)
    except UserInputError as exc:
        raise ValueError(str(exc)) from None


FilterDateTime = Annotated[datetime, AfterValidator(_pydantic_filter_datetime)]


class FilterDateTimeField(forms.DateTimeField):
    """A date filter: Django's DateTimeField plus the offset and range checks."""

    def to_python(self, value: Any) -> datetime | None:
        try:
            result = super().to_python(value)
        except OverflowError:  # making a naive 0001-01-01 aware in a zone east of UTC
            raise forms.ValidationError(_("The date is out of range.")) from None
        if result is None:
            return None
        try:
            return check_filter_datetime(result)
        except UserInputError as exc:
            raise forms.ValidationError(str(exc)) from None


class StrictParser(Parser):
    """django-ninja's parser with llamon_agent.strictjson for bodies and a NUL check for query strings."""

    def parse_body(self, request: HttpRequest) -> dict[str, Any]:
        try:
            return loads(request.body)
        except JSONInputError as exc:
            # ninja wraps whatever this raises in HttpError(400, "Cannot parse request body"); the
            # API's HttpError handler shows this message instead (it is the __cause__).
            raise UserInputError(_("The request body is not usable: %(exc)s.") % {"exc": exc}) from None

    def parse_querydict(
        self, data: MultiValueDict, list_fields: list[str], request: HttpRequest
    ) -> dict[str, Any]:
        for key, values in data.lists():
            if "\x00" in key or any("\x00" in v for v in values if isinstance(v, str)):
                from ninja.errors import HttpError

                raise HttpError(400, f"{key.replace(chr(0), '')}: {NUL_MESSAGE}")
        return super().parse_querydict(data, list_fields, request)


def _not_a_key(field: forms.ModelChoiceField, value: Any) -> bool:
    """Whether ``value``, sent for a primary-key choice, cannot be one (checked before any query)."""
    if field.to_field_name is not None or field.queryset is None or isinstance(value, field.queryset.model):
        return False
    return db_id(str(value)) is None


class ModelChoiceField(forms.ModelChoiceField):
    """Django's, refusing a value that cannot be a primary key before the database sees it: SQLite
    raises OverflowError for an integer past 2**63 (a 500), which Django's field does not catch."""

    def to_python(self, value: Any) -> Any:
        if value not in self.empty_values and _not_a_key(self, value):
            raise forms.ValidationError(self.error_messages["invalid_choice"], code="invalid_choice")
        return super().to_python(value)


class ModelMultipleChoiceField(forms.ModelMultipleChoiceField):
    """Django's, with the same check for each value of the list."""

    def _check_values(self, value: Any) -> Any:
        try:
            values = frozenset(value)
        except TypeError:
            raise forms.ValidationError(self.error_messages["invalid_list"], code="invalid_list") from None
        for pk in values:
            if _not_a_key(self, pk):
                raise forms.ValidationError(
                    self.error_messages["invalid_pk_value"], code="invalid_pk_value", params={"pk": pk}
                )
        return super()._check_values(value)  # type: ignore[misc]  # Django's; django-stubs do not declare it
