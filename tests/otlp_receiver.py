"""A loopback OTLP/HTTP collector for the tests: answers as the spec says (200 and an empty
``ExportTraceServiceResponse`` in the request's encoding) and keeps every span it decoded with
``opentelemetry-proto``, as Jaeger's or Phoenix's OTLP endpoint would."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class OtlpReceiver:
    def __init__(self, path: str = "/v1/traces") -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
            ExportTraceServiceResponse,
        )

        self.spans: list = []  # opentelemetry.proto.trace.v1.Span
        self.headers: list[dict[str, str]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path != path or self.headers.get("Content-Type") != "application/x-protobuf":
                    self.send_response(404 if self.path != path else 415)
                    self.end_headers()
                    return
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                receiver.headers.append({k.lower(): v for k, v in self.headers.items()})
                receiver.spans.extend(
                    s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans
                )
                data = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
