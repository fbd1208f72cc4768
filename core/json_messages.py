"""Python's JSON decoder says what is wrong in English; these are its messages, marked for translation,
so a form that refuses pasted JSON says why in the user's language (line and column come beside).
In English they read as Python wrote them."""

from __future__ import annotations

from django.utils.translation import gettext, gettext_noop

# json.decoder's messages (the C scanner uses the same ones).
DECODER_MESSAGES = frozenset(
    {
        gettext_noop("Expecting value"),
        gettext_noop("Expecting property name enclosed in double quotes"),
        gettext_noop("Expecting ':' delimiter"),
        gettext_noop("Expecting ',' delimiter"),
        gettext_noop("Unterminated string starting at"),
        gettext_noop("Invalid control character at"),
        gettext_noop("Invalid \\uXXXX escape"),
        gettext_noop("Extra data"),
    }
)
_INVALID_ESCAPE = gettext_noop("Invalid \\escape")


def json_error_reason(msg: str) -> str:
    """Python's JSON decoder message in the active language (one it does not know stays as it is)."""
    if msg.startswith(_INVALID_ESCAPE):
        return gettext(_INVALID_ESCAPE) + msg[len(_INVALID_ESCAPE) :]
    return gettext(msg) if msg in DECODER_MESSAGES else msg
