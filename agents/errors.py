"""Domain errors of the agents app."""

from __future__ import annotations

from core.errors import PendingApproval
from rules.errors import RuleError


class AgentError(Exception):
    """A write was refused; ``field`` names the form field at fault when there is one."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class AgentConflictError(AgentError):
    """Refused because the object changed meanwhile or is in a state that forbids it (the API's 409)."""


class ChangeRequested(PendingApproval, AgentError, RuleError):
    """The agent is protected: the change became change request ``change_request_id`` and waits for
    approval (nothing changed yet). An AgentError and a RuleError, so every route that shows a refused
    agent change or publish shows this message too, and none can mistake it for a success."""

    def __init__(self, message: str, *, change_request_id: int, url: str) -> None:
        super().__init__(message)
        self.change_request_id = change_request_id
        self.url = url


SERVED_LOST = (
    "served agent stopped reporting: no trace event for {seconds} s (it stopped or lost its connection)"
)
WORKER_LOST = "worker lost: no heartbeat for {seconds} s (the worker process died or was killed)"
DATABASE_LOST = (
    "the database stopped answering during the run ({error}); the worker recorded this end once it was back"
)


class BrokerUnavailableError(AgentError):
    """The task could not be handed to the broker; nothing was queued (the API's 503)."""


NOT_DELIVERED = "never picked up by a worker (broker unavailable?): its task message was sent {attempts} times and lost each time"
