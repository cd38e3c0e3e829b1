"""An in-process OTLP/gRPC trace receiver: the collector's TraceService on a loopback port.

Real exporters send real spans to it, so tests and benchmarks check tracing end to end::

    with OtlpReceiver() as receiver:
        config = replace(config, otlp_endpoint=receiver.endpoint)
        ...
        span = receiver.wait_for_span("v1beta1.DevicePlugin/Allocate")

Set ``OTEL_BSP_SCHEDULE_DELAY`` low (milliseconds) for quick batches in tests.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent import futures
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as ts
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc as ts_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span


def attribute_value(value: AnyValue) -> Any:
    """The Python value of an OTLP attribute (arrays become lists)."""
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [attribute_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


def attributes(span: Span) -> dict[str, Any]:
    return {a.key: attribute_value(a.value) for a in span.attributes}


class OtlpReceiver(ts_grpc.TraceServiceServicer):
    """Collects every span exported to it, with the resource attributes of its batch."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.resources: list[dict[str, Any]] = []
        self.exports = 0
        self._cond = threading.Condition()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        ts_grpc.add_TraceServiceServicer_to_server(self, self._server)  # type: ignore[no-untyped-call]
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self.endpoint = f"http://127.0.0.1:{self.port}"

    def Export(
        self, request: ts.ExportTraceServiceRequest, context: Any
    ) -> ts.ExportTraceServiceResponse:
        with self._cond:
            self.exports += 1
            for resource_spans in request.resource_spans:
                resource = {
                    a.key: attribute_value(a.value) for a in resource_spans.resource.attributes
                }
                for scope in resource_spans.scope_spans:
                    for span in scope.spans:
                        self.spans.append(span)
                        self.resources.append(resource)
            self._cond.notify_all()
        return ts.ExportTraceServiceResponse()

    def start(self) -> OtlpReceiver:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop(None)

    def __enter__(self) -> OtlpReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def wait_for(
        self,
        predicate: Callable[[Span], bool],
        timeout: float = 10.0,
        what: str = "a matching span",
    ) -> Span:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for span in self.spans:
                    if predicate(span):
                        return span
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    names = sorted({s.name for s in self.spans})
                    raise TimeoutError(
                        f"OTLP receiver: no {what} within {timeout} s; received: {names}"
                    )
                self._cond.wait(remaining)

    def wait_for_span(self, name: str, timeout: float = 10.0) -> Span:
        return self.wait_for(lambda s: s.name == name, timeout, f"span {name!r}")

    def named(self, name: str) -> list[Span]:
        with self._cond:
            return [s for s in self.spans if s.name == name]
