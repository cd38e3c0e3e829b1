"""The kubelet's DRA gRPC service (``v1`` and ``v1beta1``), answered by a ``Preparer``.

Both versions carry the same messages (``v1`` adds ``Device.share_id``, unused here), so
one servicer serves both, building each answer with its own version's types. A claim
that cannot be prepared gets its error in its own entry of the answer; the others are
prepared as usual (the kubelet retries the failed ones).
"""

from __future__ import annotations

import logging
from types import ModuleType
from typing import Any

import grpc

from devicehost._proto.dra.v1 import api_pb2 as v1
from devicehost._proto.dra.v1 import api_pb2_grpc as v1_grpc
from devicehost._proto.dra.v1beta1 import api_pb2 as v1beta1
from devicehost._proto.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from devicehost.kubelet.dra.prepare import PrepareError, Preparer

log = logging.getLogger(__name__)

Context = grpc.aio.ServicerContext[Any, Any]
#: The kubelet shows the message to users (pod events): keep it readable.
MAX_ERROR = 1024


async def _prepare(preparer: Preparer, request: Any, pb: ModuleType) -> Any:
    response = pb.NodePrepareResourcesResponse()
    for claim in request.claims:
        entry = response.claims[claim.uid]
        try:
            prepared = await preparer.prepare(claim.namespace, claim.name, claim.uid)
        except PrepareError as exc:
            log.error("DRA driver %s: %s", preparer.driver, exc)
            entry.error = str(exc)[:MAX_ERROR]
            continue
        except Exception as exc:  # a bug here fails this claim, never the others
            log.exception("DRA driver %s: preparing claim %s failed", preparer.driver, claim.uid)
            entry.error = f"internal error: {type(exc).__name__}: {exc}"[:MAX_ERROR]
            continue
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


async def _unprepare(preparer: Preparer, request: Any, pb: ModuleType) -> Any:
    response = pb.NodeUnprepareResourcesResponse()
    for claim in request.claims:
        entry = response.claims[claim.uid]
        try:
            await preparer.unprepare(claim.uid)
        except Exception as exc:  # reported per claim; the kubelet retries it
            log.error(
                "DRA driver %s: cannot unprepare claim %s: %s", preparer.driver, claim.uid, exc
            )
            entry.error = str(exc)[:MAX_ERROR]
    return response


class DraServicer(v1_grpc.DRAPluginServicer):
    """``k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin``."""

    def __init__(self, preparer: Preparer) -> None:
        self.preparer = preparer

    async def NodePrepareResources(
        self, request: v1.NodePrepareResourcesRequest, context: Context
    ) -> v1.NodePrepareResourcesResponse:
        result: v1.NodePrepareResourcesResponse = await _prepare(self.preparer, request, v1)
        return result

    async def NodeUnprepareResources(
        self, request: v1.NodeUnprepareResourcesRequest, context: Context
    ) -> v1.NodeUnprepareResourcesResponse:
        result: v1.NodeUnprepareResourcesResponse = await _unprepare(self.preparer, request, v1)
        return result


class DraBetaServicer(v1beta1_grpc.DRAPluginServicer):
    """``k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin``, for kubelets before 1.34."""

    def __init__(self, preparer: Preparer) -> None:
        self.preparer = preparer

    async def NodePrepareResources(
        self, request: v1beta1.NodePrepareResourcesRequest, context: Context
    ) -> v1beta1.NodePrepareResourcesResponse:
        result: v1beta1.NodePrepareResourcesResponse = await _prepare(
            self.preparer, request, v1beta1
        )
        return result

    async def NodeUnprepareResources(
        self, request: v1beta1.NodeUnprepareResourcesRequest, context: Context
    ) -> v1beta1.NodeUnprepareResourcesResponse:
        result: v1beta1.NodeUnprepareResourcesResponse = await _unprepare(
            self.preparer, request, v1beta1
        )
        return result
