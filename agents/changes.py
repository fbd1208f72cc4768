"""Reads of change requests that both the services and the selectors need."""

from __future__ import annotations

from django.utils.translation import gettext as _

from agents.models import ChangeRequest
from rules.models import RuleSet


def change_request_stale(request: ChangeRequest) -> str:
    """Why the change cannot be applied as it was asked ('' when it still can)."""
    agent = request.agent
    if agent.revision != request.base_revision:
        return _(
            "Agent %(name)r changed since this was asked (revision %(now)s, asked at %(then)s): the change might no longer mean what was reviewed. The requester asks again (that resets the approvals), or withdraws it."
        ) % {"name": agent.name, "now": agent.revision, "then": request.base_revision}
    if request.rule_set_revision is not None:
        rule_set = RuleSet.objects.filter(pk=request.payload.get("rule_set")).first()
        if rule_set is None or rule_set.revision != request.rule_set_revision:
            return _(
                "The rule set's draft changed since this publish was asked: what would be published is not what was reviewed. The requester publishes again (that resets the approvals), or withdraws it."
            )
    return ""
