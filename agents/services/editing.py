"""The optimistic-revision check every edit of an agent-app row makes before it writes."""

from __future__ import annotations

from typing import Any, TypeVar

from django.db import models

from agents.errors import AgentConflictError

M = TypeVar("M", bound=models.Model)


def locked_for_edit(obj: M, revision: int | None, stale: Any) -> M:
    """The row as stored, locked for this transaction; AgentConflictError (``stale``, a message with
    ``%(name)r``, ``%(revision)s`` and ``%(revision2)s``) when the editor's revision is not its own."""
    current = type(obj)._default_manager.select_for_update().get(pk=obj.pk)
    stored = current.revision  # type: ignore[attr-defined]
    if revision is not None and revision != stored:
        raise AgentConflictError(stale % {"name": current.name, "revision": stored, "revision2": revision})  # type: ignore[attr-defined]
    return current
