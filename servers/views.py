"""MCP server pages: list, add, edit, delete, detail with tools, refresh tools, call a tool.

Who may do what: viewers see the list and each server with its tools (rule authors need the
schemas); editors may also call a tool (the live tester's "execute" can do as much); every
change to a server, refreshing its tools included, is for admins: a stdio server is a command
this app runs. Every page works without JavaScript; htmx requests get the swapped partial.
"""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.utils.translation import ngettext
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from accounts.roles import has_role, require_role
from core.errors import PendingApproval
from core.http import HtmxHttpRequest
from llamon_agent.mcp.results import truncation
from servers.forms import McpServerForm, RawArgumentsForm, ToolCallForm
from servers.messages import unknown_tool_message
from servers.models import McpServer
from servers.selectors import (
    command_line,
    mcp_server_get,
    mcp_server_last_refresh,
    mcp_server_list,
    mcp_server_rule_count,
    mcp_server_tool,
    mcp_tool_views,
    pretty_json,
    tool_call_history,
)
from servers.services import (
    HISTORY_MAX_ENTRIES,
    McpServerError,
    ToolsDiff,
    mcp_server_call_tool,
    mcp_server_create,
    mcp_server_delete,
    mcp_server_list_tools_after_save,
    mcp_server_refresh_tools,
    mcp_server_stderr_tail,
    mcp_server_update,
)

FORM_TEMPLATE = "servers/server_form.html"
DETAIL_TEMPLATE = "servers/server_detail.html"
CALL_TEMPLATE = "servers/tool_call.html"
CONFIRM_MESSAGE = (
    "Check the full command line below: it is exactly what will run. Press Save again to save it."
)


@require_role("viewer")
@require_GET
def server_list(request: HtmxHttpRequest) -> HttpResponse:
    """The registered MCP servers with their health and tool counts."""
    template = "servers/server_list.html#server-table" if request.htmx else "servers/server_list.html"
    return render(request, template, {"servers": mcp_server_list()})


@require_role("admin")
@require_http_methods(["GET", "POST"])
def server_create(request: HtmxHttpRequest) -> HttpResponse:
    """Add a server; a stdio command line is shown in full and must be confirmed before it is saved."""
    if request.method == "GET":
        return render(request, FORM_TEMPLATE, {"form": McpServerForm(), "server": None})
    form = McpServerForm(request.POST)
    response = _preview_or_confirm(request, form, server=None)
    if response is not None:
        return response
    try:
        server = mcp_server_create(actor=request.user, **form.service_kwargs())
    except McpServerError as exc:
        _add_error(form, exc)
        return render(request, FORM_TEMPLATE, {"form": form, "server": None})
    _list_tools_after_save(request, server)
    return redirect("servers:detail", pk=server.pk)


@require_role("admin")
@require_http_methods(["GET", "POST"])
def server_edit(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Change a server; like adding, a changed command line must be seen before it is saved."""
    server = mcp_server_get(pk=pk)
    if request.method == "GET":
        return render(request, FORM_TEMPLATE, {"form": McpServerForm.for_server(server), "server": server})
    form = McpServerForm(request.POST)
    response = _preview_or_confirm(request, form, server=server)
    if response is not None:
        return response
    try:
        server = mcp_server_update(actor=request.user, server=server, **form.service_kwargs())
    except PendingApproval as exc:  # a protected agent uses it: a change request, nothing changed
        messages.info(request, str(exc))
        return redirect(exc.url)
    except McpServerError as exc:
        _add_error(form, exc)
        return render(request, FORM_TEMPLATE, {"form": form, "server": server})
    _list_tools_after_save(request, server)
    return redirect("servers:detail", pk=server.pk)


@require_role("viewer")
@require_GET
def server_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """One server: its settings, health, tools (descriptions and input schemas) and the last refresh."""
    server = mcp_server_get(pk=pk)
    if request.htmx:
        return render(request, f"{DETAIL_TEMPLATE}#server-tools", _detail_context(server))
    context = _detail_context(server)
    if has_role(request.user, "admin"):  # a child may print what it was given: admins only
        context["stderr_tail"] = mcp_server_stderr_tail(actor=request.user, server=server)
    return render(request, DETAIL_TEMPLATE, context)


@require_role("admin")
@require_POST
def server_refresh(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Ask the server for its tools again and show what changed (added, removed, changed schema)."""
    server = mcp_server_get(pk=pk)
    error = ""
    diff: ToolsDiff | None = None
    try:
        diff = mcp_server_refresh_tools(actor=request.user, server=server)
    except McpServerError as exc:
        error = exc.message
    if request.htmx:
        return render(
            request, f"{DETAIL_TEMPLATE}#server-tools", {**_detail_context(server), "refresh_error": error}
        )
    if error:
        messages.error(request, error)
    elif diff is not None:
        messages.success(request, _diff_summary(diff))
    return redirect("servers:detail", pk=server.pk)


@require_role("editor")
@require_http_methods(["GET", "POST"])
def tool_call(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """A form generated from a tool's input schema; submitting it calls the tool and shows result and latency."""
    server = mcp_server_get(pk=pk)
    tool_name = (request.POST if request.method == "POST" else request.GET).get("tool", "")
    tool = mcp_server_tool(server=server, name=tool_name) if tool_name else None
    context: dict = {
        "server": server,
        "tool": tool,
        "tool_name": tool_name,
        "tools": mcp_tool_views(server=server),
    }
    if tool is None:
        if tool_name:
            context["call_error"] = unknown_tool_message(
                server.mcp_id, tool_name, [t["name"] for t in server.tools]
            )
        return render(request, CALL_TEMPLATE, context, status=404 if tool_name else 200)
    schema = tool.get("input_schema") or {}
    context["schema_json"] = pretty_json(schema)
    context["output_schema_json"] = pretty_json(tool["output_schema"]) if tool.get("output_schema") else ""
    context["history"] = tool_call_history(server=server, user=request.user)
    context["history_max"] = HISTORY_MAX_ENTRIES
    data = request.POST if request.method == "POST" else None
    context["mode"] = "json" if (data or request.GET).get("mode") == "json" else "form"
    form = ToolCallForm(schema, data)
    raw_form = RawArgumentsForm(schema, data, initial={"arguments_raw": "{}"})
    context.update(form=form, raw_form=raw_form)
    if data is None:
        return render(request, CALL_TEMPLATE, context)
    # Both inputs come back as typed; only the chosen one is checked and used.
    active = raw_form if context["mode"] == "json" else form
    if active.is_valid():
        arguments = active.arguments()
        context["arguments_json"] = pretty_json(arguments)
        try:
            call = mcp_server_call_tool(
                actor=request.user, server=server, tool_name=tool_name, arguments=arguments, record=True
            )
        except McpServerError as exc:
            context["call_error"] = exc.message
        else:
            context["result_json"] = pretty_json(call.result)
            context["result_cut"] = truncation(call.result)  # over LLAMON_TOOL_RESULT_MAX_BYTES: cut
            context["raw_json"] = pretty_json(call.raw)
            context["latency_ms"] = call.latency_ms
            context["result_warnings"] = call.warnings
    if request.htmx:
        context["oob_history"] = True
        return render(request, f"{CALL_TEMPLATE}#tool-call", context)
    return render(request, CALL_TEMPLATE, context)


@require_role("admin")
@require_http_methods(["GET", "POST"])
def server_delete(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Confirm, then remove a server (rules naming it stay and are flagged)."""
    server = mcp_server_get(pk=pk)
    if request.method == "GET":
        context = {"server": server, "rule_count": mcp_server_rule_count(server=server)}
        return render(request, "servers/server_delete.html", context)
    mcp_id = server.mcp_id
    try:
        mcp_server_delete(actor=request.user, server=server)
    except PendingApproval as exc:
        messages.info(request, str(exc))
        return redirect(exc.url)
    messages.success(request, _("Deleted %(mcp_id)s.") % {"mcp_id": mcp_id})
    return redirect("servers:list")


# --------------------------------------------------------------------------- helpers


def _preview_or_confirm(
    request: HtmxHttpRequest, form: McpServerForm, *, server: McpServer | None
) -> HttpResponse | None:
    """The response when the form is not to be saved yet (preview asked, invalid, command not confirmed)."""
    context = {"form": form, "server": server}
    if request.POST.get("action") == "preview":
        if request.htmx:
            return render(request, f"{FORM_TEMPLATE}#command-preview", context)
        form.is_valid()  # show field errors along with the preview
        return render(request, FORM_TEMPLATE, context)
    if not form.is_valid():
        return render(request, FORM_TEMPLATE, context)
    if not form.command_confirmed():
        context["confirm_message"] = CONFIRM_MESSAGE
        return render(request, FORM_TEMPLATE, context)
    return None


def _list_tools_after_save(request: HtmxHttpRequest, server: McpServer) -> None:
    problem = mcp_server_list_tools_after_save(actor=request.user, server=server)
    if problem:
        messages.warning(request, problem)
    else:
        count = len(server.tools)
        messages.success(
            request,
            ngettext(
                "Saved %(mcp_id)s: it offers %(count)s tool.",
                "Saved %(mcp_id)s: it offers %(count)s tools.",
                count,
            )
            % {"mcp_id": server.mcp_id, "count": count},
        )


def _add_error(form: McpServerForm, exc: McpServerError) -> None:
    form.add_error(exc.field if exc.field in form.fields else None, exc.message)


def _detail_context(server: McpServer) -> dict:
    return {
        "server": server,
        "command_line": command_line(command=server.command, args=server.args_shown),
        "tools": mcp_tool_views(server=server),
        "last_refresh": mcp_server_last_refresh(server=server),
    }


def _diff_summary(diff: ToolsDiff) -> str:
    if diff.first:
        return _("Tools refreshed for the first time: %(count)s found.") % {"count": len(diff.added)}
    if diff.unchanged:
        return _("Tools refreshed: nothing changed since the last refresh.")
    parts = []
    if diff.added:
        parts.append(_("added %(names)s") % {"names": ", ".join(diff.added)})
    if diff.removed:
        parts.append(_("removed %(names)s") % {"names": ", ".join(diff.removed)})
    if diff.changed:
        parts.append(_("changed %(names)s") % {"names": ", ".join(diff.changed)})
    return _("Tools refreshed: %(changes)s.") % {"changes": "; ".join(parts)}
