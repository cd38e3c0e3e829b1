"""OpenTelemetry tracing: a span for every kubelet request, every driver hook inside it, and
every registration attempt.

Tracing is off (a no-op tracer, no cost beyond a function call) unless an OTLP endpoint is
configured (``tracing.otlpEndpoint``, ``DEVICEHOST_OTLP_ENDPOINT`` or the standard
``OTEL_EXPORTER_OTLP_ENDPOINT``). Spans are exported in batches by the SDK's background
thread, off the request path. The sampler is the SDK's standard one (``OTEL_TRACES_SAMPLER``).
The exporter protocol follows ``OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL``: ``grpc`` or
``http/protobuf``; when unset, an endpoint on port 4318 or ending in ``/v1/traces`` means
HTTP, anything else gRPC.

The kubelet sends no trace context, so request spans are roots — unless a ``traceparent``
arrives in the gRPC metadata, which is honoured.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.propagate import extract
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

if TYPE_CHECKING:  # the SDK is imported only when tracing is on: start-up stays fast
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter

log = logging.getLogger(__name__)

INSTRUMENTATION = "devicehost"
FLUSH_SECONDS = 2.0

# Attribute names (documented in docs/observability.md).
RESOURCE = "devicehost.resource"
DRIVER = "devicehost.driver.name"
DRIVER_VERSION = "devicehost.driver.version"
REQUESTED = "devicehost.device_ids.requested"
CHOSEN = "devicehost.device_ids.chosen"
CONTAINER_INDEX = "devicehost.container.index"
CONTAINER_COUNT = "devicehost.container.count"
ATTEMPT = "devicehost.kubelet.registration.attempt"
NODE = "k8s.node.name"
POD = "k8s.pod.name"
NAMESPACE = "k8s.namespace.name"
CONTAINER = "k8s.container.name"


def _protocol(endpoint: str, env: Mapping[str, str]) -> str:
    chosen = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
    if chosen:
        return chosen
    url = urlparse(endpoint if "://" in endpoint else f"http://{endpoint}")
    return "http/protobuf" if url.port == 4318 or url.path.endswith("/v1/traces") else "grpc"


def otlp_exporter(endpoint: str, env: Mapping[str, str] | None = None) -> SpanExporter:
    """The OTLP span exporter for ``endpoint``; imported lazily to keep start-up fast."""
    env = os.environ if env is None else env
    if _protocol(endpoint, env) == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        insecure = not endpoint.startswith("https://")
        return OTLPSpanExporter(endpoint=endpoint, insecure=insecure)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpExporter,
    )

    url = endpoint if endpoint.endswith("/v1/traces") else endpoint.rstrip("/") + "/v1/traces"
    return HttpExporter(endpoint=url)


class Activity:
    """Counts kubelet requests in flight; the exporter waits for a quiet moment."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.last_end = 0.0

    def begin(self) -> None:
        self.in_flight += 1

    def end(self) -> None:
        self.in_flight -= 1
        self.last_end = time.monotonic()

    def quiet_for(self) -> float:
        return 0.0 if self.in_flight else time.monotonic() - self.last_end


class Tracing:
    """The host's tracer and the helpers that give every span the same shape."""

    def __init__(
        self,
        provider: TracerProvider | None,
        node_name: str = "",
        exporter: SpanExporter | None = None,
    ) -> None:
        self.provider = provider
        self.exporter = exporter
        self.node_name = node_name
        self.tracer = provider.get_tracer(INSTRUMENTATION) if provider else trace.NoOpTracer()
        self.enabled = provider is not None
        self.activity = Activity()

    @classmethod
    def from_config(
        cls, endpoint: str, node_name: str, version: str, exporter: SpanExporter | None = None
    ) -> Tracing:
        """Tracing to ``endpoint`` (or ``exporter``), or a no-op when neither is given."""
        if not endpoint and exporter is None:
            return cls(None, node_name)
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider

        from devicehost.telemetry.span_export import IdleSpanProcessor

        attributes: dict[str, Any] = {
            "service.name": os.environ.get("OTEL_SERVICE_NAME", "devicehost"),
            "service.version": version,
        }
        if node_name:
            attributes[NODE] = node_name
        provider = TracerProvider(resource=Resource.create(attributes))
        exporter = exporter or otlp_exporter(endpoint)
        tracing = cls(provider, node_name, exporter)
        provider.add_span_processor(IdleSpanProcessor(exporter, tracing.activity))
        log.info("tracing to %s", endpoint or type(exporter).__name__)
        return tracing

    def shutdown(self, flush_seconds: float = FLUSH_SECONDS) -> None:
        """Send what is buffered, for at most ``flush_seconds``, then stop exporting.

        When the collector does not answer in time, the exporter is shut down first so its
        retries end at once: a pod must stop within its grace period, spans or not.
        """
        if self.provider is None:
            return
        # force_flush's own timeout does not cover the exporter's retries: bound it here.
        flusher = threading.Thread(target=self.provider.force_flush, daemon=True, name="span-flush")
        flusher.start()
        flusher.join(flush_seconds)
        if flusher.is_alive():
            log.warning(
                "tracing: the collector did not take the last spans within %.0f s; they are "
                "dropped",
                flush_seconds,
            )
            if self.exporter is not None:
                self.exporter.shutdown()  # ends the retries; the processor's join returns
        self.provider.shutdown()

    @contextmanager
    def rpc_span(
        self,
        method: str,
        resource: str,
        driver: Any,
        metadata: Iterable[tuple[str, Any]] | None = None,
    ) -> Iterator[Span]:
        """A SERVER span for one kubelet request; a ``traceparent`` in metadata is its parent."""
        if not self.enabled:  # no context switching at all when tracing is off
            yield trace.INVALID_SPAN
            return
        carrier = {k: v for k, v in metadata or () if isinstance(v, str)}
        parent = extract(carrier) if "traceparent" in carrier else otel_context.Context()
        attributes = {
            "rpc.system": "grpc",
            "rpc.service": "v1beta1.DevicePlugin",
            "rpc.method": method,
            RESOURCE: resource,
            DRIVER: driver.name,
            DRIVER_VERSION: driver.info.version,
        }
        if self.node_name:
            attributes[NODE] = self.node_name
        self.activity.begin()
        try:
            with self.tracer.start_as_current_span(
                f"v1beta1.DevicePlugin/{method}",
                context=parent,
                kind=SpanKind.SERVER,
                attributes=attributes,
                record_exception=False,
                set_status_on_exception=False,
            ) as span:
                yield span
        finally:
            self.activity.end()

    @contextmanager
    def child_span(self, name: str, **attributes: Any) -> Iterator[Span]:
        """A span inside the current request (a driver hook, a container), errors recorded."""
        if not self.enabled:
            yield trace.INVALID_SPAN
            return
        with self.tracer.start_as_current_span(
            name,
            attributes={k: v for k, v in attributes.items() if v is not None},
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                yield span
            except Exception as exc:
                fail(span, exc)
                raise


def fail(span: Span, exc: BaseException, message: str | None = None) -> None:
    """Mark ``span`` failed: the exception as an event, status ERROR with its message."""
    span.record_exception(exc)
    span.set_status(Status(StatusCode.ERROR, message or str(exc)))
