"""Reads for the rules app: rule sets, their rules and versions, version diffs, the audit log, a set's checks."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.db.models import Count, Max, QuerySet

from core.content_hash import sha256
from core.models import AuditEvent
from rules import engine
from rules.checks import Problem, rule_set_problems
from rules.models import Rule, RuleSet, RuleSetVersion
from servers import selectors as server_selectors
from servers.models import McpServer

# --- Rule sets ---------------------------------------------------------------------------------


def rule_set_list() -> QuerySet[RuleSet]:
    """Every rule set with its rule count and latest version number."""
    return RuleSet.objects.annotate(
        rule_count=Count("rules", distinct=True), latest_version=Max("versions__number")
    ).order_by("name")


def rule_list(*, rule_set: RuleSet) -> QuerySet[Rule]:
    """The draft's rules in evaluation order."""
    return rule_set.rules.order_by("position", "id")


def version_list(*, rule_set: RuleSet) -> QuerySet[RuleSetVersion]:
    return rule_set.versions.select_related("author").order_by("-number")


@dataclass(frozen=True)
class DraftState:
    """The draft as a publish would freeze it, beside the latest published version."""

    content: list[dict[str, Any]]
    content_hash: str
    latest: RuleSetVersion | None

    @property
    def published_as(self) -> int | None:
        """The latest version's number when the draft has its content (nothing to publish), else None."""
        if self.latest is not None and self.latest.content_hash == self.content_hash:
            return self.latest.number
        return None


def draft_state(*, rule_set: RuleSet) -> DraftState:
    content = engine.rule_set_snapshot(rule_set)
    return DraftState(
        content=content, content_hash=sha256(content), latest=rule_set.versions.order_by("-number").first()
    )


def agents_following_latest(*, rule_set: RuleSet, protected: bool | None = None) -> list[str]:
    """The agents that serve the rule set's latest published version: a publish is live for them at once
    (``protected``: only the protected ones, or only the others).

    Read through the reverse relation of the agents' rule set (rules imports nothing of agents).
    """
    agents = rule_set.agents.filter(rule_set_mode="latest")
    if protected is not None:
        agents = agents.filter(protected=protected)
    return list(agents.order_by("name").values_list("name", flat=True))


def agent_to_stage(*, rule_set: RuleSet) -> dict[str, Any] | None:
    """The one agent that serves the rule set's latest version ({pk, name, protected}), or None (none,
    or several: a staged publish stages one agent, the others would get the version at once)."""
    agents = list(rule_set.agents.filter(rule_set_mode="latest").values("pk", "name", "protected")[:2])
    return dict(agents[0]) if len(agents) == 1 else None


def version_diff(*, old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rule-by-rule differences between two snapshots: added, removed, changed fields, moved."""
    old_by_name = {r["name"]: (i, r) for i, r in enumerate(old)}
    new_by_name = {r["name"]: (i, r) for i, r in enumerate(new)}
    rows: list[dict[str, Any]] = []
    for name, (position, rule) in new_by_name.items():
        if name not in old_by_name:
            rows.append({"name": name, "change": "added", "position": position + 1, "after": rule})
            continue
        old_position, old_rule = old_by_name[name]
        fields = [
            {"field": f, "before": old_rule.get(f), "after": rule.get(f)}
            for f in rule
            if rule.get(f) != old_rule.get(f)
        ]
        if fields or old_position != position:
            rows.append(
                {
                    "name": name,
                    "change": "changed" if fields else "moved",
                    "fields": fields,
                    "position": position + 1,
                    "old_position": old_position + 1,
                }
            )
    for name, (position, rule) in old_by_name.items():
        if name not in new_by_name:
            rows.append({"name": name, "change": "removed", "old_position": position + 1, "before": rule})
    return sorted(rows, key=lambda r: (r.get("position") or r.get("old_position") or 0, r["name"]))


def audit_list(
    *, actor: str = "", object_type: str = "", action: str = "", since=None, until=None, query: str = ""
) -> QuerySet[AuditEvent]:
    """Audit events, newest first, filtered by any of actor name, object type, action, time, text."""
    events = AuditEvent.objects.all()
    if actor:
        events = events.filter(actor_name=actor)
    if object_type:
        events = events.filter(object_type=object_type)
    if action:
        events = events.filter(action__startswith=action)
    if since:
        events = events.filter(created_at__gte=since)
    if until:
        events = events.filter(created_at__lte=until)
    if query:
        events = events.filter(object_repr__icontains=query)
    return events.order_by("-created_at", "-id")


def rule_set_checks(
    rule_set: RuleSet, servers: Mapping[str, McpServer] | None = None
) -> dict[str, list[Problem]]:
    """The draft's problems per rule name, against the servers' current tool lists (rules.checks)."""
    if servers is None:
        servers = {s.mcp_id: s for s in server_selectors.mcp_server_list()}
    return rule_set_problems(engine.rule_set_snapshot(rule_set), servers)
