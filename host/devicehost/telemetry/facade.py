"""What the host reports about itself: tracing, metrics and pod identity, in one bundle.

The servicer, registration and scanners call into this; it decides what becomes a span, a
metric or a pod lookup, so request handling stays about requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from devicehost.config.host_config import HostConfig
from devicehost.telemetry import tracing
from devicehost.telemetry.metrics import Metrics
from devicehost.telemetry.pods import NoPodLookup, PodIdentity, PodLookup
from devicehost.telemetry.tracing import Tracing

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Span, SpanContext
    from opentelemetry.util.types import AttributeValue

log = logging.getLogger(__name__)

PRE_START_LOOKUP_SECONDS = 0.5
POD_IDENTITY_SPAN = "devicehost/PodIdentity"


def pod_attributes(identity: PodIdentity) -> dict[str, str]:
    """The workload's identity under the keys the kubelet's spans use (``k8s.pod.uid``
    only when known)."""
    attributes = {
        tracing.POD_NAME: identity.pod,
        tracing.NAMESPACE: identity.namespace,
        tracing.CONTAINER: identity.container,
    }
    if identity.uid:
        attributes[tracing.POD_UID] = identity.uid
    return attributes


@dataclass
class Telemetry:
    tracing: Tracing = field(default_factory=lambda: Tracing(None))
    metrics: Metrics = field(default_factory=Metrics)
    resolver: PodLookup = field(default_factory=NoPodLookup)
    _pending: set[asyncio.Task[None]] = field(default_factory=set)
    #: resources whose unresolved pod lookups were logged at INFO once already
    _unresolved_said: set[str] = field(default_factory=set)

    @classmethod
    def from_config(
        cls,
        config: HostConfig,
        resolver: Callable[[], PodLookup] | None = None,
        exporter: SpanExporter | None = None,
    ) -> Telemetry:
        """Tracing and metrics as configured; ``resolver`` builds what finds pods for spans,
        called only when tracing is on (pod identities only ever go on spans)."""
        tracer = Tracing.from_config(config.otlp_endpoint, config.node_name, exporter=exporter)
        lookup = resolver() if resolver is not None and tracer.enabled else NoPodLookup()
        metrics = Metrics()
        if tracer.sender is not None:
            tracer.sender.on_dropped = metrics.spans_dropped.inc
        return cls(tracer, metrics, lookup)

    # -- pod identity ------------------------------------------------------------------------

    @property
    def finds_pods(self) -> bool:
        """True when spans get the pod that received the devices."""
        return self.tracing.enabled and self.resolver.enabled

    def allocated(
        self, resource: str, containers: Sequence[Sequence[str]], allocate_span: SpanContext
    ) -> None:
        """After an Allocate: find each container's pod in the background and record it on a
        follow-up span in the same trace, linked to the Allocate span."""
        if not (self.finds_pods and allocate_span.is_valid):
            return
        for index, device_ids in enumerate(containers):
            task = asyncio.create_task(self._identify(resource, index, device_ids, allocate_span))
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)

    async def _identify(
        self, resource: str, index: int, device_ids: Sequence[str], allocate_span: SpanContext
    ) -> None:
        identity = await self.resolver.resolve(resource, device_ids)
        if identity is None:
            self.metrics.pod_identity_unresolved.inc(resource=resource)
            first = resource not in self._unresolved_said
            self._unresolved_said.add(resource)
            log.log(
                logging.INFO if first else logging.DEBUG,
                "resource %s: no pod found holding %s within %g s (PodResources did not list "
                "them, or is absent): its Allocate span carries no pod; counted in "
                "devicehost_pod_identity_unresolved_total%s",
                resource,
                ", ".join(device_ids),
                self.resolver.timeout,
                ", further ones of this resource logged at debug" if first else "",
            )
            return
        from opentelemetry import trace
        from opentelemetry.trace import Link, NonRecordingSpan

        parent = trace.set_span_in_context(NonRecordingSpan(allocate_span))
        attributes: dict[str, AttributeValue] = {
            tracing.RESOURCE: resource,
            tracing.REQUESTED: list(device_ids),
            tracing.CONTAINER_INDEX: index,
            **pod_attributes(identity),
        }
        if self.tracing.node_name:
            attributes[tracing.NODE] = self.tracing.node_name
        with self.tracing.tracer.start_as_current_span(
            POD_IDENTITY_SPAN, context=parent, links=[Link(allocate_span)], attributes=attributes
        ):
            pass

    async def identify_on(self, span: Span, resource: str, device_ids: Sequence[str]) -> None:
        """At PreStartContainer: put the pod's identity on that span (one quick lookup)."""
        if not self.finds_pods:
            return
        with contextlib.suppress(TimeoutError):
            identity = await asyncio.wait_for(
                self.resolver.lookup(resource, device_ids), PRE_START_LOOKUP_SECONDS
            )
            if identity is not None:
                span.set_attributes(pod_attributes(identity))

    # -- errors and shutdown -----------------------------------------------------------------

    def driver_error(self, driver: str, hook: str) -> None:
        self.metrics.driver_errors.inc(driver=driver, hook=hook)

    def task_restarted(self, task: str) -> None:
        """A long-running host task failed and is started again (``supervision``)."""
        self.metrics.task_restarts.inc(task=task)

    def node_file_error(self, file: str) -> None:
        """Writing a node file (a CDI spec, the feature file) failed; it is retried."""
        self.metrics.node_file_errors.inc(file=file)

    def registration(self, resource: str, result: str) -> None:
        """Count one registration attempt: ``ok``, ``rejected`` or ``unreachable``."""
        self.metrics.registrations.inc(resource=resource, result=result)

    async def close(self) -> None:
        for task in list(self._pending):
            task.cancel()
        await asyncio.gather(*self._pending, return_exceptions=True)
        await self.resolver.close()
        # In a thread: the bounded flush runs beside the workers' stop, not after it.
        await asyncio.to_thread(self.tracing.shutdown)
