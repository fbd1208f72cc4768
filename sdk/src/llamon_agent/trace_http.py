"""``HttpTraceSink``: a served agent's trace, posted to llamon-web's ingest API as it happens.

One sink is one run. ``emit`` only appends to a queue; a background thread posts batches to
``POST {url}/api/runs/ingest`` every ``flush_interval`` seconds (or sooner when
``batch_size`` events are waiting). The first batch creates the run (``source``,
``agent_name``, ``request``); later batches name its ``run_id``; :meth:`HttpTraceSink.finish`
sends what is left together with the run's ending.

The agent never waits for llamon-web and never fails because of it: errors are logged
(once per run) and the events dropped after a few retries. :meth:`HttpTraceExporter.close`
waits, with a timeout, for every sink still sending (used at server shutdown).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Mapping
from typing import Any, Literal

import httpx

from llamon_agent.net import DestinationRefused, guarded_client
from llamon_agent.tools import AgentRequest
from llamon_agent.trace import TraceEvent
from llamon_agent.urlguard import UrlPolicy

logger = logging.getLogger("llamon_agent.trace")

INGEST_PATH = "/api/runs/ingest"
MAX_BATCH = 1000  # the ingest API's limit per request
FinishStatus = Literal["succeeded", "failed", "timed_out", "cancelled"]


class HttpTraceExporter:
    """The connection to one llamon-web: makes a sink per run and closes them all at the end."""

    def __init__(
        self,
        base_url: str,
        token: str | None,
        *,
        flush_interval: float = 0.2,
        batch_size: int = 200,
        timeout: float = 10.0,
        retries: int = 3,
        url_policy: UrlPolicy | None = None,
    ) -> None:
        self.url = base_url.rstrip("/") + INGEST_PATH
        headers = {"Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        # One client (connection pool) for every run; httpx.Client is safe to share between threads.
        # It reaches only llamon-web's server, at addresses url_policy checked (llamon_agent.net).
        self.client = guarded_client(self.url, url_policy, headers=headers, timeout=timeout)
        self.flush_interval = flush_interval
        self.batch_size = min(batch_size, MAX_BATCH)
        self.retries = retries
        self._sinks: set[HttpTraceSink] = set()
        self._lock = threading.Lock()

    def sink(
        self,
        *,
        source: Literal["served", "flow"],
        agent_name: str,
        request: AgentRequest | None = None,
        agent: int | None = None,
        version: Mapping[str, str] | None = None,
    ) -> HttpTraceSink:
        """A new sink for one run; ``version`` is the rule-set version the agent serves
        (:func:`llamon_agent.project.served_version`), sent with the run's first batch."""
        s = HttpTraceSink(
            self, source=source, agent_name=agent_name, request=request, agent=agent, version=version
        )
        with self._lock:
            self._sinks.add(s)
        return s

    def _done(self, sink: HttpTraceSink) -> None:
        with self._lock:
            self._sinks.discard(sink)

    def close(self, timeout: float = 10.0) -> None:
        """Wait up to ``timeout`` seconds for the runs still being sent, then close the connection."""
        deadline = time.monotonic() + timeout
        with self._lock:
            pending = list(self._sinks)
        for s in pending:
            s.finish_if_open()
            s.join(max(0.0, deadline - time.monotonic()))
        self.client.close()


class HttpTraceSink:
    """TraceSink for one run; ``emit`` never blocks on the network (see the module doc)."""

    def __init__(
        self,
        exporter: HttpTraceExporter,
        *,
        source: Literal["served", "flow"],
        agent_name: str,
        request: AgentRequest | None,
        agent: int | None = None,
        version: Mapping[str, str] | None = None,
    ) -> None:
        self._exporter = exporter
        self._version = dict(version) if version else None
        self._source = source
        self._agent_name = agent_name
        self._request = request
        self._agent = agent
        self.run_id: int | None = None
        self.failed = False  # llamon-web refused or could not be reached: the rest is dropped
        self._queue: deque[dict[str, Any]] = deque()
        self._finish: dict[str, Any] | None = None
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False

    def __repr__(self) -> str:
        return f"<HttpTraceSink {self._source} run_id={self.run_id}>"

    # ---------------------------------------------------------------- the agent's side (never blocks)

    def emit(self, event: TraceEvent) -> None:
        """Queue one event for the next batch."""
        with self._cond:
            if self._closed:
                return
            self._queue.append(event.to_json())
            self._ensure_thread()
            if len(self._queue) >= self._exporter.batch_size:
                self._cond.notify()

    def finish(
        self, status: FinishStatus, *, answer: str = "", error: str = "", error_kind: str = ""
    ) -> None:
        """Queue the run's ending; the thread sends it with the last events and stops."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._finish = {
                "status": status,
                "answer": answer or "",
                "error": error or "",
                "error_kind": error_kind,
            }
            self._ensure_thread()
            self._cond.notify()

    def finish_if_open(self) -> None:
        """End a run nobody finished (server shutdown mid-request) as cancelled."""
        with self._cond:
            is_open = not self._closed
        if is_open:
            self.finish(
                "cancelled", error="the agent server stopped before the run ended", error_kind="cancelled"
            )

    def join(self, timeout: float | None = None) -> None:
        """Wait for the thread to send everything (tests, shutdown)."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)

    # ---------------------------------------------------------------- the sending thread

    def _ensure_thread(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="llamon-trace-http", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        try:
            while True:
                with self._cond:
                    if not self._closed and len(self._queue) < self._exporter.batch_size:
                        self._cond.wait(self._exporter.flush_interval)
                    batch = [
                        self._queue.popleft() for _ in range(min(len(self._queue), self._exporter.batch_size))
                    ]
                    last = self._closed and not self._queue
                    finish = self._finish if last else None
                if batch or finish is not None:
                    self._send(batch, finish)
                if last:
                    return
        except Exception:  # never let a bug here surface in the agent
            logger.exception("trace export to %s stopped", self._exporter.url)
        finally:
            self._exporter._done(self)

    def _send(self, events: list[dict[str, Any]], finish: dict[str, Any] | None) -> None:
        if self.failed:
            return
        body: dict[str, Any] = {"events": events}
        if self.run_id is None:
            body.update(source=self._source, agent_name=self._agent_name[:100])
            if self._agent is not None:
                body["agent"] = self._agent
            if self._request is not None:
                body["request"] = self._request.to_json()
            if self._version is not None:
                body["version"] = self._version
        else:
            body["run_id"] = self.run_id
        if finish is not None:
            body["finish"] = finish
        for attempt in range(self._exporter.retries):
            try:
                response = self._exporter.client.post(self._exporter.url, json=body)
            except DestinationRefused as exc:
                reason = str(exc)
                break  # refused before connecting: asking again gets the same answer
            except httpx.HTTPError as exc:
                reason = f"{type(exc).__name__}: {exc}"
            else:
                if response.status_code in (200, 201):
                    if self.run_id is None:
                        self.run_id = int(response.json()["run_id"])
                    return
                reason = f"HTTP {response.status_code}: {response.text[:300]}"
                if response.status_code < 500 and response.status_code != 429:
                    break  # a refusal (bad token, bad payload) does not get better by retrying
            time.sleep(0.2 * (attempt + 1))
        self.failed = True
        logger.warning(
            "llamon-web did not take the trace of this %s run (%s); its remaining events are dropped",
            self._source,
            reason,
        )
