"""Point this process's Celery app at another broker for a while (the services enqueue through it)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from llamon_web.celery import app


def _reset_publisher() -> None:
    # Celery caches its connection and producer pools on first use; drop the references so the
    # next publish connects to the broker now configured. (kombu keeps the pools themselves in a
    # registry keyed by connection: closing one here would break its next user.)
    app._pool = None
    amqp = app.__dict__.get("amqp")
    if amqp is not None:
        amqp._producer_pool = None


@contextmanager
def publishing_to(broker_url: str, transport_options: dict) -> Iterator[None]:
    """Make this process's Celery app publish to another broker while the block runs."""
    conf = app.conf
    old = (conf.broker_url, conf.broker_transport_options)
    conf.broker_url, conf.broker_transport_options = broker_url, transport_options
    _reset_publisher()
    try:
        yield
    finally:
        conf.broker_url, conf.broker_transport_options = old
        _reset_publisher()
