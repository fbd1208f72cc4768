"""`make run`'s restart policy: back-off for a dying service, and an end to restarting one that keeps dying."""

from __future__ import annotations

from llamon_web.management.commands.devrun import RESTART_MAX_QUICK, RESTART_QUICK_S, RestartPolicy


def test_quick_deaths_back_off_then_give_up() -> None:
    policy = RestartPolicy()
    delays = [policy.died(lived_s=1.0) for _ in range(RESTART_MAX_QUICK)]
    assert delays == [1.0, 2.0, 4.0, 8.0, None]


def test_a_service_that_ran_for_a_while_starts_over_at_the_shortest_delay() -> None:
    policy = RestartPolicy()
    assert [policy.died(lived_s=1.0) for _ in range(3)] == [1.0, 2.0, 4.0]
    assert policy.died(lived_s=RESTART_QUICK_S + 1) == 1.0
    assert policy.died(lived_s=1.0) == 1.0  # counting quick deaths again from one
    assert policy.restarts == 5
