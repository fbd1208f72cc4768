"""The workbench as an MCP server: coding agents and IDEs author and debug rules at ``/api/mcp``.

Streamable HTTP, *stateless* with JSON responses: every POST carries one JSON-RPC message and gets
one JSON answer, no session and no open stream. That is what a plain Django view can serve under
WSGI (``make run`` is runserver; production may be any WSGI or ASGI server): the view hands the
request to the official SDK's StreamableHTTPSessionManager (a fresh one per request, as stateless
mode does anyway) on a short-lived event loop, and each tool's database work runs back on the
request's own thread (``sync_to_async(thread_sensitive=True)`` under ``async_to_sync``).

Authentication is a personal API token only (``Authorization: Bearer llamon_...``); the session
cookie is ignored, so a web page cannot drive this endpoint with a visitor's login. Each tool needs
the role its REST twin needs, checked with the same code (accounts.api_auth), and calls that REST
operation's own function, so validation, services, audit and messages are the REST API's. A refused
or invalid call is an MCP tool error (``isError``) with the API's sentence; nothing is saved then.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any, Literal

import anyio
from asgiref.sync import async_to_sync, sync_to_async
from django.core.exceptions import PermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import ProtectedError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.utils.translation import gettext as _
from django.views.decorators.csrf import csrf_exempt
from mcp.server.fastmcp import Context, FastMCP
from mcp.server.fastmcp.exceptions import ToolError
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from ninja.errors import AuthenticationError, AuthorizationError, HttpError
from pydantic import Field, ValidationError

from accounts.api_auth import TokenAuth
from accounts.roles import Role
from accounts.token_services import token_authenticate
from agents import api as agents_api
from agents import selectors as agents_selectors
from agents import services as agents_services
from agents.schemas import (
    AgentOut,
    ChangeRequestFilterIn,
    ChangeRequestOut,
    ReviewIn,
    RunCreateIn,
    RunExportIn,
    RunFilterIn,
    RunOut,
    RunPageOut,
    RunStepOut,
)
from core.api import DbId, error_field, unknown_field_message
from core.errors import DATABASE_UNAVAILABLE, DomainError, database_unavailable
from governance import api as governance_api
from governance.schemas import SavingsOut, SuggestionDraftOut, SuggestionJobOut, SuggestionsIn
from llamon_agent import strictjson
from rules import api as rules_api
from rules import engine
from rules.checks import rule_set_problems
from rules.schemas import (
    EvaluateIn,
    PublishIn,
    RuleIn,
    RuleOut,
    RulePatchIn,
    RuleSetOut,
    SuiteOut,
    VersionOut,
)
from servers import selectors as server_selectors

PATH = "/api/mcp"
Id = Annotated[DbId, Field(description="A database id.")]


class StrictFastMCP(FastMCP):
    """FastMCP refusing an argument a tool does not declare (it would drop it in silence), with the
    REST API's sentence: the argument and the closest valid one. The tools' nested inputs are the
    REST API's StrictIn schemas, which refuse unknown fields the same way."""

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        tool = self._tool_manager.get_tool(name)
        if tool is not None and isinstance(arguments, dict):
            valid = set((tool.parameters or {}).get("properties") or {})
            for key in arguments:
                if key not in valid:
                    raise ToolError(unknown_field_message(str(key), valid) + f" (field: {key})")
        return await super().call_tool(name, arguments)


mcp = StrictFastMCP(
    "llamon-web",
    instructions=(
        "The llamon-web workbench: rule sets of deterministic pre-step rules (expressions, docs/expressions.md), "
        "their live tester, regression cases, publishing, agents and their runs. Read a rule set before editing "
        "it; updates need the rule's current `revision` (a stale one is refused and nothing is overwritten)."
    ),
    stateless_http=True,
    json_response=True,
)


# --- Calling the REST operations as a tool ---------------------------------------------------------


def _message(exc: Exception) -> str | None:
    """The sentence the REST API would answer ``exc`` with, or None for an unexpected error."""
    if isinstance(exc, DomainError):
        return exc.message + (f" (field: {exc.field})" if getattr(exc, "field", None) else "")
    if isinstance(exc, AuthenticationError | AuthorizationError):
        return exc.message
    if isinstance(exc, ValidationError):
        errors = exc.errors()
        first = errors[0] if errors else {}
        where = error_field(list(first.get("loc", ())), first)
        return f"{where}: {first.get('msg', 'invalid')}" if where else str(first.get("msg", "invalid input"))
    if isinstance(exc, ProtectedError):
        return "This is still used elsewhere (an agent or a pinned version); remove that use first."
    if isinstance(exc, DjangoValidationError):
        return "; ".join(exc.messages) or "The input is not valid."
    if isinstance(exc, Http404 | PermissionDenied | HttpError):
        return str(exc) or "Not allowed or not found."
    if database_unavailable(exc):
        return str(DATABASE_UNAVAILABLE)
    return None


async def _call(ctx: Context, role: Role, operation: Callable[[HttpRequest], Any]) -> Any:
    """Check ``role`` as the REST API does, then run ``operation(request)`` on the request's thread."""
    request: HttpRequest = ctx.request_context.request.scope["llamon.request"]  # type: ignore[union-attr]

    def run() -> Any:
        try:
            user, token = request.mcp_principal  # type: ignore[attr-defined]
            request.auth = TokenAuth(role)._grant(request, user, token)  # type: ignore[attr-defined]
            return operation(request)
        except Exception as exc:
            message = _message(exc)
            if message is None:
                raise
            raise ToolError(message) from exc

    return await sync_to_async(run, thread_sensitive=True)()


def _out(schema: Any, value: Any) -> dict[str, Any]:
    value = getattr(value, "value", value)  # a ninja Status(code, value)
    return schema.model_validate(value).model_dump(mode="json")


def _outs(schema: Any, values: Any) -> list[dict[str, Any]]:
    return [_out(schema, v) for v in values]


# --- Tools -----------------------------------------------------------------------------------------


@mcp.tool()
async def list_rule_sets(ctx: Context) -> dict[str, Any]:
    """Every rule set: id, name, revision, rule count, latest published version. (viewer)"""
    return await _call(ctx, "viewer", lambda r: {"rule_sets": _outs(RuleSetOut, rules_api.list_rule_sets(r))})


@mcp.tool()
async def get_rule_set(rule_set_id: Id, ctx: Context) -> dict[str, Any]:
    """A rule set's draft: its rules in evaluation order (with each rule's `revision`) and the static
    checks' problems per rule (unknown server or tool, shadowed or repeated rules). (viewer)"""

    def read(request: HttpRequest) -> dict[str, Any]:
        rule_set = rules_api.get_rule_set(request, rule_set_id)
        rules = _outs(RuleOut, rules_api.list_rules(request, rule_set_id))
        servers = {s.mcp_id: s for s in server_selectors.mcp_server_list()}
        problems = rule_set_problems(engine.rule_set_snapshot(rule_set), servers)
        for rule in rules:
            rule["problems"] = [vars(p) for p in problems.get(rule["name"], [])]
        return {"rule_set": _out(RuleSetOut, rule_set), "rules": rules}

    return await _call(ctx, "viewer", read)


@mcp.tool()
async def test_rule_set(rule_set_id: Id, sample: EvaluateIn, ctx: Context) -> dict[str, Any]:
    """The live tester: the draft's pre-step on a sample request (query, context, A2A data and files),
    as a dry run unless `execute` (editor). `draft_rule` tries an unsaved edit of one rule. The answer
    lists every rule that failed and the first 30 that fired, and counts the rest (`counts`,
    `omitted`); `detail: "all"` lists every fired rule (with `block` and `expected`, left out of a
    summary that left fired rules out) and the skipped and not-reached ones, 500 at a time from
    `offset`. (viewer)"""
    return await _call(
        ctx,
        "viewer",
        lambda r: json.loads(json.dumps(rules_api.evaluate_rule_set(r, rule_set_id, sample), default=str)),
    )


@mcp.tool()
async def create_rule(rule_set_id: Id, rule: RuleIn, ctx: Context) -> dict[str, Any]:
    """Append a rule to the draft; `when` and `params` are expressions, checked before saving. (editor)"""
    return await _call(ctx, "editor", lambda r: _out(RuleOut, rules_api.create_rule(r, rule_set_id, rule)))


@mcp.tool()
async def update_rule(rule_set_id: Id, rule_id: Id, changes: RulePatchIn, ctx: Context) -> dict[str, Any]:
    """Change a draft rule: send the fields to change and the rule's current `revision`. (editor)"""
    return await _call(
        ctx, "editor", lambda r: _out(RuleOut, rules_api.update_rule(r, rule_set_id, rule_id, changes))
    )


@mcp.tool()
async def delete_rule(rule_set_id: Id, rule_id: Id, ctx: Context) -> dict[str, Any]:
    """Remove a rule from the draft. (editor)"""

    def delete(request: HttpRequest) -> dict[str, Any]:
        rules_api.delete_rule(request, rule_set_id, rule_id)
        return {"deleted": rule_id}

    return await _call(ctx, "editor", delete)


@mcp.tool()
async def run_cases(rule_set_id: Id, ctx: Context) -> dict[str, Any]:
    """Dry-run every regression case on the draft; results are stored. (editor, as in the REST API)"""
    return await _call(ctx, "editor", lambda r: _out(SuiteOut, rules_api.run_cases(r, rule_set_id)))


@mcp.tool()
async def publish_rule_set(rule_set_id: Id, publish: PublishIn, ctx: Context) -> dict[str, Any]:
    """Freeze the draft into the next immutable version (optionally only if the set's `revision` matches). (editor)"""
    return await _call(
        ctx, "editor", lambda r: _out(VersionOut, rules_api.publish_rule_set(r, rule_set_id, publish))
    )


@mcp.tool()
async def list_agents(ctx: Context) -> dict[str, Any]:
    """Every agent (to pick one for start_run). (viewer)"""
    return await _call(ctx, "viewer", lambda r: {"agents": _outs(AgentOut, agents_api.list_agents(r))})


@mcp.tool()
async def start_run(run: RunCreateIn, ctx: Context) -> dict[str, Any]:
    """Queue a run of an agent on a worker; answers its id (read it with get_run). (editor)"""
    return await _call(ctx, "editor", lambda r: dict(agents_api.create_run(r, run).value))


@mcp.tool()
async def get_run(run_id: Id, ctx: Context) -> dict[str, Any]:
    """A run and its trace: status, answer or error, and every step (guardrails, pre-step, rules,
    LLM and tool calls) with input, output, timing and status. (viewer)"""

    def read(request: HttpRequest) -> dict[str, Any]:
        steps = agents_api.list_run_steps(request, run_id, after=0)
        return {
            "run": _out(RunOut, agents_api.get_run(request, run_id)),
            "finished": steps["finished"],
            "steps": _outs(RunStepOut, steps["steps"]),
        }

    return await _call(ctx, "viewer", read)


def _answer(value: Any) -> Any:
    """A REST operation's answer, or its 4xx as a ToolError with the sentence and the field."""
    status, body = getattr(value, "status_code", 200), getattr(value, "value", value)
    if status >= 400:
        field = body.get("field") if isinstance(body, dict) else None
        detail = body.get("detail") if isinstance(body, dict) else str(body)
        raise ToolError(f"{detail} (field: {field})" if field else str(detail))
    return body


@mcp.tool()
async def list_runs(ctx: Context, filters: RunFilterIn | None = None) -> dict[str, Any]:
    """Runs newest first with the run list's filters: agent, status, version, rule, tool, user_id,
    session_id, chatbot_id, `subject` (key=value of the context or a DataPart, e.g.
    patientId=P-2002: every finished run of that subject), q, period, since, until. Page with the
    answer's `next_cursor` as `cursor`. (viewer)"""
    chosen = filters or RunFilterIn.model_validate({})
    return await _call(ctx, "viewer", lambda r: _out(RunPageOut, _answer(agents_api.list_runs(r, chosen))))


EXPORT_TOOL_RUNS = 1_000


@mcp.tool()
async def export_runs(ctx: Context, filters: RunExportIn | None = None) -> dict[str, Any]:
    """The evidence export of the runs the filters pick (the same filters as list_runs, `subject`
    included), as the file's text: `format` csv or jsonl (with proofs; the last line is the signed
    manifest, which records the filter). At most 1,000 runs: narrow the filters, or download a
    larger export from GET /api/runs/export. Audited like every export. (viewer)"""
    chosen = filters or RunExportIn.model_validate({})

    def export(request: HttpRequest) -> dict[str, Any]:
        wanted = chosen.dict(exclude={"limit", "offset", "cursor", "format"})
        wanted = {k: v for k, v in wanted.items() if v not in (None, "")}
        _count, capped = agents_selectors.run_count(filters=wanted, cap=EXPORT_TOOL_RUNS)
        if capped:
            raise ToolError(
                _("More than %(n)s runs match: narrow the filters, or download the export from %(url)s.")
                % {"n": format(EXPORT_TOOL_RUNS, ","), "url": "GET /api/runs/export"}
            )
        actor = request.auth  # type: ignore[attr-defined]  # set by _call, as the REST API sets it
        stream = agents_services.runs_export(actor=actor, filters=wanted, fmt=chosen.format)
        return {"format": chosen.format, "text": "".join(stream)}

    return await _call(ctx, "viewer", export)


@mcp.tool()
async def list_change_requests(
    ctx: Context,
    agent: Id | None = None,
    state: Literal["pending", "applied", "rejected", "withdrawn"] | None = None,
) -> dict[str, Any]:
    """Change requests on protected agents, pending first: action, diff, reason, approvals. (viewer)"""
    filters = ChangeRequestFilterIn(agent=agent, state=state)
    return await _call(
        ctx,
        "viewer",
        lambda r: {"change_requests": _outs(ChangeRequestOut, agents_api.list_change_requests(r, filters))},
    )


@mcp.tool()
async def get_change_request(change_id: Id, ctx: Context) -> dict[str, Any]:
    """One change request: the action and payload, the diff, who asked and why, the reviews. (viewer)"""
    return await _call(
        ctx, "viewer", lambda r: _out(ChangeRequestOut, agents_api.get_change_request(r, change_id))
    )


@mcp.tool()
async def review_change_request(
    change_id: Id, decision: Literal["approve", "reject"], ctx: Context, comment: str = ""
) -> dict[str, Any]:
    """Approve or reject a change request with a comment (an approver or admin, not the requester); the
    approval that makes the count applies the change. (viewer with the approver permission)"""
    review = ReviewIn(comment=comment)
    operation = (
        agents_api.approve_change_request if decision == "approve" else agents_api.reject_change_request
    )
    return await _call(ctx, "viewer", lambda r: _out(ChangeRequestOut, operation(r, change_id, review)))


@mcp.tool()
async def get_agent_savings(agent_id: Id, ctx: Context, days: int = 14) -> dict[str, Any]:
    """What the pre-step saved for an agent over the last `days` days: runs answered with pre-step
    results, LLM turns, time, tokens and cost saved, runs where the model called a rule's tool
    again (with the advice), per version. (viewer)"""
    return await _call(
        ctx, "viewer", lambda r: _out(SavingsOut, governance_api.get_agent_savings(r, agent_id, days))
    )


@mcp.tool()
async def find_rules(
    agent_id: Id, ctx: Context, days: int = 14, min_precision: float = 0.99
) -> dict[str, Any]:
    """Mine an agent's recorded runs for routing rules on the workers: answers the job (poll it with
    get_suggestions). Nothing changes until draft_suggested_rule. (editor)"""
    payload = SuggestionsIn(days=days, min_precision=min_precision)
    return await _call(
        ctx,
        "editor",
        lambda r: _out(SuggestionJobOut, governance_api.start_suggestions(r, agent_id, payload)),
    )


@mcp.tool()
async def get_suggestions(job_id: Id, ctx: Context) -> dict[str, Any]:
    """A mining job: its progress, then the suggested rules (when, params, precision on held-out runs,
    saving, cases) and why other tools got none. (viewer)"""
    return await _call(
        ctx, "viewer", lambda r: _out(SuggestionJobOut, governance_api.get_suggestions(r, job_id))
    )


@mcp.tool()
async def draft_suggested_rule(job_id: Id, index: int, ctx: Context) -> dict[str, Any]:
    """Add suggestion `index` (0-based) of a finished job to the agent's rule set draft, with its
    regression cases; test, replay and publish it as any draft. (editor)"""
    return await _call(
        ctx, "editor", lambda r: _out(SuggestionDraftOut, governance_api.draft_suggestion(r, job_id, index))
    )


# --- The HTTP endpoint -----------------------------------------------------------------------------


def _parse_error(reason: str) -> HttpResponse:
    """A JSON-RPC parse error (-32700, id null): the message could not be read, so nothing ran."""
    body = {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": f"Parse error: {reason}"}}
    return JsonResponse(body, status=400)


def _refuse(status: int, detail: str, body: bytes = b"") -> HttpResponse:
    """The HTTP status with the sentence twice: ``detail`` (as the REST API answers) and a JSON-RPC
    error for the request's id, which MCP clients (the Python SDK, fastmcp, TypeScript) show
    instead of a bare "Server returned an error response"."""
    try:
        request_id = json.loads(body).get("id") if body else None
    except (ValueError, AttributeError, RecursionError):
        request_id = None
    if not isinstance(request_id, (str, int)) or isinstance(request_id, bool):
        request_id = None
    error = {"code": -32001, "message": detail}
    response = JsonResponse(
        {"jsonrpc": "2.0", "id": request_id, "error": error, "detail": detail}, status=status
    )
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="llamon-web"'
    return response


@csrf_exempt
def mcp_view(request: HttpRequest) -> HttpResponse:
    """POST one MCP JSON-RPC message with a bearer token; the SDK's transport answers it."""
    body = request.body  # read first, refused or not: an unread body stalls the keep-alive connection
    if request.method != "POST":
        # Stateless: no server-to-client stream to open (a GET would hold this thread forever) and
        # no session to end. The SDK's client takes a 405 on GET as "no stream".
        response = JsonResponse(
            {"detail": "This MCP endpoint is stateless: POST one JSON-RPC message."}, status=405
        )
        response["Allow"] = "POST"
        return response
    scheme, _, secret = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not secret.strip():
        return _refuse(
            401,
            "Send a personal API token as 'Authorization: Bearer <token>' (make one on the API tokens page).",
            body,
        )
    found = token_authenticate(secret.strip())
    if found is None:
        return _refuse(401, "The API token is unknown, revoked or expired, or its user is inactive.", body)
    request.mcp_principal = found  # type: ignore[attr-defined]
    try:  # the REST API's parser: no NaN, no huge numbers, no deep nesting, no NUL; the SDK's would take them
        strictjson.loads(body)
    except strictjson.JSONInputError as exc:
        return _parse_error(str(exc))
    status, headers, body = async_to_sync(_serve)(_scope(request), body)
    response = HttpResponse(body, status=status)
    for name, value in headers:
        if name.lower() not in ("content-length", "connection"):
            response[name] = value
    return response


mcp_view.required_role = "viewer"  # type: ignore[attr-defined]  # per tool: viewer or editor, checked there


def _scope(request: HttpRequest) -> dict[str, Any]:
    meta = request.META
    headers = [
        (key[5:].replace("_", "-").lower().encode("latin-1"), str(value).encode("latin-1"))
        for key, value in meta.items()
        if key.startswith("HTTP_")
    ]
    for key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
        if meta.get(key):
            headers.append((key.replace("_", "-").lower().encode(), str(meta[key]).encode("latin-1")))
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": request.method,
        "scheme": request.scheme,
        "path": request.path,
        "raw_path": request.path.encode(),
        "query_string": meta.get("QUERY_STRING", "").encode("latin-1"),
        "root_path": "",
        "headers": headers,
        "server": (request.get_host().rsplit(":", 1)[0], int(request.get_port() or 80)),
        "client": (meta.get("REMOTE_ADDR", ""), 0),
        "llamon.request": request,
    }


async def _serve(scope: dict[str, Any], body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
    """One request through a fresh stateless session manager; the collected response."""
    answered = anyio.Event()
    delivered = False
    status = 500
    headers: list[tuple[str, str]] = []
    chunks: list[bytes] = []

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await answered.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
            headers.extend((k.decode("latin-1"), v.decode("latin-1")) for k, v in message.get("headers", []))
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                answered.set()

    manager = StreamableHTTPSessionManager(app=mcp._mcp_server, json_response=True, stateless=True)
    async with manager.run():
        await manager.handle_request(scope, receive, send)
    return status, headers, b"".join(chunks)
