"""Libraries' own English, shown to a person in the active language: Python's syntax errors and RE2's.

The engine (llamon_agent) keeps these texts as the libraries give them (the LLM, the logs and the
SDK's users read English); the web translates them where a person reads them. A message known here
becomes a sentence of the catalogue with its parameters (the fragment of the pattern, the bracket,
the line); one that is not keeps its words, quoted and marked as the library's, after a sentence in
the user's language. English pages show the library's text unchanged.
"""

from __future__ import annotations

import re
from typing import Any

from django.utils.translation import get_language, gettext
from django.utils.translation import gettext_lazy as _

# Python's SyntaxError messages that an expression of one line meets (3.11 and later).
SYNTAX_MESSAGES: list[tuple[re.Pattern[str], Any]] = [
    (re.compile(p), t)
    for p, t in [
        (r"invalid syntax", _("invalid syntax")),
        (r"invalid syntax\. Perhaps you forgot a comma\?", _("invalid syntax. Perhaps you forgot a comma?")),
        (
            r"invalid syntax\. Maybe you meant '==' or ':=' instead of '='\?",
            _("invalid syntax. Maybe you meant '==' or ':=' instead of '='?"),
        ),
        (r"'(?P<bracket>.)' was never closed", _("'%(bracket)s' was never closed")),
        (r"unmatched '(?P<bracket>.)'", _("unmatched '%(bracket)s'")),
        (
            r"closing parenthesis '(?P<closing>.)' does not match opening parenthesis '(?P<opening>.)'"
            r"(?: on line (?P<line>\d+))?",
            _("closing parenthesis '%(closing)s' does not match opening parenthesis '%(opening)s'"),
        ),
        (
            r"unterminated string literal \(detected at line (?P<line>\d+)\)",
            _("unterminated string literal (detected at line %(line)s)"),
        ),
        (
            r"unterminated triple-quoted string literal \(detected at line (?P<line>\d+)\)",
            _("unterminated triple-quoted string literal (detected at line %(line)s)"),
        ),
        (
            r"leading zeros in decimal integer literals are not permitted; use an 0o prefix for octal integers",
            _(
                "leading zeros in decimal integer literals are not permitted; use an 0o prefix for octal integers"
            ),
        ),
        (r"invalid decimal literal", _("invalid decimal literal")),
        (r"invalid hexadecimal literal", _("invalid hexadecimal literal")),
        (r"invalid octal literal", _("invalid octal literal")),
        (r"invalid binary literal", _("invalid binary literal")),
        (r"invalid imaginary literal", _("invalid imaginary literal")),
        (r"positional argument follows keyword argument", _("positional argument follows keyword argument")),
        (
            r"positional argument follows keyword argument unpacking",
            _("positional argument follows keyword argument unpacking"),
        ),
        (r"expected 'else' after 'if' expression", _("expected 'else' after 'if' expression")),
        (
            r"invalid character '(?P<char>.+)' \((?P<code>U\+[0-9A-F]+)\)",
            _("invalid character '%(char)s' (%(code)s)"),
        ),
        (
            r"invalid non-printable character (?P<code>U\+[0-9A-F]+)",
            _("invalid non-printable character %(code)s"),
        ),
        (
            r"expression expected after dictionary key and ':'",
            _("expression expected after dictionary key and ':'"),
        ),
        (r"':' expected after dictionary key", _("':' expected after dictionary key")),
        (r"expected ':'", _("expected ':'")),
        (r"unexpected EOF while parsing", _("unexpected EOF while parsing")),
        (
            r"unexpected character after line continuation character",
            _("unexpected character after line continuation character"),
        ),
        (r"Generator expression must be parenthesized", _("Generator expression must be parenthesized")),
        (
            r"did you forget parentheses around the comprehension target\?",
            _("did you forget parentheses around the comprehension target?"),
        ),
        (r"f-string: expecting '}'", _("f-string: expecting '}'")),
        (r"f-string: empty expression not allowed", _("f-string: empty expression not allowed")),
        (r"f-string: single '}' is not allowed", _("f-string: single '}' is not allowed")),
        (r"f-string: unmatched '(?P<bracket>.)'", _("f-string: unmatched '%(bracket)s'")),
        (r"source code (?:string )?cannot contain null bytes", _("the expression contains a NUL character")),
    ]
]

# RE2's error codes (re2/regexp.cc), each followed by ": " and the part of the pattern at fault.
REGEX_MESSAGES: dict[str, Any] = {
    "unexpected error": _("unexpected error"),
    "invalid escape sequence": _("invalid escape sequence"),
    "invalid character class": _("invalid character class"),
    "invalid character class range": _("invalid character class range"),
    "missing ]": _("missing ]"),
    "missing )": _("missing )"),
    "unexpected )": _("unexpected )"),
    "trailing \\": _("trailing \\"),
    "no argument for repetition operator": _("no argument for repetition operator"),
    "invalid repetition size": _("invalid repetition size"),
    "bad repetition operator": _("bad repetition operator"),
    "invalid perl operator": _("invalid perl operator"),
    "invalid UTF-8": _("invalid UTF-8"),
    "invalid named capture group": _("invalid named capture group"),
    "pattern too large - compile failed": _("pattern too large"),
}

# The engine's own sentences around RE2's message (sdk/src/llamon_agent/expr/helpers.py, guardrails.py).
_INVALID_REGEX = re.compile(
    r"invalid regular expression (?P<pattern>'.*'|\".*\"): (?P<detail>.*) "
    r"\(RE2 syntax: no look-around or backreferences\)",
    re.S,
)
_REGEX_TOO_LARGE = re.compile(
    r"invalid regular expression (?P<pattern>'.*'|\".*\"): pattern too large \(about (?P<size>[\d,]+) instructions\)",
    re.S,
)


def english_shown() -> bool:
    """Whether the active language is English, where the libraries' words are shown as they are."""
    return (get_language() or "en").split("-")[0] == "en"


def library_text(text: str, library: str) -> str:
    """A library's message that has no translation: as it is in English; elsewhere a sentence in the
    user's language with the library's words quoted after it."""
    if english_shown() or not text:
        return text
    return gettext("%(library)s's own words: “%(text)s”") % {"library": library, "text": text}


def syntax_detail(message: str) -> str:
    """Python's SyntaxError message (``exc.msg``) in the active language."""
    message = str(message)
    for pattern, template in SYNTAX_MESSAGES:
        match = pattern.fullmatch(message)
        if match:
            return str(template) % match.groupdict()
    return library_text(message, "Python")


def regex_detail(message: str | bytes) -> str:
    """RE2's message (``"missing ): ("``, also as bytes or ``"b'...'"``) in the active language."""
    if isinstance(message, bytes):
        message = message.decode("utf-8", "replace")
    message = str(message)
    if message.startswith(("b'", 'b"')) and message.endswith(message[1]):
        message = message[2:-1]
    code, sep, fragment = message.partition(": ")
    template = REGEX_MESSAGES.get(code)
    if template is None:
        return library_text(message, "RE2")
    return f"{template}: {fragment}" if sep else str(template)


def regex_error_text(exc: BaseException) -> str:
    """An ``re2.error`` as a person reads it, in the active language."""
    return regex_detail(exc.args[0] if exc.args else str(exc))


def engine_regex_text(text: str) -> str | None:
    """The engine's "invalid regular expression ..." reason in the active language (None: not one)."""
    match = _REGEX_TOO_LARGE.fullmatch(text)
    if match:
        return gettext(
            "invalid regular expression %(pattern)s: pattern too large (about %(size)s instructions)"
        ) % (match.groupdict())
    match = _INVALID_REGEX.fullmatch(text)
    if match:
        return gettext(
            "invalid regular expression %(pattern)s: %(detail)s (RE2 syntax: no look-around or backreferences)"
        ) % {"pattern": match["pattern"], "detail": regex_detail(match["detail"])}
    return None
