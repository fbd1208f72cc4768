"""A small OTLP/HTTP trace receiver on 127.0.0.1 for the export tests (protobuf, ``POST /v1/traces``).

It decodes what the real OpenTelemetry SDK exporter sends with the official protobuf classes
(``opentelemetry-proto``) and keeps every span, with its resource and the request's headers.
It stands in for a collector because Arize Phoenix (the receiver first tried) took 12 minutes and
850 MB to install and over two minutes to start on this machine; see docs/observability.md.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as SpanPb


def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in v.kvlist_value.values}
    return getattr(v, kind) if kind else None


@dataclass
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    status_code: int
    status_message: str
    resource: dict[str, Any]


@dataclass
class Receiver:
    url: str = ""
    spans: list[ReceivedSpan] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    fail_with: int | None = None  # answer every export with this status instead
    lock: threading.Lock = field(default_factory=threading.Lock)

    def by_name(self, name: str) -> list[ReceivedSpan]:
        with self.lock:
            return [s for s in self.spans if s.name == name]


def start_receiver() -> tuple[Receiver, ThreadingHTTPServer]:
    receiver = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path != "/v1/traces":
                self.send_error(404)
                return
            if receiver.fail_with is not None:
                self.send_error(receiver.fail_with)
                return
            request = ExportTraceServiceRequest.FromString(body)
            with receiver.lock:
                receiver.headers.append({k.lower(): v for k, v in self.headers.items()})
                for rs in request.resource_spans:
                    resource = {kv.key: _value(kv.value) for kv in rs.resource.attributes}
                    for ss in rs.scope_spans:
                        for s in ss.spans:
                            receiver.spans.append(
                                ReceivedSpan(
                                    name=s.name,
                                    trace_id=s.trace_id.hex(),
                                    span_id=s.span_id.hex(),
                                    parent_span_id=s.parent_span_id.hex(),
                                    kind=SpanPb.SpanKind.Name(s.kind),
                                    start_ns=s.start_time_unix_nano,
                                    end_ns=s.end_time_unix_nano,
                                    attributes={kv.key: _value(kv.value) for kv in s.attributes},
                                    status_code=s.status.code,
                                    status_message=s.status.message,
                                    resource=resource,
                                )
                            )
            payload = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return receiver, server
