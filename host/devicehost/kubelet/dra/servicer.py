"""The kubelet's DRA gRPC service (``v1`` and ``v1beta1``), answered by a ``Preparer``.

Both versions carry the same messages (``v1`` adds ``Device.share_id``, unused here), so
one servicer serves both, building each answer with its own version's types. A claim
that cannot be prepared gets its error in its own entry of the answer; the others are
prepared as usual (the kubelet retries the failed ones).

Each claim of a call gets a SERVER span (``<version>.DRAPlugin/NodePrepareResources``, a
child of the kubelet's when its call carries a ``traceparent``) with the claim's name, UID
and namespace, the DRA driver, the devices prepared, and the pod the claim is reserved for
under the keys the kubelet's own spans use (``k8s.pod.uid``, ``k8s.pod.name``): one Jaeger
search by a pod's UID finds the kubelet's spans and devicehost's prepare.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from types import ModuleType
from typing import Any

import grpc

from devicehost._proto.dra.v1 import api_pb2 as v1
from devicehost._proto.dra.v1 import api_pb2_grpc as v1_grpc
from devicehost._proto.dra.v1beta1 import api_pb2 as v1beta1
from devicehost._proto.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from devicehost.kubelet.dra.prepare import PrepareError, Preparer
from devicehost.telemetry import tracing
from devicehost.telemetry.tracing import Tracing

log = logging.getLogger(__name__)

Context = grpc.aio.ServicerContext[Any, Any]
#: The kubelet shows the message to users (pod events): keep it readable.
MAX_ERROR = 1024


def _claim_attributes(preparer: Preparer, claim: Any) -> dict[str, Any]:
    return {
        tracing.CLAIM_NAME: claim.name,
        tracing.CLAIM_UID: claim.uid,
        tracing.NAMESPACE: claim.namespace,
        tracing.DRA_DRIVER: preparer.driver,
    }


def reserved_for(span: Any, claim: Mapping[str, Any]) -> None:
    """Put the pod a claim is reserved for on ``span`` (``status.reservedFor``); a claim
    shared by several pods names all their UIDs instead."""
    entries = (claim.get("status") or {}).get("reservedFor") or []
    pods = [e for e in entries if isinstance(e, Mapping) and e.get("resource") == "pods"]
    if len(pods) == 1:
        span.set_attributes(
            {
                tracing.POD_NAME: str(pods[0].get("name", "")),
                tracing.POD_UID: str(pods[0].get("uid", "")),
            }
        )
    elif pods:
        span.set_attribute(tracing.RESERVED_FOR, [str(p.get("uid", "")) for p in pods])


async def _prepare(
    preparer: Preparer, request: Any, pb: ModuleType, spans: Tracing, context: Context
) -> Any:
    response = pb.NodePrepareResourcesResponse()
    service = f"{pb.__name__.split('.')[-2]}.DRAPlugin"
    metadata = context.invocation_metadata() if spans.enabled else None
    for claim in request.claims:
        entry = response.claims[claim.uid]
        attributes = _claim_attributes(preparer, claim)
        with spans.server_span(service, "NodePrepareResources", attributes, metadata) as span:
            try:
                prepared = await preparer.prepare(
                    claim.namespace,
                    claim.name,
                    claim.uid,
                    on_read=functools.partial(reserved_for, span),
                )
            except PrepareError as exc:
                log.error("DRA driver %s: %s", preparer.driver, exc)
                entry.error = str(exc)[:MAX_ERROR]
                tracing.fail(span, exc)
                continue
            except Exception as exc:  # a bug here fails this claim, never the others
                log.exception(
                    "DRA driver %s: preparing claim %s failed", preparer.driver, claim.uid
                )
                entry.error = f"internal error: {type(exc).__name__}: {exc}"[:MAX_ERROR]
                tracing.fail(span, exc)
                continue
            if span.is_recording():
                span.set_attribute(tracing.DRA_DEVICES, [d.device for d in prepared.devices])
        for device in prepared.devices:
            entry.devices.append(
                pb.Device(
                    request_names=list(device.requests),
                    pool_name=device.pool,
                    device_name=device.device,
                    cdi_device_ids=list(device.cdi_ids),
                )
            )
    return response


async def _unprepare(
    preparer: Preparer, request: Any, pb: ModuleType, spans: Tracing, context: Context
) -> Any:
    response = pb.NodeUnprepareResourcesResponse()
    service = f"{pb.__name__.split('.')[-2]}.DRAPlugin"
    metadata = context.invocation_metadata() if spans.enabled else None
    for claim in request.claims:
        entry = response.claims[claim.uid]
        attributes = _claim_attributes(preparer, claim)
        with spans.server_span(service, "NodeUnprepareResources", attributes, metadata) as span:
            try:
                await preparer.unprepare(claim.uid)
            except Exception as exc:  # reported per claim; the kubelet retries it
                log.error(
                    "DRA driver %s: cannot unprepare claim %s: %s",
                    preparer.driver,
                    claim.uid,
                    exc,
                )
                entry.error = str(exc)[:MAX_ERROR]
                tracing.fail(span, exc)
    return response


class DraServicer(v1_grpc.DRAPluginServicer):
    """``k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin``."""

    def __init__(self, preparer: Preparer, spans: Tracing | None = None) -> None:
        self.preparer = preparer
        self.spans = spans or Tracing(None)

    async def NodePrepareResources(
        self, request: v1.NodePrepareResourcesRequest, context: Context
    ) -> v1.NodePrepareResourcesResponse:
        result: v1.NodePrepareResourcesResponse = await _prepare(
            self.preparer, request, v1, self.spans, context
        )
        return result

    async def NodeUnprepareResources(
        self, request: v1.NodeUnprepareResourcesRequest, context: Context
    ) -> v1.NodeUnprepareResourcesResponse:
        result: v1.NodeUnprepareResourcesResponse = await _unprepare(
            self.preparer, request, v1, self.spans, context
        )
        return result


class DraBetaServicer(v1beta1_grpc.DRAPluginServicer):
    """``k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin``, for kubelets before 1.34."""

    def __init__(self, preparer: Preparer, spans: Tracing | None = None) -> None:
        self.preparer = preparer
        self.spans = spans or Tracing(None)

    async def NodePrepareResources(
        self, request: v1beta1.NodePrepareResourcesRequest, context: Context
    ) -> v1beta1.NodePrepareResourcesResponse:
        result: v1beta1.NodePrepareResourcesResponse = await _prepare(
            self.preparer, request, v1beta1, self.spans, context
        )
        return result

    async def NodeUnprepareResources(
        self, request: v1beta1.NodeUnprepareResourcesRequest, context: Context
    ) -> v1beta1.NodeUnprepareResourcesResponse:
        result: v1beta1.NodeUnprepareResourcesResponse = await _unprepare(
            self.preparer, request, v1beta1, self.spans, context
        )
        return result
