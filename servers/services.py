"""Writes for MCP servers: create, update, delete, refresh tools, call a tool. Every write is audited.

Only admins may change servers (a stdio server is a command this app will run); the views
check the role and these services check it again, so an API handler that forgets cannot
let an editor save a command. Environment variable and header values are never stored:
only the *names* of the variables the app reads when it starts the child or sends a request.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from accounts.roles import has_role
from core.audit import audit_record, snapshot
from core.env_policy import mcp_env_policy
from core.gates import gate_check, gated_atomic
from llamon_agent.envnames import header_env_name
from llamon_agent.mcp import McpError, McpServerSpec
from llamon_agent.mcp.errors import McpConnectionError, McpTimeoutError
from llamon_agent.mcp.results import output_problems
from llamon_agent.mcp.schemas import schema_errors
from llamon_agent.mcp.spec import ENV_NAME_RE, MCP_ID_RE
from llamon_agent.mcp.transports import placeholder_names
from servers.errors import McpServerError
from servers.mcp_messages import mcp_reason_text
from servers.messages import unknown_tool_message
from servers.models import McpServer, ToolCallRecord
from servers.pool import pool_for_server, pool_forget, stdio_refusal
from servers.selectors import mcp_error_for
from servers.toolschema import tool_record, tools_hash
from servers.urlguard import UnsafeUrlError, check_mcp_url_configured

TIMEOUT_MIN_S = 0.1
TIMEOUT_MAX_S = 600.0
MAX_ARGS = 100
MCP_SERVER_FIELDS = (
    "mcp_id",
    "description",
    "transport",
    "command",
    "args",
    "env_names",
    "url",
    "header_names",
    "timeout_s",
    "enabled",
)
MAX_ARG_CHARS = 4000
HISTORY_MAX_ENTRIES = 50  # tool calls kept per server and person on the "call a tool" page
HISTORY_MAX_MESSAGE_CHARS = 16_000  # each JSON-RPC message in that history is cut here
REDACTED = "[redacted]"
MAX_NAMES = 50
_HEADER_NAME_RE = re.compile(r"^[A-Za-z0-9-]+$")


@dataclass
class ToolsDiff:
    """What a refresh changed: tool names added and removed, and per changed tool what changed."""

    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    changed: dict[str, list[str]] = field(default_factory=dict)
    first: bool = False

    @property
    def unchanged(self) -> bool:
        """True when the refresh found the same tools as before."""
        return not (self.added or self.removed or self.changed)

    def summary(self) -> str:
        """One line: "added a; removed b; changed c (parameter 'x' added)"."""
        parts = [f"added {', '.join(self.added)}"] if self.added else []
        parts += [f"removed {', '.join(self.removed)}"] if self.removed else []
        parts += [f"changed {name} ({', '.join(why)})" for name, why in self.changed.items()]
        return "; ".join(parts) or "unchanged"

    def to_json(self) -> dict[str, Any]:
        """The diff as JSON-ready data (stored in the refresh's audit event)."""
        return {"added": self.added, "removed": self.removed, "changed": self.changed, "first": self.first}


# --------------------------------------------------------------------------- create, update, delete


@transaction.atomic
def mcp_server_create(
    *,
    actor: Any,
    mcp_id: str,
    transport: str,
    description: str = "",
    command: str = "",
    args: list[str] | None = None,
    env_names: list[str] | None = None,
    url: str = "",
    header_names: list[str] | None = None,
    timeout_s: float = 30.0,
    enabled: bool = True,
) -> McpServer:
    """Register a server after validating it (URL guard, stdio allow-list, names only); audited."""
    _require_admin(actor, "add an MCP server")
    fields = _validated(
        mcp_id=mcp_id,
        transport=transport,
        description=description,
        command=command,
        args=args or [],
        env_names=env_names or [],
        url=url,
        header_names=header_names or [],
        timeout_s=timeout_s,
        enabled=enabled,
    )
    if McpServer.objects.filter(mcp_id=fields["mcp_id"]).exists():
        raise _duplicate(fields["mcp_id"])
    server = McpServer(**fields)
    try:
        with transaction.atomic():
            server.save()
    except IntegrityError:
        raise _duplicate(fields["mcp_id"]) from None  # someone saved the same id a moment ago
    audit_record(
        actor=actor, action="mcp_server.create", obj=server, after=snapshot(server, MCP_SERVER_FIELDS)
    )
    return server


# What changes on a server a protected agent uses at once: a note for people. Every other setting
# (what it runs or reaches, its names, time-out, whether it is on) is what the agent does, so a
# change of it is a change request on the agent (core.gates, kind "mcp_server"; docs/governance.md).
UNGATED_SERVER_FIELDS = ("description",)


@gated_atomic
def mcp_server_update(*, actor: Any, server: McpServer, **changes: Any) -> McpServer | Exception:
    """Change a server's settings (any of the create fields); audited when something changed.

    On a server a protected agent uses, a change of anything but the description is a change
    request (raised once committed; nothing changes until it is approved)."""
    unknown = set(changes) - set(MCP_SERVER_FIELDS)
    if unknown:
        raise TypeError(f"mcp_server_update() got unexpected fields: {sorted(unknown)}")
    _require_admin(actor, "change an MCP server")
    current = McpServer.objects.select_for_update().get(pk=server.pk)
    before = snapshot(current, MCP_SERVER_FIELDS)
    fields = _validated(**{**before, **changes})
    if fields["mcp_id"] != current.mcp_id and McpServer.objects.filter(mcp_id=fields["mcp_id"]).exists():
        raise _duplicate(fields["mcp_id"])
    for name, value in fields.items():
        setattr(current, name, value)
    after = snapshot(current, MCP_SERVER_FIELDS)
    if after == before:
        return current
    gated = {k: v for k, v in after.items() if v != before[k] and k not in UNGATED_SERVER_FIELDS}
    if gated and (
        pending := gate_check(
            "mcp_server",
            actor=actor,
            server=current,
            action="mcp_server.update",
            payload={"server": current.pk, "mcp_id": before["mcp_id"], "before": before, "changes": gated},
            diff={"fields": [{"field": k, "before": before[k], "after": v} for k, v in gated.items()]},
        )
    ):
        return pending
    if (
        after["transport"] != before["transport"]
        or after["url"] != before["url"]
        or after["command"] != before["command"]
    ):
        # Health and tools described the old target; keep the tools (rules refer to them) but not the verdict.
        current.last_checked_at = None
        current.last_error = ""
    try:
        with transaction.atomic():
            current.save()
    except IntegrityError:
        raise _duplicate(fields["mcp_id"]) from None
    if before["mcp_id"] != after["mcp_id"]:
        transaction.on_commit(lambda: pool_forget(before["mcp_id"]))
    audit_record(actor=actor, action="mcp_server.update", obj=current, before=before, after=after)
    return current


@gated_atomic
def mcp_server_delete(*, actor: Any, server: McpServer) -> Exception | None:
    """Remove a server (rules that name it stay, flagged as unknown); audited; its session is closed.
    A server a protected agent uses is deleted only by an approved change request."""
    _require_admin(actor, "delete an MCP server")
    server = McpServer.objects.select_for_update().get(pk=server.pk)
    before = snapshot(server, MCP_SERVER_FIELDS)
    pending = gate_check(
        "mcp_server",
        actor=actor,
        server=server,
        action="mcp_server.delete",
        payload={"server": server.pk, "mcp_id": server.mcp_id, "before": before},
        diff={"fields": [{"field": "mcp_server", "before": server.mcp_id, "after": None}]},
    )
    if pending is not None:
        return pending
    mcp_id = server.mcp_id
    audit_record(actor=actor, action="mcp_server.delete", obj=server, before=before)
    server.delete()
    transaction.on_commit(lambda: pool_forget(mcp_id))
    return None


# --------------------------------------------------------------------------- tools


def mcp_server_refresh_tools(*, actor: Any, server: McpServer) -> ToolsDiff:
    """Ask the server for its tools, store them with their hash, and return what changed; audited.

    On failure the previous tool list is kept, ``last_error`` records why and McpServerError is raised.
    """
    _require_admin(actor, "refresh a server's tools")
    return _refresh_tools(actor=actor, server=server)


def mcp_servers_check_tools() -> dict[str, str]:
    """The periodic tool check (servers.tasks, on the beat): list every enabled server's tools again.

    A server whose tool list changed is stored and audited (actor: the system) like a refresh from
    its page, so the rules whose tool vanished or whose params no longer fit are flagged on their
    rule sets at once (rules.checks). An unchanged list writes only the check time; a server that
    cannot be reached keeps its tools and records why, audited once per new error. Returns one
    line per server (mcp_id -> "changed: ...", "unchanged" or "error: ..."), for the task's log.
    """
    outcome: dict[str, str] = {}
    for server in McpServer.objects.filter(enabled=True).order_by("mcp_id"):
        previous_error = server.last_error
        try:
            diff = _refresh_tools(
                actor=None, server=server, audit_unchanged=False, audit_error=previous_error
            )
        except McpServerError as exc:
            outcome[server.mcp_id] = f"error: {exc}"
            continue
        outcome[server.mcp_id] = "unchanged" if diff.unchanged else f"changed: {diff.summary()}"
    return outcome


def _refresh_tools(
    *, actor: Any, server: McpServer, audit_unchanged: bool = True, audit_error: str | None = None
) -> ToolsDiff:
    """The refresh itself; ``audit_unchanged=False`` skips the audit entry of a list that did not
    change, and a failure whose error equals ``audit_error`` (already audited) is not audited again."""
    # The network call happens outside any transaction: a slow server must not hold a lock.
    try:
        listed = pool_for_server(server).list_tools_sync(server.mcp_id, refresh=True)
    except McpError as exc:
        _record_health(server, error=str(exc))
        if str(exc)[:4000] != audit_error:
            audit_record(
                actor=actor, action="mcp_server.refresh_tools_failed", obj=server, after={"error": str(exc)}
            )
        raise McpServerError(
            _("Could not list the tools of %(mcp_id)s: %(exc)s")
            % {"mcp_id": server.mcp_id, "exc": mcp_reason_text(_strip_where(exc))}
        ) from None
    tools = [tool_record(t) for t in listed]
    too_many = _tools_over_cap(tools)
    if too_many:
        _record_health(server, error=too_many)
        audit_record(
            actor=actor, action="mcp_server.refresh_tools_failed", obj=server, after={"error": too_many}
        )
        raise McpServerError(
            _("Did not store the tools of %(mcp_id)s: %(too_many)s")
            % {"mcp_id": server.mcp_id, "too_many": too_many}
        ) from None
    with transaction.atomic():
        current = McpServer.objects.select_for_update().get(pk=server.pk)
        diff = tools_diff(current.tools, tools, first=current.tools_refreshed_at is None)
        before = {"tools": [t["name"] for t in current.tools], "tools_hash": current.tools_hash}
        now = timezone.now()
        current.tools = tools
        current.tools_hash = tools_hash(tools)
        current.tools_refreshed_at = now
        current.last_error = ""
        current.last_checked_at = now
        current.save(
            update_fields=[
                "tools",
                "tools_hash",
                "tools_refreshed_at",
                "last_error",
                "last_checked_at",
                "updated_at",
            ]
        )
        if audit_unchanged or not diff.unchanged:
            audit_record(
                actor=actor,
                action="mcp_server.refresh_tools",
                obj=current,
                before=before,
                after={
                    "tools": [t["name"] for t in tools],
                    "tools_hash": current.tools_hash,
                    "diff": diff.to_json(),
                },
            )
    for name in ("tools", "tools_hash", "tools_refreshed_at", "last_error", "last_checked_at"):
        setattr(server, name, getattr(current, name))
    return diff


def mcp_server_list_tools_after_save(*, actor: Any, server: McpServer) -> str:
    """Ask a server just saved for its tools; "" when they were listed, else why not and how to retry.

    The server stays saved either way (it may simply not be running yet).
    """
    try:
        mcp_server_refresh_tools(actor=actor, server=server)
    except McpServerError as exc:
        why = exc.message if exc.message.endswith((".", ")")) else exc.message + "."
        return _(
            "Saved %(mcp_id)s, but its tools could not be listed. %(why)s Once the server is running and "
            'reachable, press "Refresh tools" on this page to try again.'
        ) % {"mcp_id": server.mcp_id, "why": why}
    return ""


def _tools_over_cap(tools: list[dict[str, Any]]) -> str:
    """Why a listed tool set is too large to store (settings LLAMON_MCP_MAX_TOOLS[_BYTES]); "" when it fits."""
    max_tools, max_bytes = settings.LLAMON_MCP_MAX_TOOLS, settings.LLAMON_MCP_MAX_TOOLS_BYTES
    if len(tools) > max_tools:
        return (
            f"it lists {len(tools):,} tools and the limit is {max_tools:,} (LLAMON_MCP_MAX_TOOLS); "
            "the tools stored before are kept"
        )
    size = len(json.dumps(tools, ensure_ascii=False, default=str).encode())
    if size > max_bytes:
        return (
            f"its tool list is {size:,} bytes and the limit is {max_bytes:,} (LLAMON_MCP_MAX_TOOLS_BYTES); "
            "the tools stored before are kept"
        )
    return ""


@dataclass(frozen=True)
class ToolCall:
    """One tool call from the server page: what the pre-step would store, what the server sent, how long."""

    result: Any
    raw: dict[str, Any]
    latency_ms: float
    # Why the result breaks the tool's stored output schema (shown as a warning; the call succeeded).
    warnings: list[str] = field(default_factory=list)


def mcp_server_call_tool(
    *, actor: Any, server: McpServer, tool_name: str, arguments: dict[str, Any], record: bool = False
) -> ToolCall:
    """Call one tool with arguments checked against its input schema first.

    ``result`` is what the pre-step would store (structured content, or text); ``raw`` is the
    server's CallToolResult as JSON (long binary data shortened). Audited (tool name and argument
    names; values may be personal data). Tool and connection failures raise McpServerError.
    With ``record``, the call and its JSON-RPC messages go into the actor's call history of this
    server (see :class:`servers.models.ToolCallRecord`), whether it worked or not.
    """
    if not has_role(actor, "editor"):
        raise PermissionDenied("Calling a tool needs the editor role.")
    tool = next((t for t in server.tools if t["name"] == tool_name), None)
    if tool is None:
        if not server.tools:
            raise McpServerError(
                _("%(mcp_id)s has no tool named %(tool_name)r (known tools: %(known)s).")
                % {
                    "mcp_id": server.mcp_id,
                    "tool_name": tool_name,
                    "known": _("none yet: refresh the tools first"),
                },
                field="tool",
            )
        raise McpServerError(
            unknown_tool_message(server.mcp_id, tool_name, [t["name"] for t in server.tools]), field="tool"
        )
    if not isinstance(arguments, dict):
        raise McpServerError(_("The arguments must be a JSON object."), field="arguments")
    errors = schema_errors(tool.get("input_schema") or {}, arguments)
    if errors:
        raise McpServerError(
            _("The arguments do not fit the tool's input schema: %(errors)s") % {"errors": "; ".join(errors)},
            field="arguments",
        )
    audit_record(
        actor=actor,
        action="mcp_server.call_tool",
        obj=server,
        after={"tool": tool_name, "argument_names": sorted(arguments)},
    )
    wire: list[dict[str, Any]] | None = [] if record else None
    started = time.perf_counter()
    try:
        raw, result = pool_for_server(server).call_tool_traced_sync(
            server.mcp_id, tool_name, arguments, wire=wire
        )
        if isinstance(result, McpError):
            raise result
    except (McpConnectionError, McpTimeoutError) as exc:
        _record_health(server, error=str(exc))
        shown = mcp_error_for(text=_strip_where(exc), admin=has_role(actor, "admin"))
        message = _("The call failed: %(error)s") % {"error": shown}
        _record_call(actor, server, tool_name, wire, started, error=message)
        raise McpServerError(message) from None
    except McpError as exc:
        # The server answered (with a tool error or a malformed reply): it is reachable.
        _record_health(server, error="")
        message = _("The tool reported an error: %(error)s") % {"error": _strip_where(exc)}
        _record_call(actor, server, tool_name, wire, started, error=message)
        raise McpServerError(message) from None
    latency_ms = (time.perf_counter() - started) * 1000
    _record_health(server, error="")
    _record_call(actor, server, tool_name, wire, started, latency_ms=latency_ms)
    warnings = output_problems(raw, tool.get("output_schema"))
    return ToolCall(result=result, raw=_raw_json(raw), latency_ms=latency_ms, warnings=warnings)


def _record_call(
    actor: Any,
    server: McpServer,
    tool_name: str,
    wire: list[dict[str, Any]] | None,
    started: float,
    *,
    error: str = "",
    latency_ms: float | None = None,
) -> None:
    """Keep one call in the actor's history of ``server`` (newest HISTORY_MAX_ENTRIES kept)."""
    if wire is None:
        return
    if latency_ms is None:
        latency_ms = (time.perf_counter() - started) * 1000
    secrets = _secret_values(server)
    messages = []
    for entry in wire:
        text = redact_values(json.dumps(entry["message"], indent=2, ensure_ascii=False), secrets)
        messages.append(
            {
                "direction": entry["direction"],
                "text": text[:HISTORY_MAX_MESSAGE_CHARS],
                "chars": len(text),
                "truncated": len(text) > HISTORY_MAX_MESSAGE_CHARS,
            }
        )
    with transaction.atomic():
        ToolCallRecord.objects.create(
            server=server,
            user=actor,
            tool_name=tool_name[:200],
            ok=not error,
            error=redact_values(error, secrets)[:4000],
            latency_ms=latency_ms,
            messages=messages,
        )
        keep = ToolCallRecord.objects.filter(server=server, user=actor).values_list("pk", flat=True)[
            :HISTORY_MAX_ENTRIES
        ]
        ToolCallRecord.objects.filter(server=server, user=actor).exclude(pk__in=list(keep)).delete()


def _secret_values(server: McpServer) -> list[str]:
    """The values of the variables this server is given (child env, or headers), longest first."""
    names = list(server.env_names) + [header_env_name(h) for h in server.header_names]
    values = {os.environ.get(name, "") for name in names}
    return sorted((v for v in values if len(v) >= 4), key=len, reverse=True)


def redact_values(text: str, secrets: list[str]) -> str:
    """``text`` with each secret value, also as it reads inside a JSON string, replaced by [redacted]."""
    for value in secrets:
        escaped = json.dumps(value, ensure_ascii=False)[1:-1]
        for form in dict.fromkeys((value, escaped)):
            text = text.replace(form, REDACTED)
    return text


def mcp_server_stderr_tail(*, actor: Any, server: McpServer) -> list[str] | None:
    """The last stderr lines of a stdio server's newest child in this process (redacted as read), admins only.

    None for HTTP servers and when this process has not started the server (nothing is started to look).
    A child may print what it was given, so even redacted lines are for admins only.
    """
    _require_admin(actor, "read a server's stderr")
    if server.transport != McpServer.Transport.STDIO:
        return None
    return pool_for_server(server).stderr_tail_sync(server.mcp_id)


def _raw_json(raw: Any, *, max_data_chars: int = 200) -> dict[str, Any]:
    """The CallToolResult as JSON, with base64 image/audio/blob data cut to a marker."""
    data = raw.model_dump(mode="json", by_alias=True, exclude_none=True)
    for block in data.get("content") or []:
        for key in ("data", "blob"):
            value = block.get(key) if isinstance(block, dict) else None
            if isinstance(value, str) and len(value) > max_data_chars:
                block[key] = f"<{len(value):,} base64 characters>"
        resource = block.get("resource") if isinstance(block, dict) else None
        if (
            isinstance(resource, dict)
            and isinstance(resource.get("blob"), str)
            and len(resource["blob"]) > max_data_chars
        ):
            resource["blob"] = f"<{len(resource['blob']):,} base64 characters>"
    return data


def tools_diff(old: list[dict[str, Any]], new: list[dict[str, Any]], *, first: bool = False) -> ToolsDiff:
    """Tools added, removed, and for each tool kept what changed in its description or schemas."""
    before = {t["name"]: t for t in old}
    after = {t["name"]: t for t in new}
    diff = ToolsDiff(
        added=sorted(set(after) - set(before)), removed=sorted(set(before) - set(after)), first=first
    )
    for name in sorted(set(before) & set(after)):
        changes = _schema_changes(
            before[name].get("input_schema") or {}, after[name].get("input_schema") or {}
        )
        if (before[name].get("description") or "") != (after[name].get("description") or ""):
            changes.append("description changed")
        if (before[name].get("output_schema") or {}) != (after[name].get("output_schema") or {}):
            changes.append("output schema changed")
        if changes:
            diff.changed[name] = changes
    return diff


# --------------------------------------------------------------------------- validation


def _validated(
    *,
    mcp_id: str,
    transport: str,
    description: str,
    command: str,
    args: list[str],
    env_names: list[str],
    url: str,
    header_names: list[str],
    timeout_s: float,
    enabled: bool,
) -> dict[str, Any]:
    mcp_id = (mcp_id or "").strip()
    if not MCP_ID_RE.match(mcp_id):
        raise McpServerError(
            _(
                "The id must be 1-64 lowercase letters, digits, '-', '_' or '.', starting with a letter or digit (like order-service)."
            ),
            field="mcp_id",
        )
    if transport not in McpServer.Transport.values:
        raise McpServerError(_("Choose the transport: stdio (runs a command) or http."), field="transport")
    try:
        timeout_s = float(timeout_s)
    except (TypeError, ValueError):
        raise McpServerError(_("The timeout must be a number of seconds."), field="timeout_s") from None
    if not math.isfinite(timeout_s) or not TIMEOUT_MIN_S <= timeout_s <= TIMEOUT_MAX_S:
        raise McpServerError(
            _("The timeout must be between %(TIMEOUT_MIN_S)g and %(TIMEOUT_MAX_S)g seconds.")
            % {"TIMEOUT_MIN_S": TIMEOUT_MIN_S, "TIMEOUT_MAX_S": TIMEOUT_MAX_S},
            field="timeout_s",
        )
    fields: dict[str, Any] = {
        "mcp_id": mcp_id,
        "description": (description or "").strip(),
        "transport": transport,
        "command": "",
        "args": [],
        "env_names": [],
        "url": "",
        "header_names": [],
        "timeout_s": timeout_s,
        "enabled": bool(enabled),
    }
    if transport == McpServer.Transport.STDIO:
        fields.update(_validated_stdio(command, list(args), list(env_names)))
    else:
        fields.update(_validated_http(url, list(header_names)))
    try:
        McpServerSpec(
            mcp_id=mcp_id,
            transport=transport,
            command=fields["command"] or None,
            args=fields["args"],
            env=fields["env_names"],
            url=fields["url"] or None,
            headers=fields["header_names"],
            timeout_s=timeout_s,
        )
    except ValueError as exc:  # pydantic's ValidationError; the checks above should have said it better
        raise McpServerError(_("This server definition is not valid: %(exc)s") % {"exc": exc}) from None
    return fields


def _validated_stdio(command: str, args: list[str], env_names: list[str]) -> dict[str, Any]:
    command = (command or "").strip()
    if not command:
        raise McpServerError(
            _("Enter the command to run (the program, without its arguments)."), field="command"
        )
    if "\x00" in command or "\n" in command or len(command) > 500:
        raise McpServerError(_("The command must be one line of at most 500 characters."), field="command")
    if len(args) > MAX_ARGS:
        raise McpServerError(_("At most %(MAX_ARGS)s arguments.") % {"MAX_ARGS": MAX_ARGS}, field="args")
    for arg in args:
        if not isinstance(arg, str) or "\x00" in arg or "\n" in arg or len(arg) > MAX_ARG_CHARS:
            raise McpServerError(
                _("Each argument is one line of at most %(MAX_ARG_CHARS)s characters.")
                % {"MAX_ARG_CHARS": MAX_ARG_CHARS},
                field="args",
            )
    refusal = stdio_refusal(command, args, settings.LLAMON_STDIO_ALLOWED_DIRS)
    if refusal:
        raise McpServerError(refusal, field="command")
    env_names = _checked_env_names(env_names, field="env_names")
    for name in placeholder_names(args):
        if name not in env_names:
            raise McpServerError(
                _(
                    "The argument placeholder ${%(name)s} names a variable the server is not given: add %(name)s to its environment variable names (its value is put in only when the server starts)."
                )
                % {"name": name},
                field="args",
            )
    return {"command": command, "args": args, "env_names": env_names}


def _validated_http(url: str, header_names: list[str]) -> dict[str, Any]:
    url = (url or "").strip()
    try:
        check_mcp_url_configured(url)
    except UnsafeUrlError as exc:
        raise McpServerError(str(exc), field="url") from None
    headers = []
    for entry in header_names:
        entry = str(entry).strip()
        header, _sep, env_name = entry.rpartition("=")
        if header and not _HEADER_NAME_RE.match(header):
            raise McpServerError(
                _(
                    "%(entry)r: a header name uses letters, digits and '-' only (like X-Api-Key=ORDER_API_KEY)."
                )
                % {"entry": entry},
                field="header_names",
            )
        _checked_env_names([env_name], field="header_names")
        headers.append(f"{header}={env_name}" if header else env_name)
    if len(headers) > MAX_NAMES:
        raise McpServerError(
            _("At most %(MAX_NAMES)s headers.") % {"MAX_NAMES": MAX_NAMES}, field="header_names"
        )
    return {"url": url, "header_names": headers}


def _checked_env_names(names: list[str], *, field: str) -> list[str]:
    cleaned = [str(n).strip() for n in names if str(n).strip()]
    if len(cleaned) > MAX_NAMES:
        raise McpServerError(_("At most %(MAX_NAMES)s names.") % {"MAX_NAMES": MAX_NAMES}, field=field)
    for name in cleaned:
        if not ENV_NAME_RE.fullmatch(name):
            raise McpServerError(
                _(
                    "%(name)r is not an environment variable name. Enter names only (like LLAMON_MCP_ORDER_KEY), never values: the value is read from the app's environment when the server is used."
                )
                % {"name": name},
                field=field,
            )
    reason = mcp_env_policy().first_refusal(
        cleaned
    )  # after the shapes: a pasted value is the likelier mistake
    if reason is not None:
        raise McpServerError(f"{reason}.", field=field)
    return list(dict.fromkeys(cleaned))


# --------------------------------------------------------------------------- helpers


def _require_admin(actor: Any, what: str) -> None:
    if not has_role(actor, "admin"):
        raise PermissionDenied(f"Only an admin may {what}: a stdio server is a command this app will run.")


def _duplicate(mcp_id: str) -> McpServerError:
    return McpServerError(
        _("An MCP server with the id %(mcp_id)r already exists; choose another id.") % {"mcp_id": mcp_id},
        field="mcp_id",
    )


def _record_health(server: McpServer, *, error: str) -> None:
    now = timezone.now()
    McpServer.objects.filter(pk=server.pk).update(last_error=error[:4000], last_checked_at=now)
    server.last_error, server.last_checked_at = error[:4000], now


def _strip_where(exc: McpError) -> str:
    # McpError messages start with "MCP server 'x'[, tool 'y']: "; the page already names both.
    text = str(exc)
    prefix, sep, rest = text.partition(": ")
    return rest if sep and prefix.startswith(("MCP server", "MCP tool")) else text


def _schema_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    if old == new:
        return []
    changes: list[str] = []
    old_props, new_props = old.get("properties") or {}, new.get("properties") or {}
    if isinstance(old_props, dict) and isinstance(new_props, dict):
        for name in sorted(set(new_props) - set(old_props)):
            changes.append(f"parameter {name!r} added")
        for name in sorted(set(old_props) - set(new_props)):
            changes.append(f"parameter {name!r} removed")
        for name in sorted(set(old_props) & set(new_props)):
            if old_props[name] != new_props[name]:
                changes.append(f"parameter {name!r} changed")
    old_req, new_req = set(old.get("required") or []), set(new.get("required") or [])
    for name in sorted(new_req - old_req):
        changes.append(f"{name!r} is now required")
    for name in sorted(old_req - new_req):
        changes.append(f"{name!r} is no longer required")
    if not changes:
        changes.append("input schema changed")
    return changes


@transaction.atomic
def mcp_server_upsert(*, actor: Any, mcp_id: str, **fields: Any) -> tuple[McpServer, bool]:
    """Create the server or update it to the given fields; audited only when something changed."""
    server = McpServer.objects.filter(mcp_id=mcp_id).first()
    if server is None:
        server = McpServer(mcp_id=mcp_id, **fields)
        server.full_clean()
        server.save()
        audit_record(
            actor=actor, action="mcp_server.create", obj=server, after=snapshot(server, MCP_SERVER_FIELDS)
        )
        return server, True
    before = snapshot(server, MCP_SERVER_FIELDS)
    for name, value in fields.items():
        setattr(server, name, value)
    after = snapshot(server, MCP_SERVER_FIELDS)
    if after != before:
        server.full_clean()
        server.save()
        audit_record(actor=actor, action="mcp_server.update", obj=server, before=before, after=after)
    return server, False
