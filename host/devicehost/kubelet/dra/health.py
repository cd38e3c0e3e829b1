"""Device health to the kubelet: the DRA health service (k8s.io/kubelet v0.37.2
``pkg/apis/dra-health/v1``, ``DRAResourceHealth.NodeWatchResources``), and the same under
``v1alpha1`` for the kubelets before 1.37, which know only that one.

The kubelet opens one stream per DRA driver and keeps, per device, the last health it was
sent; a device it hears nothing of for its timeout (30 s by default) becomes Unknown, and
a pod's ``status.containerStatuses[].allocatedResourcesStatus`` shows what its claim's
devices are now (KEP-4680). So each answer is the driver's whole pool — every device,
Healthy or Unhealthy, from the same snapshots the ResourceSlices are built from — sent at
once, again whenever a snapshot changes, and at least every ``RESEND_SECONDS`` while
nothing does.

Both versions are registered and advertised; a kubelet picks the newest it knows
(Kubernetes v1.37.2 ``pkg/kubelet/cm/dra/plugin``, ``pickHealthService``, which keeps
``v1alpha1`` through 1.39). Their messages are the same fields under two package names, so
an alpha answer is the v1 answer's bytes read as the alpha message.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc

from devicehost._proto.dra_health.v1 import api_pb2 as pb
from devicehost._proto.dra_health.v1 import api_pb2_grpc as pb_grpc
from devicehost._proto.dra_health.v1alpha1 import api_pb2 as alpha_pb
from devicehost._proto.dra_health.v1alpha1 import api_pb2_grpc as alpha_grpc
from devicehost.kubelet.dra.prepare import PoolView

#: Well inside the kubelet's default health timeout (30 s), so no device goes Unknown
#: between two answers on a busy node.
RESEND_SECONDS = 10.0
#: The gRPC service the registration names, so a kubelet knows to open the stream.
SERVICE = "v1.DRAResourceHealth"
#: The same service as kubelets 1.31 to 1.36 call it.
ALPHA_SERVICE = "v1alpha1.DRAResourceHealth"
#: Both, newest first, as the registration advertises them.
SERVICES = (SERVICE, ALPHA_SERVICE)

Context = grpc.aio.ServicerContext[Any, Any]


class Changes:
    """A counter a change bumps, and a way to wait for the next one (many waiters)."""

    def __init__(self) -> None:
        self.version = 0
        self._event = asyncio.Event()

    def bump(self) -> None:
        self.version += 1
        self._event.set()
        self._event = asyncio.Event()

    async def wait_newer(self, version: int, timeout: float) -> None:
        """Return once ``version`` is old, or after ``timeout`` seconds."""
        event = self._event
        if self.version != version:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout)


def health_answer(view: PoolView) -> pb.NodeWatchResourcesResponse:
    """Every device of the pool with its health now."""
    now = int(time.time())
    answer = pb.NodeWatchResourcesResponse()
    for name, (resource, device_id) in sorted(view.names.items()):
        device = view.snapshots[resource].get(device_id)
        if device is None:
            continue
        answer.devices.append(
            pb.DeviceHealth(
                device=pb.DeviceIdentifier(pool_name=view.pool, device_name=name),
                health=pb.HEALTHY if device.healthy else pb.UNHEALTHY,
                last_updated_time=now,
                message="" if device.healthy else f"{resource} {device_id} is Unhealthy",
            )
        )
    return answer


class HealthServicer(pb_grpc.DRAResourceHealthServicer):
    """``v1.DRAResourceHealth`` for one DRA driver."""

    def __init__(
        self,
        pool: Callable[[], PoolView],
        changes: Changes,
        resend: float = RESEND_SECONDS,
    ) -> None:
        self.pool = pool
        self.changes = changes
        self.resend = resend

    async def NodeWatchResources(
        self, request: pb.NodeWatchResourcesRequest, context: Context
    ) -> AsyncIterator[pb.NodeWatchResourcesResponse]:
        while True:
            version = self.changes.version
            yield health_answer(self.pool())
            await self.changes.wait_newer(version, self.resend)


class AlphaHealthServicer(alpha_grpc.DRAResourceHealthServicer):
    """``v1alpha1.DRAResourceHealth``: the v1 stream of ``health``, each answer re-read as
    the alpha message (the same fields and numbers)."""

    def __init__(self, health: HealthServicer) -> None:
        self.health = health

    async def NodeWatchResources(
        self, request: alpha_pb.NodeWatchResourcesRequest, context: Context
    ) -> AsyncIterator[alpha_pb.NodeWatchResourcesResponse]:
        async for answer in self.health.NodeWatchResources(pb.NodeWatchResourcesRequest(), context):
            yield alpha_pb.NodeWatchResourcesResponse.FromString(answer.SerializeToString())
