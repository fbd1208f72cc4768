"""Gates: how an app lower in the layers asks the apps above it whether a write may go on.

Dependency inversion (accounts and servers import nothing of agents): a service calls
:func:`gate_check` with what it is about to write, in its transaction, before writing it; every gate
registered for that kind (at app ready) answers None (go on) or an exception to raise once the
transaction is committed: agents registers the gates that turn a grant of power, or a change of an
MCP server a protected agent uses, into a change request (agents.services.gate). The rules app's
publish gates predate this module and work the same way (rules.services.PUBLISH_GATES).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, ParamSpec, TypeVar

from django.db import transaction

Gate = Callable[..., Exception | None]
GATES: dict[str, list[Gate]] = {}

P = ParamSpec("P")
T = TypeVar("T")


def gate_register(kind: str, gate: Gate) -> None:
    """Add a gate for writes of ``kind`` (once; called at app ready)."""
    gates = GATES.setdefault(kind, [])
    if gate not in gates:
        gates.append(gate)


def gate_check(kind: str, **write: Any) -> Exception | None:
    """The first answer of the gates of ``kind`` to this write (None: go on)."""
    for gate in GATES.get(kind, ()):
        outcome = gate(**write)
        if outcome is not None:
            return outcome
    return None


def gated_atomic(func: Callable[P, T | Exception]) -> Callable[P, T]:
    """Run ``func`` in a transaction; when it answers an exception (a gate's change request or
    refusal), commit that and raise it: the caller learns nothing was written."""

    @wraps(func)
    def run(*args: P.args, **kwargs: P.kwargs) -> T:
        with transaction.atomic():
            outcome = func(*args, **kwargs)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    return run
