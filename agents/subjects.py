"""A run's subjects: the ``key=value`` pairs of its context and DataParts that the run list, the
API, the MCP endpoint and the evidence export filter by (``patientId=P-2002``).

One derivation (:func:`run_subjects`) from what the run was asked, written as ``RunSubject`` rows
when the run ends, in the transaction that seals its decision record (``agents.evidence.run_end``).
The rows are an index, nothing more: the decision record commits to the request they come from,
and the verifier derives them again and names the run when the rows differ (an edited, deleted or
inserted row would make a filtered export drop or gain a run).

One check (:func:`subject_parse`) for what a person types, on every route: a key of letters,
digits, ``_ . -`` (any script, at most KEY_MAX), ``=``, a value of at most VALUE_MAX characters
with no control characters and no space at either end.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterator, Mapping
from typing import Any

from django.utils.translation import gettext as _

KEY_MAX = 64
VALUE_MAX = 200  # as userId, sessionId and chatbotId
PER_RUN = 64  # rows a run gets at most (the first ones: context, then each DataPart, in order)
DEPTH = 3  # nested objects are read as dotted keys, this deep (patient.id)
SUBJECT_MAX = KEY_MAX + 1 + VALUE_MAX

_KEY = re.compile(r"[\w.\-]+")
EXAMPLE = "patientId=P-2002"


class SubjectError(ValueError):
    """A subject filter a person typed that is not ``key=value`` within the bounds (the sentence says why)."""


def _key_problem(key: str) -> str | None:
    if not key:
        return _("The subject needs a key before the =, e.g. %(example)s.") % {"example": EXAMPLE}
    if len(key) > KEY_MAX:
        return _("The subject's key is %(n)s characters; the limit is %(max)s.") % {
            "n": len(key),
            "max": KEY_MAX,
        }
    if not _KEY.fullmatch(key):
        return _("The subject's key %(key)r may hold only letters, digits, _, . and -.") % {
            "key": key[:KEY_MAX]
        }
    return None


def _value_problem(value: str) -> str | None:
    if not value:
        return _("The subject needs a value after the =, e.g. %(example)s.") % {"example": EXAMPLE}
    if len(value) > VALUE_MAX:
        return _("The subject's value is %(n)s characters; the limit is %(max)s.") % {
            "n": len(value),
            "max": VALUE_MAX,
        }
    if any(unicodedata.category(ch)[0] == "C" for ch in value):
        return _("The subject's value holds a control or invisible character; type it as plain text.")
    if value != value.strip():
        return _("The subject's value starts or ends with a space; leave the spaces out.")
    return None


def subject_parse(text: str) -> tuple[str, str]:
    """``key=value`` as (key, value); SubjectError with the sentence when it is not one."""
    if len(text) > SUBJECT_MAX:
        raise SubjectError(
            _(
                "The subject is %(n)s characters; the limit is %(max)s (a key of %(key)s, a value of %(value)s)."
            )
            % {"n": len(text), "max": SUBJECT_MAX, "key": KEY_MAX, "value": VALUE_MAX}
        )
    key, sep, value = text.partition("=")
    if not sep:
        raise SubjectError(_("Write the subject as key=value, e.g. %(example)s.") % {"example": EXAMPLE})
    problem = _key_problem(key) or _value_problem(value)
    if problem:
        raise SubjectError(problem)
    return key, value


def _text(value: Any) -> str | None:
    """A scalar as the text a filter matches (JSON's spelling for numbers and booleans); None otherwise."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool | int | float) and value == value:  # not NaN
        return json.dumps(value)
    return None


def _pairs(obj: Mapping[str, Any], prefix: str = "", depth: int = 1) -> Iterator[tuple[str, str]]:
    for key, value in obj.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            if depth < DEPTH:
                yield from _pairs(value, f"{name}.", depth + 1)
            continue
        text = _text(value)
        if text is not None and _key_problem(name) is None and _value_problem(text) is None:
            yield name, text


def run_subjects(context: Any, data: Any) -> list[tuple[str, str]]:
    """The (key, value) pairs a run is found by: every scalar of its context and of each DataPart
    (nested objects as dotted keys), that a filter could name; once each, at most PER_RUN."""
    found: dict[tuple[str, str], None] = {}
    sources = [context] + (list(data) if isinstance(data, list) else [])
    for source in sources:
        if isinstance(source, Mapping):
            for pair in _pairs(source):
                found.setdefault(pair)
                if len(found) == PER_RUN:
                    return list(found)
    return list(found)
