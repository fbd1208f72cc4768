"""Domain errors of the agents app."""

from __future__ import annotations


class AgentError(Exception):
    """A write was refused; ``field`` names the form field at fault when there is one."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class AgentConflictError(AgentError):
    """Refused because the object changed meanwhile or is in a state that forbids it (the API's 409)."""


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
