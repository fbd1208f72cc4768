"""The MCP client's English errors in the user's language, where a person reads them.

The engine (llamon_agent.mcp) writes its errors in English: the health check stores them on the
server (``last_error``), the pre-step gives them to the LLM and the logs. The pages translate them
here at display: a known sentence becomes the catalogue's, with its values (server id, tool, seconds,
URL); what came from below it (the operating system's or the HTTP library's words) is quoted and
marked as the library's. English pages show the text unchanged.
"""

from __future__ import annotations

import re
from typing import Any

from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from core.library_messages import english_shown, library_text

_CAUSE = "cause"  # a group holding a lower library's own words

# What follows "MCP server 'x'[, tool 'y']: " (sdk/src/llamon_agent/mcp/pool.py, transports.py).
REASONS: list[tuple[re.Pattern[str], Any]] = [
    (re.compile(p, re.S), t)
    for p, t in [
        (r"no session within (?P<seconds>[\d.]+)s", _("no session within %(seconds)s s")),
        (r"could not open a session: (?P<cause>.*)", _("could not open a session: %(cause)s")),
        (
            r"the server did not finish the MCP handshake within (?P<seconds>[\d.]+)s(?P<rest>.*)",
            _("the server did not finish the MCP handshake within %(seconds)s s%(rest)s"),
        ),
        (
            r"the session ended right after opening: (?P<cause>.*)",
            _("the session ended right after opening: %(cause)s"),
        ),
        (
            r"tools/list got no answer within (?P<seconds>[\d.]+)s",
            _("tools/list got no answer within %(seconds)s s"),
        ),
        (r"tools/list failed: (?P<cause>.*)", _("tools/list failed: %(cause)s")),
        (r"malformed tools/list reply: (?P<cause>.*)", _("malformed tools/list reply: %(cause)s")),
        (
            r"tools/list kept returning a next cursor after 1000 pages",
            _("tools/list kept returning a next cursor after 1000 pages"),
        ),
        (
            r"could not start (?P<command>'.*'|\".*\"): (?P<cause>.*)",
            _("could not start %(command)s: %(cause)s"),
        ),
        (r"refused to connect to (?P<url>\S+): (?P<cause>.*)", _("refused to connect to %(url)s: %(cause)s")),
        (r"refusing to open a session: (?P<cause>.*)", _("refusing to open a session: %(cause)s")),
        (
            r"refusing to start stdio command (?P<command>.*): not allowed by this pool's stdio allow-list",
            _("refusing to start stdio command %(command)s: not allowed by this pool's stdio allow-list"),
        ),
        (r"the session is closed", _("the session is closed")),
        (r"the session was closed because (?P<cause>.*)", _("the session was closed because %(cause)s")),
        (
            r"no answer within (?P<seconds>[\d.]+)s; the request was cancelled",
            _("no answer within %(seconds)s s; the request was cancelled"),
        ),
        (
            r"the session died during the call \((?P<cause>.*)\); the call was not retried because the "
            r"server may have received it",
            _(
                "the session died during the call (%(cause)s); the call was not retried because the "
                "server may have received it"
            ),
        ),
    ]
]

_WHERE = re.compile(r"MCP server '(?P<mcp_id>[^']*)'(?:, tool '(?P<tool>[^']*)')?: (?P<rest>.*)", re.S)
# The pre-step's own sentence when a rule names a tool its server does not have (at run time).
_PRESTEP_NO_TOOL = re.compile(r"MCP '(?P<mcp_id>[^']*)' has no tool '(?P<tool>[^']*)'")
_NO_TOOL = re.compile(
    r"MCP server '(?P<mcp_id>[^']*)' has no tool '(?P<tool>[^']*)'; available tools: (?P<names>.*)"
)


def _reason(text: str) -> str | None:
    for pattern, template in REASONS:
        match = pattern.fullmatch(text)
        if match:
            values = match.groupdict()
            if _CAUSE in values:
                values[_CAUSE] = library_text(values[_CAUSE], str(_("the MCP client")))
            return str(template) % values
    return None


def mcp_message(text: str) -> str:
    """An MCP error of the engine (a health check's, a call's, the pre-step's unknown tool) in the
    active language; a text it does not know is returned as it is."""
    text = str(text or "")
    if english_shown():  # the engine's English, unchanged
        return text
    match = _PRESTEP_NO_TOOL.fullmatch(text)
    if match:  # (not "MCP '...": the seed's contract sentence starts so, and is never translated)
        return gettext("MCP server '%(mcp_id)s' has no tool '%(tool)s'") % match.groupdict()
    match = _NO_TOOL.fullmatch(text)
    if match:
        return gettext("MCP server '%(mcp_id)s' has no tool '%(tool)s'; available tools: %(names)s") % (
            match.groupdict()
        )
    match = _WHERE.fullmatch(text)
    if match:
        reason = _reason(match["rest"])
        if reason is None:
            return text
        if match["tool"]:
            return gettext("MCP server '%(mcp_id)s', tool '%(tool)s': %(reason)s") % {
                "mcp_id": match["mcp_id"],
                "tool": match["tool"],
                "reason": reason,
            }
        return gettext("MCP server '%(mcp_id)s': %(reason)s") % {"mcp_id": match["mcp_id"], "reason": reason}
    return _reason(text) or text


def mcp_reason_text(text: str) -> str:
    """What follows "MCP server 'x': " in the active language: a known reason as the catalogue's
    sentence, anything else quoted as the MCP client's own words (English pages: unchanged)."""
    if english_shown():
        return text
    return _reason(text) or library_text(text, str(_("the MCP client")))


def mcp_health_text(text: str) -> str:
    """A server's stored health-check failure (``last_error``) for a page, in the active language; a
    text the client did not write (an oversized tool list, say) is shown as stored, quoted in Korean."""
    translated = mcp_message(text)
    if translated != text:
        return translated
    return library_text(text, str(_("the MCP client")))
