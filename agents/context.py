"""Template context of the agents app: the approver's inbox count in the navigation."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from accounts.roles import is_approver
from agents.selectors import change_inbox


def change_inbox_context(request: HttpRequest) -> dict[str, Any]:
    """``change_inbox``: how many change requests wait for the signed-in user (approvers only)."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated or not is_approver(user):
        return {}
    return {"change_inbox": len(change_inbox(user))}
