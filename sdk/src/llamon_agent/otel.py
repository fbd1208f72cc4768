"""OpenTelemetry export of agent runs: one trace per run, one span per step, GenAI semantic conventions.

Off unless an OTLP endpoint is configured with the standard variables
(``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``; headers, protocol,
timeout and ``OTEL_SERVICE_NAME`` as the OpenTelemetry SDK reads them). ``OTEL_SDK_DISABLED=true``
or ``OTEL_TRACES_EXPORTER=none`` turn it off again. The SDK is an optional dependency
(``pip install 'llamon-web[otel]'``): without it, a configured endpoint is logged once and ignored.

:class:`OtelSink` is a trace sink (llamon_agent.trace): a step's start event opens a span with the
step's real start time, its end event closes it at start + duration, so the exported timing is the
step's own. Spans are handed to a BatchSpanProcessor: exporting happens on its thread, a full
queue drops spans, and an unreachable collector is logged by the exporter, never raised into a run.

Attribute names follow the GenAI conventions (``gen_ai.operation.name`` ``invoke_agent`` /
``chat`` / ``execute_tool``, ``gen_ai.request.model``, ``gen_ai.usage.input_tokens``,
``gen_ai.tool.name`` ...); llamon's own details are under ``llamon.*``. Message and tool content is
not exported unless ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`` (then as redacted
JSON in ``llamon.input`` / ``llamon.output``), as GenAI instrumentations do.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from llamon_agent.trace import STATUS_ERROR, TraceEvent, jsonable

logger = logging.getLogger("llamon_agent.otel")

SCOPE = "llamon_agent"
DEFAULT_SERVICE_NAME = "llamon-agent"
CONTENT_LIMIT = 8_000  # characters of captured input/output per span attribute

_lock = threading.Lock()
_provider: Any = None
_provider_pid: int | None = None
_warned: set[str] = set()


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def otel_configured(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the environment asks for trace export (an OTLP endpoint, not switched off)."""
    env = os.environ if environ is None else environ
    if _truthy(env.get("OTEL_SDK_DISABLED")):
        return False
    if (env.get("OTEL_TRACES_EXPORTER") or "otlp").strip().lower() == "none":
        return False
    return bool(
        (
            env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or ""
        ).strip()
    )


def _warn_once(key: str, message: str, *args: Any) -> None:
    if key not in _warned:
        _warned.add(key)
        logger.warning(message, *args)


def _exporter(environ: Mapping[str, str]) -> Any:
    """The OTLP span exporter the protocol variables choose (the SDK reads endpoint and headers)."""
    protocol = (
        environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or ""
    ).strip() or "http/protobuf"
    if protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    if protocol == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as Grpc
        except ImportError:
            _warn_once(
                "grpc",
                "OTEL_EXPORTER_OTLP_PROTOCOL=grpc needs opentelemetry-exporter-otlp-proto-grpc; "
                "traces are not exported (use http/protobuf, or install it)",
            )
            return None
        return Grpc()
    _warn_once("protocol", "OTLP protocol %r is not supported; traces are not exported", protocol)
    return None


def tracer_provider(environ: Mapping[str, str] | None = None) -> Any:
    """This process's TracerProvider for run traces, or None when export is off or impossible.

    Built on first use (so a forked Celery worker child builds its own, with its own export
    thread) and kept for the life of the process; never installed as the global provider.
    """
    global _provider, _provider_pid
    env = os.environ if environ is None else environ
    if not otel_configured(env):
        return None
    with _lock:
        if _provider is not None and _provider_pid == os.getpid():
            return _provider
        try:
            from opentelemetry.sdk.resources import SERVICE_NAME, Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
        except ImportError:
            _warn_once(
                "sdk",
                "an OTLP endpoint is configured but opentelemetry-sdk is not installed "
                "(pip install 'llamon-web[otel]'); traces are not exported",
            )
            return None
        exporter = _exporter(env)
        if exporter is None:
            return None
        resource = Resource.create()
        if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
            resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
        provider = TracerProvider(resource=resource)
        provider.add_span_processor(BatchSpanProcessor(exporter))
        _provider, _provider_pid = provider, os.getpid()
        return provider


def shutdown_tracer_provider(timeout_ms: int = 5_000) -> None:
    """Export what is queued and drop this process's provider (tests; a clean stop)."""
    global _provider, _provider_pid
    with _lock:
        provider, _provider, _provider_pid = _provider, None, None
    if provider is not None:
        provider.force_flush(timeout_ms)
        provider.shutdown()


def otel_sink(
    *,
    agent_name: str,
    run_id: Any = None,
    source: str = "",
    redact: Callable[[Any], Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> OtelSink | None:
    """A sink exporting one run, or None when export is not configured (the usual case)."""
    provider = tracer_provider(environ)
    if provider is None:
        return None
    env = os.environ if environ is None else environ
    return OtelSink(
        provider,
        agent_name=agent_name,
        run_id=run_id,
        source=source,
        redact=redact,
        capture_content=_truthy(env.get("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")),
    )


def _ns(epoch_s: float) -> int:
    return int(epoch_s * 1e9)


class OtelSink:
    """TraceSink turning one run's start/end events into OpenTelemetry spans under an ``invoke_agent`` root.

    Thread-safe; call :meth:`finish` once the run has ended (it ends the root span).
    """

    def __init__(
        self,
        provider: Any,
        *,
        agent_name: str,
        run_id: Any = None,
        source: str = "",
        redact: Callable[[Any], Any] | None = None,
        capture_content: bool = False,
    ) -> None:
        from opentelemetry import trace

        self._trace = trace
        self.provider = provider
        self.tracer = provider.get_tracer(SCOPE)
        self._redact = redact or (lambda value: value)
        self._capture = capture_content
        self._lock = threading.Lock()
        self._open: dict[str, Any] = {}  # event id -> span not ended yet
        self._parents: dict[str, Any] = {}  # event id -> span, ended ones too (a tool call's parent
        # is the LLM turn that asked for it, which has ended by then)
        self._closed = False
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": agent_name,
        }
        if run_id is not None:
            attributes["llamon.run.id"] = str(run_id)
        if source:
            attributes["llamon.run.source"] = source
        self.root = self.tracer.start_span(
            f"invoke_agent {agent_name}".strip(),
            kind=trace.SpanKind.INTERNAL,
            attributes=attributes,
            start_time=time.time_ns(),
        )

    # -- TraceSink

    def emit(self, event: TraceEvent) -> None:
        with self._lock:
            if self._closed:
                return
            if event.phase == "start":
                self._open[event.id] = self._parents[event.id] = self._start(event)
                return
            span = self._open.pop(event.id, None)
            if span is None:  # an end without a start: the whole step at once
                span = self._parents[event.id] = self._start(event)
            self._end(span, event)

    def finish(self, status: str, *, error: str | None = None) -> None:
        """End the run's root span (``status`` as RunResult.status); spans still open end with it."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            now = time.time_ns()
            for span in self._open.values():
                span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, "the run ended first"))
                span.end(end_time=now)
            self._open.clear()
            self._parents.clear()
            self.root.set_attribute("llamon.run.status", status)
            if status not in ("succeeded", "ok"):
                self.root.set_attribute("error.type", status)
                self.root.set_status(self._trace.Status(self._trace.StatusCode.ERROR, error or status))
            self.root.end(end_time=now)

    # -- spans

    def _start(self, event: TraceEvent) -> Any:
        parent = self._parents.get(event.parent or "", self.root)
        name, kind, attributes = _describe(event)
        attributes["llamon.step.kind"] = event.kind
        attributes["llamon.step.id"] = event.id
        if self._capture and event.input is not None:
            attributes["llamon.input"] = self._content(event.input)
        return self.tracer.start_span(
            name,
            context=self._trace.set_span_in_context(parent),
            kind=kind,
            attributes=attributes,
            start_time=_ns(event.start),
        )

    def _end(self, span: Any, event: TraceEvent) -> None:
        meta = event.meta or {}
        usage = meta.get("usage") or {}
        if event.kind == "llm" and isinstance(usage, Mapping):
            for key in ("input_tokens", "output_tokens"):
                if isinstance(usage.get(key), int):
                    span.set_attribute(f"gen_ai.usage.{key}", usage[key])
        if "verdict" in meta:
            span.set_attribute("llamon.guardrail.verdict", str(meta["verdict"]))
        span.set_attribute("llamon.step.status", event.status)
        if self._capture and event.output is not None:
            span.set_attribute("llamon.output", self._content(event.output))
        if event.status == STATUS_ERROR:
            span.set_attribute("error.type", "blocked" if meta.get("verdict") == "blocked" else event.kind)
            span.set_status(
                self._trace.Status(self._trace.StatusCode.ERROR, str(self._redact(event.error or "")))
            )
        duration_ns = int((event.duration_ms or 0.0) * 1e6)
        span.end(end_time=_ns(event.start) + duration_ns)

    def _content(self, value: Any) -> str:
        text = json.dumps(jsonable(self._redact(value)), ensure_ascii=False)
        return text if len(text) <= CONTENT_LIMIT else text[: CONTENT_LIMIT - 1] + "…"


def _describe(event: TraceEvent) -> tuple[str, Any, dict[str, Any]]:
    """Span name, kind and GenAI attributes of a step."""
    from opentelemetry.trace import SpanKind

    meta = event.meta or {}
    data = event.input if isinstance(event.input, Mapping) else {}
    if event.kind == "llm":
        model = str(meta.get("model") or event.name)
        attributes = {"gen_ai.operation.name": "chat", "gen_ai.request.model": model}
        if meta.get("provider"):
            attributes["gen_ai.provider.name"] = str(meta["provider"])
        if isinstance(meta.get("iteration"), int):
            attributes["llamon.llm.iteration"] = meta["iteration"]
        return f"chat {model}", SpanKind.CLIENT, attributes
    if event.kind == "tool":
        attributes = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": event.name,
            "gen_ai.tool.type": "extension",
        }
        if data.get("tool_call_id"):
            attributes["gen_ai.tool.call.id"] = str(data["tool_call_id"])
        if meta.get("mcp_id"):
            attributes["llamon.mcp_id"] = str(meta["mcp_id"])
        return f"execute_tool {event.name}", SpanKind.INTERNAL, attributes
    if event.kind == "rule":
        # A pre-step rule calls an MCP tool deterministically (no model chose it).
        attributes = {"llamon.rule.name": event.name}
        if data.get("tool_name"):
            attributes.update(
                {
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": str(data["tool_name"]),
                    "gen_ai.tool.type": "extension",
                }
            )
        mcp_id = data.get("mcp_id") or meta.get("mcp_id")
        if mcp_id:
            attributes["llamon.mcp_id"] = str(mcp_id)
        return f"rule {event.name}", SpanKind.INTERNAL, attributes
    if event.kind == "guardrail":
        return f"guardrail {event.name}", SpanKind.INTERNAL, {"llamon.guardrail.name": event.name}
    return f"{event.kind} {event.name}" if event.kind != event.name else event.kind, SpanKind.INTERNAL, {}
