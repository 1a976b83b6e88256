"""A local OTLP/HTTP trace receiver: POST /v1/traces with a protobuf
ExportTraceServiceRequest, decoded with opentelemetry-proto into plain spans."""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from tests.fakes.server import LocalServer


@dataclass
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    attributes: dict
    service: str
    status_code: int


def _value(any_value):
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return tuple(_value(v) for v in any_value.array_value.values)
    return getattr(any_value, kind) if kind else None


class OtlpReceiver(LocalServer):
    def __init__(self):
        super().__init__([])
        self.spans: list[ReceivedSpan] = []
        self.content_types: list[str] = []

    def _handler_class(self):
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                request = ExportTraceServiceRequest.FromString(body)
                with receiver.lock:
                    receiver.content_types.append(self.headers.get("Content-Type", ""))
                    for resource_spans in request.resource_spans:
                        resource = {
                            a.key: _value(a.value) for a in resource_spans.resource.attributes
                        }
                        for scope_spans in resource_spans.scope_spans:
                            for span in scope_spans.spans:
                                receiver.spans.append(
                                    ReceivedSpan(
                                        name=span.name,
                                        trace_id=span.trace_id.hex(),
                                        span_id=span.span_id.hex(),
                                        parent_span_id=span.parent_span_id.hex(),
                                        kind=span.kind,
                                        attributes={
                                            a.key: _value(a.value) for a in span.attributes
                                        },
                                        service=resource.get("service.name", ""),
                                        status_code=span.status.code,
                                    )
                                )
                payload = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        return Handler
