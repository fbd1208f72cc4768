"""Writes for MCP servers and the audit log. Every write here records an AuditEvent."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import transaction
from django.db.models import F, Max
from django.utils import timezone
from django.utils.translation import gettext as _

from core.audit import audit_record, snapshot
from llamon_agent.mcp.spec import MCP_ID_RE
from rules.errors import STALE_MESSAGE, RuleError, StaleEditError
from rules.models import Rule, RuleSet, RuleSetVersion
from servers.messages import unknown_server_message, unknown_tool_message
from servers.models import McpServer

# --- Rule sets and rules -------------------------------------------------------------------

RULE_FIELDS = ("name", "description", "mcp_id", "tool_name", "when", "params", "stop", "enabled", "position")


def _rule_validate(
    *,
    rule_set: RuleSet,
    name: str,
    mcp_id: str,
    tool_name: str,
    when: str,
    params: str,
    exclude_pk: int | None = None,
) -> None:
    """Check a rule before saving: name, server id and both expressions (compiled, not run)."""
    rule_fields_check(name=name, mcp_id=mcp_id, tool_name=tool_name, when=when, params=params)
    if rule_set.rules.filter(name=name).exclude(pk=exclude_pk).exists():
        raise RuleError(
            _("A rule named %(name)r already exists in this rule set; pick another name.") % {"name": name},
            field="name",
        )


def rule_fields_check(*, name: str, mcp_id: str, tool_name: str, when: str, params: str) -> None:
    """The checks of a rule that need no database: callers run them before taking the write lock."""
    from llamon_agent.expr import (
        ExprError,
        check_rule_cost,
        check_rule_name,
        compile_params,
        compile_when,
        expression_rule,
    )
    from rules.expr_messages import expr_reason, expr_text

    try:
        check_rule_name(name)
    except ExprError as exc:
        raise RuleError(_("Name: %(reason)s") % {"reason": expr_reason(exc)}, field="name") from None
    if not MCP_ID_RE.match(mcp_id or ""):
        raise RuleError(_("Choose the MCP server the rule calls."), field="mcp_id")
    if not tool_name or len(tool_name) > 200:
        raise RuleError(_("Choose the tool the rule calls."), field="tool_name")
    for field_name, source, compiler in (("when", when, compile_when), ("params", params, compile_params)):
        try:
            compiler(source)
        except ExprError as exc:
            raise RuleError(f"{field_name}: {expr_text(exc)}", field=field_name) from None
    try:  # a rule saved must fit the per-rule cost limit (a stored one over it still runs, metered)
        check_rule_cost(
            expression_rule(name=name, mcp_id=mcp_id, tool_name=tool_name, when=when, params=params)
        )
    except ExprError as exc:  # its text names the field
        raise RuleError(expr_text(exc), field=exc.field or "when") from None


def rule_tool_check(
    *, mcp_id: str, tool_name: str, server: McpServer | None | bool = False, registered: bool = True
) -> None:
    """The rule's server must be registered (``registered``) and its tool one of the server's tools once
    they are known (the server refreshed at least once). Every rule save calls it, whatever the route.

    An import passes ``registered=False``: a set moved from another workbench may name servers not
    registered here yet; the static checks (rules.checks) report those, and a server whose tools
    were never listed. ``server`` is the server when the caller has looked it up already (None: not
    registered); by default it is looked up.
    """
    if server is False:
        server = McpServer.objects.filter(mcp_id=mcp_id).first()
    if server is None and registered:
        known = McpServer.objects.order_by("mcp_id").values_list("mcp_id", flat=True)
        raise RuleError(unknown_server_message(mcp_id, known), field="mcp_id")
    if isinstance(server, McpServer) and server.tools_refreshed_at:
        names = [t["name"] for t in server.tools]
        if tool_name not in names:
            raise RuleError(unknown_tool_message(mcp_id, tool_name, names), field="tool_name")


def _check_revision(*, what: str, current: int, expected: int | None, who: str) -> None:
    if expected is not None and expected != current:
        raise StaleEditError(STALE_MESSAGE.format(what=what, who=who, theirs=current, yours=expected))


def _bump(rule_set: RuleSet) -> None:
    RuleSet.objects.filter(pk=rule_set.pk).update(revision=F("revision") + 1, updated_at=timezone.now())
    rule_set.refresh_from_db(fields=["revision", "updated_at"])


@transaction.atomic
def rule_set_create(*, actor: Any, name: str, description: str = "") -> RuleSet:
    """Create an empty rule set (names are unique)."""
    name = name.strip()
    if not name:
        raise RuleError(_("Give the rule set a name."), field="name")
    if RuleSet.objects.filter(name=name).exists():
        raise RuleError(_("A rule set named %(name)r already exists.") % {"name": name}, field="name")
    rule_set = RuleSet.objects.create(name=name, description=description, created_by=_user(actor))
    audit_record(
        actor=actor, action="rule_set.create", obj=rule_set, after={"name": name, "description": description}
    )
    return rule_set


@transaction.atomic
def rule_create(
    *,
    actor: Any,
    rule_set: RuleSet,
    name: str,
    mcp_id: str,
    tool_name: str,
    when: str,
    params: str = "{}",
    description: str = "",
    stop: bool = False,
    enabled: bool = True,
) -> Rule:
    """Append a rule to the draft after validating its name and expressions."""
    rule_set = RuleSet.objects.select_for_update().get(pk=rule_set.pk)
    _rule_validate(rule_set=rule_set, name=name, mcp_id=mcp_id, tool_name=tool_name, when=when, params=params)
    rule_tool_check(mcp_id=mcp_id, tool_name=tool_name)
    position = (rule_set.rules.aggregate(m=Max("position"))["m"] or 0) + 1
    rule = Rule.objects.create(
        rule_set=rule_set,
        name=name,
        description=description,
        mcp_id=mcp_id,
        tool_name=tool_name,
        when=when,
        params=params,
        stop=stop,
        enabled=enabled,
        position=position,
        updated_by=_user(actor),
    )
    _bump(rule_set)
    audit_record(actor=actor, action="rule.create", obj=rule, after=snapshot(rule, RULE_FIELDS))
    return rule


@transaction.atomic
def rule_update(*, actor: Any, rule: Rule, revision: int | None, **fields: Any) -> Rule:
    """Save an edited rule; refused with StaleEditError when ``revision`` is not the current one."""
    current = Rule.objects.select_for_update().get(pk=rule.pk)
    _check_revision(
        what=f"Rule {current.name!r}",
        current=current.revision,
        expected=revision,
        who=current.updated_by.get_username() if current.updated_by else "someone else",
    )
    before = snapshot(current, RULE_FIELDS)
    for name, value in fields.items():
        if name not in RULE_FIELDS or name == "position":
            raise TypeError(f"rule_update() got an unexpected field {name!r}")
        setattr(current, name, value)
    _rule_validate(
        rule_set=current.rule_set,
        name=current.name,
        mcp_id=current.mcp_id,
        tool_name=current.tool_name,
        when=current.when,
        params=current.params,
        exclude_pk=current.pk,
    )
    if (current.mcp_id, current.tool_name) != (before["mcp_id"], before["tool_name"]):
        # Only a new target is checked: a rule whose tool has gone can still be edited or disabled.
        rule_tool_check(mcp_id=current.mcp_id, tool_name=current.tool_name)
    after = snapshot(current, RULE_FIELDS)
    if after == before:
        return current
    current.revision += 1
    current.updated_by = _user(actor)
    current.save()
    _bump(current.rule_set)
    audit_record(actor=actor, action="rule.update", obj=current, before=before, after=after)
    return current


@transaction.atomic
def rule_delete(*, actor: Any, rule: Rule) -> None:
    """Remove a rule from the draft."""
    before = snapshot(rule, RULE_FIELDS)
    rule_set = rule.rule_set
    audit_record(actor=actor, action="rule.delete", obj=rule, before=before)
    rule.delete()
    _bump(rule_set)


@transaction.atomic
def rule_set_reorder(*, actor: Any, rule_set: RuleSet, order: list[int], revision: int | None) -> RuleSet:
    """Put the draft's rules in the given order of rule ids (all of them, each once)."""
    rule_set = RuleSet.objects.select_for_update().get(pk=rule_set.pk)
    _check_revision(
        what=f"Rule set {rule_set.name!r}", current=rule_set.revision, expected=revision, who="someone else"
    )
    rules = {r.pk: r for r in rule_set.rules.all()}
    if sorted(order) != sorted(rules) or len(set(order)) != len(order):
        raise RuleError(
            _("The new order must list every rule of the set exactly once; reload and try again.")
        )
    before = [rules[pk].name for pk in sorted(rules, key=lambda pk: rules[pk].position)]
    for position, pk in enumerate(order, start=1):
        rules[pk].position = position
    Rule.objects.bulk_update(rules.values(), ["position"])
    _bump(rule_set)
    audit_record(
        actor=actor,
        action="rule_set.reorder",
        obj=rule_set,
        before={"order": before},
        after={"order": [rules[pk].name for pk in order]},
    )
    return rule_set


def rule_move(*, actor: Any, rule: Rule, direction: str, revision: int | None) -> RuleSet:
    """Move one rule up or down by one place (the no-JavaScript reorder)."""
    ids = list(rule.rule_set.rules.order_by("position", "id").values_list("pk", flat=True))
    index = ids.index(rule.pk)
    target = index - 1 if direction == "up" else index + 1
    if direction not in {"up", "down"}:
        raise RuleError(_("direction must be 'up' or 'down'"))
    if 0 <= target < len(ids):
        ids[index], ids[target] = ids[target], ids[index]
    return rule_set_reorder(actor=actor, rule_set=rule.rule_set, order=ids, revision=revision)


def _user(actor: Any) -> Any:
    return actor if getattr(actor, "is_authenticated", False) else None


# --- Versions ---------------------------------------------------------------------------------


# Publish gates (dependency inversion: rules imports nothing of agents). Each is called with the
# validated publish, in its transaction, before the version is written, and answers None (go on) or
# an exception to raise once that transaction is committed: agents registers the one that turns a
# publish a protected agent would serve into a change request (agents.services.changes).
PUBLISH_GATES: list[Callable[..., Exception | None]] = []


def publish_gate_register(gate: Callable[..., Exception | None]) -> None:
    """Add a publish gate (once; called at app ready)."""
    if gate not in PUBLISH_GATES:
        PUBLISH_GATES.append(gate)


def rule_set_publish(
    *, actor: Any, rule_set: RuleSet, message: str = "", revision: int | None = None, reason: str = ""
) -> RuleSetVersion:
    """Freeze the draft into the next immutable version (refused when nothing changed since the last).

    ``reason``: why, for the approvers when a gate turns the publish into a change request.
    """
    outcome = _rule_set_publish(
        actor=actor, rule_set=rule_set, message=message, revision=revision, reason=reason
    )
    if isinstance(outcome, Exception):
        raise outcome
    return outcome


def _check_cost(content: list[dict[str, Any]]) -> None:
    """Refuse a rule set whose rules together may cost more on one request than the request limit
    (LLAMON_REQUEST_COST_BUDGET): each rule's cost is bounded when it is saved, their sum here, so
    a published set cannot fail a request within the caps on cost (docs/expressions.md)."""
    from llamon_agent.expr import ExprError, ExpressionRule, check_rule_cost, check_rule_set_cost
    from rules.engine import compile_snapshot
    from rules.expr_messages import expr_text

    rules = compile_snapshot(content).rules
    try:
        for rule in rules:  # a rule saved before an upgrade (or a limit lowered) is checked again
            if isinstance(rule, ExpressionRule):
                check_rule_cost(rule)
        check_rule_set_cost(rules)
    except ExprError as exc:
        if exc.msg_id != "rules.cost_total":
            raise RuleError(
                _("This rule set cannot be published: rule %(name)s: %(reason)s")
                % {"name": rule.name, "reason": expr_text(exc)}
            ) from None
        raise RuleError(
            _("This rule set cannot be published: %(reason)s") % {"reason": expr_text(exc)}
        ) from None


@transaction.atomic
def _rule_set_publish(
    *, actor: Any, rule_set: RuleSet, message: str, revision: int | None, reason: str
) -> RuleSetVersion | Exception:
    from rules.engine import servers_by_id, snapshot_mcp_ids, tool_schema_hash
    from rules.selectors import draft_state

    rule_set = RuleSet.objects.select_for_update().get(pk=rule_set.pk)
    _check_revision(
        what=f"Rule set {rule_set.name!r}", current=rule_set.revision, expected=revision, who="someone else"
    )
    draft = draft_state(rule_set=rule_set)
    content, content_hash, latest = draft.content, draft.content_hash, draft.latest
    if not content:
        raise RuleError(_("An empty rule set cannot be published: add a rule first."))
    if draft.published_as is not None:
        raise RuleError(
            _("Nothing changed since v%(number)s: the draft has the same content.")
            % {"number": draft.published_as}
        )
    _check_cost(content)
    for gate in PUBLISH_GATES:
        gated = gate(
            actor=actor,
            rule_set=rule_set,
            message=message.strip(),
            reason=reason,
            content=content,
            latest=latest,
        )
        if gated is not None:
            return gated
    servers = servers_by_id(snapshot_mcp_ids(content)).values()
    version = RuleSetVersion.objects.create(
        rule_set=rule_set,
        number=(latest.number + 1) if latest else 1,
        content=content,
        content_hash=content_hash,
        tool_schema_hash=tool_schema_hash(servers),
        author=_user(actor),
        message=message.strip(),
    )
    audit_record(
        actor=actor,
        action="rule_set.publish",
        obj=rule_set,
        after={"version": version.number, "content_hash": content_hash, "message": version.message},
    )
    return version


@transaction.atomic
def rule_set_restore(
    *, actor: Any, rule_set: RuleSet, version: RuleSetVersion, revision: int | None = None
) -> RuleSet:
    """Replace the draft's rules with a version's content (the version itself is unchanged)."""
    from rules.engine import rule_set_snapshot

    rule_set = RuleSet.objects.select_for_update().get(pk=rule_set.pk)
    if version.rule_set_id != rule_set.pk:
        raise RuleError(_("That version belongs to another rule set."))
    _check_revision(
        what=f"Rule set {rule_set.name!r}", current=rule_set.revision, expected=revision, who="someone else"
    )
    before = rule_set_snapshot(rule_set)
    rule_set.rules.all().delete()
    Rule.objects.bulk_create(
        Rule(rule_set=rule_set, position=i, updated_by=_user(actor), **{k: r[k] for k in r})
        for i, r in enumerate(version.content, start=1)
    )
    _bump(rule_set)
    audit_record(
        actor=actor,
        action="rule_set.restore",
        obj=rule_set,
        before={"rules": before},
        after={"restored_version": version.number, "rules": version.content},
    )
    return rule_set


# --- Rule set settings and removal (the API's rule-set CRUD; issue 6) ---------------------------


@transaction.atomic
def rule_set_update(
    *,
    actor: Any,
    rule_set: RuleSet,
    revision: int | None,
    name: str | None = None,
    description: str | None = None,
) -> RuleSet:
    """Rename a rule set or change its description; refused with StaleEditError on a stale revision; audited."""
    current = RuleSet.objects.select_for_update().get(pk=rule_set.pk)
    _check_revision(
        what=f"Rule set {current.name!r}", current=current.revision, expected=revision, who="someone else"
    )
    before = {"name": current.name, "description": current.description}
    if name is not None:
        name = name.strip()
        if not name:
            raise RuleError(_("Give the rule set a name."), field="name")
        if RuleSet.objects.filter(name=name).exclude(pk=current.pk).exists():
            raise RuleError(_("A rule set named %(name)r already exists.") % {"name": name}, field="name")
        current.name = name
    if description is not None:
        current.description = description
    after = {"name": current.name, "description": current.description}
    if after == before:
        return current
    current.save(update_fields=["name", "description", "updated_at"])
    _bump(current)
    audit_record(actor=actor, action="rule_set.update", obj=current, before=before, after=after)
    return current


@transaction.atomic
def rule_set_delete(*, actor: Any, rule_set: RuleSet) -> None:
    """Delete a rule set with its rules, versions and cases; refused while an agent uses it; audited."""
    from rules.engine import rule_set_snapshot

    agents = list(rule_set.agents.values_list("name", flat=True)) if hasattr(rule_set, "agents") else []
    if agents:
        raise RuleError(
            _("Rule set %(name)r is used by the agent(s) %(join)s; point them at another rule set first.")
            % {"name": rule_set.name, "join": ", ".join(map(repr, agents))}
        )
    audit_record(
        actor=actor,
        action="rule_set.delete",
        obj=rule_set,
        before={
            "name": rule_set.name,
            "description": rule_set.description,
            "rules": rule_set_snapshot(rule_set),
        },
    )
    rule_set.delete()
