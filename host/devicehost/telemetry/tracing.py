"""OpenTelemetry tracing: a span for every kubelet request, every driver hook inside it, and
every registration attempt.

Tracing is off (a no-op tracer, no cost beyond a function call) unless an OTLP endpoint is
configured (``tracing.otlpEndpoint``, ``DEVICEHOST_OTLP_ENDPOINT`` or the standard
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_ENDPOINT``). Spans are exported
in batches off the request path. The sampler is the SDK's standard one
(``OTEL_TRACES_SAMPLER``); ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES`` are read
by the SDK. The exporter protocol follows ``OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL``: ``grpc``
or ``http/protobuf``; when unset, an endpoint on port 4318 or ending in ``/v1/traces``
means HTTP, anything else gRPC. As the OTLP exporter specification says, a traces-specific
HTTP endpoint is used as given, while ``/v1/traces`` is appended to a generic one.

Span shapes follow the OpenTelemetry semantic conventions for RPC as stabilised after
v1.37 (semantic-conventions ``docs/rpc/rpc-spans.md`` and ``docs/rpc/grpc.md``):
``rpc.system.name``, a fully qualified ``rpc.method`` that is also the span name,
``rpc.response.status_code`` as the status name and ``error.type`` on failure. Every
attribute key is a constant below; none is built at run time.

The kubelet sends no trace context, so request spans are roots — unless a ``traceparent``
arrives in the gRPC metadata, which is honoured.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NamedTuple

from devicehost.config.host_config import redact_url
from devicehost.telemetry.export_settings import Activity

if TYPE_CHECKING:  # OpenTelemetry is imported only when tracing is on: start-up stays fast
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Span, SpanContext

    from devicehost.telemetry.export_process import ProcessSpanProcessor

log = logging.getLogger(__name__)


class SpanIds(NamedTuple):
    trace_id: int
    span_id: int


#: A row's span whose IDs the export process draws (``Tracing.record_answered``).
UNIDENTIFIED = SpanIds(0, 0)


INSTRUMENTATION = "devicehost"
FLUSH_SECONDS = 1.0

# Attribute names (documented in docs/observability.md).
RESOURCE = "devicehost.resource"
DRIVER = "devicehost.driver.name"
DRIVER_VERSION = "devicehost.driver.version"
REQUESTED = "devicehost.device_ids.requested"
CHOSEN = "devicehost.device_ids.chosen"
CONTAINER_INDEX = "devicehost.container.index"
CONTAINER_COUNT = "devicehost.container.count"
ATTEMPT = "devicehost.kubelet.deviceplugin.registration.attempt"
NODE = "k8s.node.name"
# The workload that received devices, under the semantic conventions' Kubernetes keys, as
# the kubelet's own spans carry them (syncPod: k8s.pod.name, k8s.namespace.name,
# k8s.pod.uid): one search by a pod's UID finds the kubelet's spans and devicehost's. On a
# span they name the pod the span is about; devicehost's own pod, if named at all, is on
# the resource (OTEL_RESOURCE_ATTRIBUTES), as the conventions use these keys there.
POD_NAME = "k8s.pod.name"
NAMESPACE = "k8s.namespace.name"
CONTAINER = "k8s.container.name"
# RPC semantic conventions (see the module docstring).
RPC_SYSTEM = "rpc.system.name"
RPC_METHOD = "rpc.method"
RPC_STATUS = "rpc.response.status_code"
ERROR_TYPE = "error.type"
SERVER_ADDRESS = "server.address"
SERVICE_INSTANCE = "service.instance.id"
POD_UID = "k8s.pod.uid"
#: One event per container on a GetPreferredAllocation span, carrying CONTAINER_INDEX and
#: CHOSEN: a request may hold several containers, and keys stay constant.
CHOICE_EVENT = "devicehost.preferred_allocation.choice"
#: The namespace the semantic conventions give for a UUIDv5 service.instance.id
#: (semantic-conventions, attributes registry, ``service.instance.id``).
INSTANCE_NAMESPACE = "4d63009a-8d0f-11ee-aad7-4c796ed8e320"

#: A DRA claim a span is about, and the devices of this driver it holds.
CLAIM_NAME = "devicehost.dra.claim.name"
CLAIM_UID = "devicehost.dra.claim.uid"
DRA_DRIVER = "devicehost.dra.driver.name"
DRA_DEVICES = "devicehost.dra.devices"
#: The UIDs of the pods a shared claim is reserved for (one pod: ``k8s.pod.uid``).
RESERVED_FOR = "devicehost.dra.claim.reserved_for"

DEVICE_PLUGIN_SERVICE = "v1beta1.DevicePlugin"
REGISTRATION_SERVICE = "v1beta1.Registration"


def rpc_attributes(service: str, method: str) -> dict[str, str]:
    """The attributes every RPC span starts with; ``rpc.method`` is fully qualified."""
    return {RPC_SYSTEM: "grpc", RPC_METHOD: f"{service}/{method}"}


def set_rpc_status(span: Span, code_name: str) -> None:
    """Record the gRPC status by name (``OK``, ``INVALID_ARGUMENT``…); non-OK is an error."""
    span.set_attribute(RPC_STATUS, code_name)
    if code_name != "OK":
        span.set_attribute(ERROR_TYPE, code_name)


def record_choice(span: Span, index: int, chosen: list[str]) -> None:
    """One container's preferred devices, as an event on the GetPreferredAllocation span."""
    span.add_event(CHOICE_EVENT, {CONTAINER_INDEX: index, CHOSEN: chosen})


def instance_id(resource_attributes: Mapping[str, Any]) -> str:
    """``service.instance.id``: a UUIDv5 of the pod UID when known (stable for the pod's
    life), else a random UUIDv4, as the semantic conventions recommend."""
    import uuid  # with tracing on only: ~1.5 ms of every start otherwise

    pod_uid = resource_attributes.get(POD_UID)
    if pod_uid:
        return str(uuid.uuid5(uuid.UUID(INSTANCE_NAMESPACE), str(pod_uid)))
    return str(uuid.uuid4())


class _NoSpanContext:
    """What ``get_span_context()`` answers when tracing is off: never valid."""

    trace_id = span_id = 0
    is_valid = is_remote = False


class NoSpan:
    """The span every request gets when tracing is off: records nothing, and needs no
    OpenTelemetry import (the API alone costs ~15 ms of every cold start: its propagators
    are found by scanning every distribution's entry points)."""

    _context = _NoSpanContext()

    def get_span_context(self) -> Any:
        return self._context

    def is_recording(self) -> bool:
        return False

    def set_attribute(self, key: str, value: Any) -> None:
        pass

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        pass

    def add_event(self, name: str, attributes: Any = None, timestamp: int | None = None) -> None:
        pass

    def set_status(self, status: Any, description: str | None = None) -> None:
        pass

    def record_exception(self, exception: BaseException, *args: Any, **kwargs: Any) -> None:
        pass

    def update_name(self, name: str) -> None:
        pass

    def end(self, end_time: int | None = None) -> None:
        pass


NO_SPAN: Any = NoSpan()


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
        self.enabled = provider is not None
        self.activity = Activity()
        self.sender: ProcessSpanProcessor | None = None
        self._static_attributes: dict[tuple[str, str, str, str], tuple[str, dict[str, Any]]] = {}
        #: request_span.start_request_span, imported with the SDK only when tracing is on
        self.start_request_span: Callable[..., Span] = lambda *_: NO_SPAN
        self.tracer: Any = None
        self._roots_always_sampled = False
        if provider is not None:
            from opentelemetry import context, propagate, trace

            from devicehost.telemetry.request_span import samples_every_root

            self.tracer = provider.get_tracer(INSTRUMENTATION)
            self._context, self._trace, self._extract = context, trace, propagate.extract
            self._empty_context = context.Context()
            self._roots_always_sampled = samples_every_root(provider.sampler)

    @classmethod
    def from_config(
        cls,
        endpoint: str,
        node_name: str,
        version: str | None = None,
        exporter: SpanExporter | None = None,
    ) -> Tracing:
        """Tracing to ``endpoint`` (or ``exporter``), or a no-op when neither is given;
        ``version`` is the service's (devicehost's own when None: read from package
        metadata, which imports the email parser, so only when tracing is on)."""
        if not endpoint and exporter is None:
            return cls(None, node_name)
        if version is None:
            import devicehost

            version = devicehost.__version__
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider

        from devicehost.telemetry.span_export import IdleSpanProcessor

        attributes: dict[str, Any] = {
            "service.name": os.environ.get("OTEL_SERVICE_NAME", "devicehost"),
            "service.version": version,
        }
        # OTEL_RESOURCE_ATTRIBUTES (read by Resource.create) may name the instance, the
        # pod UID or the node; only when it names no instance is one made here, and its
        # node goes on spans too when no nodeName is configured.
        from_env = Resource.create({}).attributes
        if not node_name and isinstance(from_env.get(NODE), str):
            node_name = str(from_env[NODE])
        if node_name:
            attributes[NODE] = node_name
        if SERVICE_INSTANCE not in from_env:
            attributes[SERVICE_INSTANCE] = instance_id(from_env)
        provider = TracerProvider(resource=Resource.create(attributes))
        if exporter is None:
            # Encoding and sending happen in a process of their own: off the GIL that
            # serves the kubelet (``export_process``).
            from devicehost.telemetry.export_process import ProcessSpanProcessor
            from devicehost.telemetry.request_span import start_request_span

            tracing = cls(provider, node_name)
            tracing.start_request_span = start_request_span
            tracing.sender = ProcessSpanProcessor(
                endpoint, dict(provider.resource.attributes), (INSTRUMENTATION, version)
            )
            provider.add_span_processor(tracing.sender)
        else:  # an exporter object given in process (tests, embedding)
            tracing = cls(provider, node_name, exporter)
            provider.add_span_processor(IdleSpanProcessor(exporter, tracing.activity))
        log.info("tracing to %s", redact_url(endpoint) if endpoint else type(exporter).__name__)
        return tracing

    def shutdown(self, flush_seconds: float = FLUSH_SECONDS) -> None:
        """Send what is buffered, for at most ``flush_seconds``, then stop exporting.

        When the collector does not answer in time, the exporter is shut down first so its
        retries end at once: a pod must stop within its grace period, spans or not.
        """
        if self.provider is None:
            return
        if self.sender is not None:
            if not self.sender.close(flush_seconds):
                log.warning(
                    "tracing: the collector did not take the last spans within %.0f s; they "
                    "are dropped",
                    flush_seconds,
                )
            self.provider.shutdown()
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

    def _attributes_of(self, method: str, resource: str, driver: Any) -> dict[str, Any]:
        """A fresh copy of the attributes every span of this method and resource starts
        with (built once: the request path only copies them)."""
        return self._shared(method, resource, driver)[1].copy()

    def _shared(self, method: str, resource: str, driver: Any) -> tuple[str, dict[str, Any]]:
        """The span name and attributes every span of this method and resource shares."""
        key = (method, resource, driver.name, driver.info.version)
        shared = self._static_attributes.get(key)
        if shared is None:
            attributes = {
                **rpc_attributes(DEVICE_PLUGIN_SERVICE, method),
                RESOURCE: resource,
                DRIVER: driver.name,
                DRIVER_VERSION: driver.info.version,
                **({NODE: self.node_name} if self.node_name else {}),
            }
            shared = self._static_attributes[key] = (attributes[RPC_METHOD], attributes)
        return shared

    def record_answered(
        self,
        method: str,
        resource: str,
        driver: Any,
        metadata: Iterable[tuple[str, Any]],
        start_ns: int,
        end_ns: int,
        attributes: dict[str, Any],
        identified: bool = True,
    ) -> SpanIds | None:
        """Record a request that succeeded without a driver call, a child span or a log
        line (an Allocate answered from the snapshot) as a row; its span is built from
        the row only when held spans are handed to the exporter, after the burst.

        Starting a span, making it current and ending it costs more than the answer
        itself on the request path (docs/performance.md); nothing inside such a request
        needs the span. The span is the one ``rpc_span`` makes: same name, kind,
        attributes and OK status. Returns its IDs, or None when it cannot be a row — spans
        exported in process, a sampler that must be asked, a ``traceparent`` to honour —
        and the caller takes ``rpc_span``. Without ``identified`` (nothing will link to
        the span) the export process gives it its IDs, and ``UNIDENTIFIED`` is returned:
        two random numbers are not drawn on the request path."""
        sender = self.sender
        if sender is None or not self._roots_always_sampled:
            return None
        for key, _ in metadata:
            if key == "traceparent":
                return None
        span = UNIDENTIFIED
        if identified:
            ids = self.provider.id_generator  # type: ignore[union-attr]
            span = SpanIds(ids.generate_trace_id(), ids.generate_span_id())
        attributes[RPC_STATUS] = "OK"
        shared = self._shared(method, resource, driver)
        sender.hold_answered((shared, *span, start_ns, end_ns, attributes))
        return span

    def context_of(self, ids: SpanIds) -> SpanContext:
        """The span context of a row's span (to link a follow-up span to it)."""
        from opentelemetry.trace import SpanContext

        from devicehost.telemetry.request_span import SAMPLED

        return SpanContext(ids.trace_id, ids.span_id, False, SAMPLED)

    @contextmanager
    def rpc_span(
        self,
        method: str,
        resource: str,
        driver: Any,
        metadata: Iterable[tuple[str, Any]] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> Iterator[Span]:
        """A SERVER span for one kubelet request; a ``traceparent`` in metadata is its parent;
        ``extra`` attributes are set at its start."""
        if not self.enabled:  # no context switching at all when tracing is off
            yield NO_SPAN
            return
        carrier = {k: v for k, v in metadata or () if isinstance(v, str)}
        parent = self._extract(carrier) if "traceparent" in carrier else self._empty_context
        attributes = self._attributes_of(method, resource, driver)
        if extra:
            attributes.update(extra)
        if self.sender is not None:  # the hot path: a plain span (request_span.py)
            span = self.start_request_span(
                self.provider, self.sender.on_end, attributes[RPC_METHOD], parent, attributes
            )
            token = self._context.attach(self._trace.set_span_in_context(span))
            try:
                yield span
            finally:
                self._context.detach(token)
                span.end()
            return
        self.activity.begin()
        try:
            with self._sdk_span(attributes[RPC_METHOD], "SERVER", attributes, parent) as span:
                yield span
        finally:
            self.activity.end()

    def _sdk_span(
        self, name: str, kind: str, attributes: Mapping[str, Any], context: Any = None
    ) -> Any:
        """An SDK span, current while it lasts; errors are recorded by ``fail``."""
        return self.tracer.start_as_current_span(
            name,
            context=context,
            kind=getattr(self._trace.SpanKind, kind),
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        )

    @contextmanager
    def server_span(
        self,
        service: str,
        method: str,
        attributes: Mapping[str, Any],
        metadata: Iterable[tuple[str, Any]] | None = None,
    ) -> Iterator[Span]:
        """A SERVER span for one item of a kubelet call other than the device plugin's (a
        claim of a DRA call); a ``traceparent`` in metadata is its parent, errors recorded."""
        if not self.enabled:
            yield NO_SPAN
            return
        carrier = {k: v for k, v in metadata or () if isinstance(v, str)}
        parent = self._extract(carrier) if "traceparent" in carrier else None
        every = {
            **rpc_attributes(service, method),
            **({NODE: self.node_name} if self.node_name else {}),
            **attributes,
        }
        with self._sdk_span(every[RPC_METHOD], "SERVER", every, context=parent) as span:
            try:
                yield span
            except Exception as exc:
                fail(span, exc)
                raise

    @contextmanager
    def client_span(self, name: str, attributes: Mapping[str, Any]) -> Iterator[Span]:
        """A CLIENT span for a call devicehost makes (registration); errors are the
        caller's to record."""
        if not self.enabled:
            yield NO_SPAN
            return
        with self._sdk_span(name, "CLIENT", attributes) as span:
            yield span

    @contextmanager
    def child_span(self, name: str, **attributes: Any) -> Iterator[Span]:
        """A span inside the current request (a driver hook, a container), errors recorded."""
        if not self.enabled:
            yield NO_SPAN
            return
        present = {k: v for k, v in attributes.items() if v is not None}
        with self._sdk_span(name, "INTERNAL", present) as span:
            try:
                yield span
            except Exception as exc:
                fail(span, exc)
                raise


def fail(span: Span, exc: BaseException, message: str | None = None) -> None:
    """Mark ``span`` failed: the exception as an event, status ERROR with its message."""
    if not span.is_recording():
        return
    from opentelemetry.trace import Status, StatusCode

    span.record_exception(exc)
    span.set_status(Status(StatusCode.ERROR, message or str(exc)))
