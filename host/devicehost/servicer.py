"""The DevicePlugin gRPC service for one resource, answering the kubelet from the driver.

Requests are checked before the driver sees them (unknown IDs, unhealthy devices,
impossible sizes), and the driver's answers are checked before the kubelet sees them.
Every refusal is a gRPC status with a message naming the resource and the device.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any

import grpc

from devicehost._proto.deviceplugin.v1beta1 import api_pb2 as pb
from devicehost._proto.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc
from devicehost.allocator import preferred_allocation
from devicehost.errors import DriverError, DriverTimeout
from devicehost.model import Allocation
from devicehost.plugins import Driver
from devicehost.state import ResourceState

log = logging.getLogger(__name__)


class Refusal(Exception):
    """A request the host answers with a gRPC status instead of a response."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def allocation_to_pb(allocation: Allocation) -> pb.ContainerAllocateResponse:
    return pb.ContainerAllocateResponse(
        envs=allocation.envs,
        annotations=allocation.annotations,
        mounts=[
            pb.Mount(container_path=m.container_path, host_path=m.host_path, read_only=m.read_only)
            for m in allocation.mounts
        ],
        devices=[
            pb.DeviceSpec(
                container_path=d.container_path, host_path=d.host_path, permissions=d.permissions
            )
            for d in allocation.devices
        ],
        cdi_devices=[pb.CDIDevice(name=n) for n in allocation.cdi_devices],
    )


def driver_refusal(exc: DriverError) -> Refusal:
    code = (
        grpc.StatusCode.DEADLINE_EXCEEDED
        if isinstance(exc, DriverTimeout)
        else grpc.StatusCode.INTERNAL
    )
    return Refusal(code, str(exc))


class DevicePluginServicer(pb_grpc.DevicePluginServicer):
    """Serves one resource of one driver."""

    def __init__(self, resource: str, driver: Driver, state: ResourceState, timeout: float) -> None:
        self.resource = resource
        self.driver = driver
        self.state = state
        self.timeout = timeout
        self.options = pb.DevicePluginOptions(
            pre_start_required=driver.implements("devicehost_pre_start"),
            get_preferred_allocation_available=True,
        )
        self._list: tuple[int, pb.ListAndWatchResponse] | None = None

    # -- helpers ---------------------------------------------------------------------------

    def _device_list(self) -> pb.ListAndWatchResponse:
        """The current list as a message, built once per state version for every stream."""
        version = self.state.version
        if self._list is None or self._list[0] != version:
            devices = [
                pb.Device(
                    ID=d.id,
                    health=str(d.health),
                    topology=pb.TopologyInfo(nodes=[pb.NUMANode(ID=n) for n in d.numa_nodes])
                    if d.numa_nodes
                    else None,
                )
                for d in self.state.devices.values()
            ]
            self._list = (version, pb.ListAndWatchResponse(devices=devices))
        return self._list[1]

    def check_known(self, device_ids: Sequence[str], *, healthy: bool) -> None:
        """Refuse empty, duplicate, unknown and (when ``healthy``) unhealthy device IDs."""
        if not device_ids:
            raise Refusal(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"resource {self.resource!r}: the request names no device",
            )
        if len(set(device_ids)) != len(device_ids):
            raise Refusal(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"resource {self.resource!r}: a device ID is named twice in {list(device_ids)!r}",
            )
        devices = self.state.devices
        for device_id in device_ids:
            device = devices.get(device_id)
            if device is None:
                raise Refusal(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"unknown device ID {device_id!r} for resource {self.resource!r}",
                )
            if healthy and not device.healthy:
                raise Refusal(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"device {device_id!r} of resource {self.resource!r} is Unhealthy",
                )

    async def call_driver(self, hook: str, **kwargs: Any) -> Any:
        try:
            return await self.driver.acall(hook, self.timeout, resource=self.resource, **kwargs)
        except DriverError as exc:
            log.error("%s (resource %r)", exc, self.resource)
            raise driver_refusal(exc) from exc

    # -- answers, independent of gRPC (so they can be traced and benchmarked) --------------

    async def allocate_one(self, device_ids: Sequence[str]) -> pb.ContainerAllocateResponse:
        self.check_known(device_ids, healthy=True)
        allocation = await self.call_driver("devicehost_allocate", device_ids=list(device_ids))
        if not isinstance(allocation, Allocation):
            raise driver_refusal(
                DriverError(
                    self.driver.name,
                    "devicehost_allocate",
                    f"returned {type(allocation).__name__}, expected Allocation",
                )
            )
        return allocation_to_pb(allocation)

    async def prefer_one(self, request: pb.ContainerPreferredAllocationRequest) -> list[str]:
        available = list(dict.fromkeys(request.available_deviceIDs))
        must = list(dict.fromkeys(request.must_include_deviceIDs))
        size = request.allocation_size
        where = f"resource {self.resource!r}"
        if size <= 0 or size > len(available):
            raise Refusal(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"{where}: cannot choose {size} of {len(available)} available devices",
            )
        missing = [i for i in must if i not in set(available)]
        if missing or len(must) > size:
            raise Refusal(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"{where}: must-include devices {must!r} are not all available, or "
                f"more than the {size} requested",
            )
        self.check_known(available, healthy=False)
        if self.driver.implements("devicehost_preferred_allocation"):
            try:
                chosen = await self.driver.acall(
                    "devicehost_preferred_allocation",
                    self.timeout,
                    resource=self.resource,
                    available=available,
                    must_include=must,
                    size=size,
                )
            except DriverError as exc:
                log.error("%s; using the host's default choice for %s", exc, where)
                chosen = None
            if chosen is not None:
                chosen = list(chosen)
                if (
                    len(chosen) == size
                    and len(set(chosen)) == size
                    and set(chosen) <= set(available)
                    and set(must) <= set(chosen)
                ):
                    return chosen
                log.error(
                    "driver %r, hook devicehost_preferred_allocation: returned %r, not %d "
                    "distinct available IDs with %r; using the host's default for %s",
                    self.driver.name,
                    chosen,
                    size,
                    must,
                    where,
                )
        return preferred_allocation(self.state.devices, available, must, size)

    async def pre_start(self, device_ids: Sequence[str]) -> None:
        self.check_known(device_ids, healthy=False)
        if self.driver.implements("devicehost_pre_start"):
            await self.call_driver("devicehost_pre_start", device_ids=list(device_ids))

    # -- gRPC ------------------------------------------------------------------------------

    async def GetDevicePluginOptions(
        self, request: pb.Empty, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.DevicePluginOptions:
        return self.options

    async def ListAndWatch(
        self, request: pb.Empty, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[pb.ListAndWatchResponse]:
        version = -1
        while not self.state.closed:
            if version != self.state.version:
                version = self.state.version
                yield self._device_list()
            await self.state.wait_newer(version)

    async def Allocate(
        self, request: pb.AllocateRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.AllocateResponse:
        try:
            responses = [
                await self.allocate_one(list(c.devices_ids)) for c in request.container_requests
            ]
        except Refusal as refusal:
            await context.abort(refusal.code, refusal.message)
        return pb.AllocateResponse(container_responses=responses)

    async def GetPreferredAllocation(
        self, request: pb.PreferredAllocationRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.PreferredAllocationResponse:
        try:
            answers = [
                pb.ContainerPreferredAllocationResponse(deviceIDs=await self.prefer_one(c))
                for c in request.container_requests
            ]
        except Refusal as refusal:
            await context.abort(refusal.code, refusal.message)
        return pb.PreferredAllocationResponse(container_responses=answers)

    async def PreStartContainer(
        self, request: pb.PreStartContainerRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.PreStartContainerResponse:
        try:
            await self.pre_start(list(request.devices_ids))
        except Refusal as refusal:
            await context.abort(refusal.code, refusal.message)
        return pb.PreStartContainerResponse()
