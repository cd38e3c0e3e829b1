"""A kubelet stand-in: the kubelet's side of the Device Plugin API over real unix sockets.

It serves ``Registration`` on ``kubelet.sock`` with the kubelet's checks (API version,
resource name, endpoint), dials every registered plugin, keeps its ListAndWatch stream
open and records every list, and calls Allocate / GetPreferredAllocation /
PreStartContainer on request. ``restart()`` does what a kubelet restart does: delete every
socket in the directory and serve a new ``kubelet.sock``. ``allocate(..., pod_uid=...)``
records the allocation in the device-manager checkpoint as the kubelet does
(``testing/checkpoint``).

It runs its own event loop in a background thread, so plain synchronous tests use it::

    with KubeletStandIn(plugin_dir) as kubelet:
        kubelet.wait_registered("example.com/widget")
        devices = kubelet.wait_devices("example.com/widget", lambda d: len(d) == 4)
        (container,) = kubelet.allocate("example.com/widget", [["widget-0"]])
        assert container.envs["WIDGET_VISIBLE_DEVICES"] == "widget0"

What it returns is devicehost's own model, never protobuf: device lists are
``{id: devicehost.Device}`` (ID, health, NUMA nodes as the kubelet received them), an
Allocate answer is one ``devicehost.ContainerEdits`` per container, a preferred allocation
is a list of IDs, and a registration is a ``Registration``. The wire messages are
available where a protocol test needs them (``allocate_raw``, ``registrations_raw``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import grpc

from devicehost._proto.deviceplugin.v1beta1 import api_pb2 as pb
from devicehost._proto.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc
from devicehost.model import (
    ContainerEdits,
    Device,
    DeviceNode,
    Health,
    Mount,
    resource_name_problem,
)
from devicehost.testing.checkpoint import CheckpointWriter

if TYPE_CHECKING:
    from devicehost._proto.deviceplugin.v1beta1.api_pb2_grpc import DevicePluginAsyncStub

T = TypeVar("T")
#: A device list as the kubelet received it in one ListAndWatch message, by device ID.
DeviceList = dict[str, Device]
SUPPORTED_VERSIONS = ("v1beta1",)


@dataclass(frozen=True)
class PluginOptions:
    """The options a plugin declared (``GetDevicePluginOptions`` or its registration)."""

    pre_start_required: bool = False
    get_preferred_allocation_available: bool = False


@dataclass(frozen=True)
class Registration:
    """One ``RegisterRequest`` as the kubelet received it."""

    version: str
    endpoint: str
    resource_name: str
    options: PluginOptions


class Allocated(tuple[ContainerEdits, ...]):
    """An Allocate answer: one ``ContainerEdits`` per container request, in order.

    ``container_responses`` is the same tuple, for tests written when the kit returned the
    wire message (``response.container_responses[0].envs`` still reads the same).
    """

    __slots__ = ()

    @property
    def container_responses(self) -> tuple[ContainerEdits, ...]:
        return self


def _device(wire: pb.Device) -> Device:
    health: Any = wire.health
    if health in Health._value2member_map_:
        health = Health(health)
    return Device(id=wire.ID, health=health, numa_nodes=tuple(n.ID for n in wire.topology.nodes))


def _options(wire: pb.DevicePluginOptions) -> PluginOptions:
    return PluginOptions(
        pre_start_required=wire.pre_start_required,
        get_preferred_allocation_available=wire.get_preferred_allocation_available,
    )


def _registration(wire: pb.RegisterRequest) -> Registration:
    return Registration(wire.version, wire.endpoint, wire.resource_name, _options(wire.options))


def container_edits(wire: pb.ContainerAllocateResponse) -> ContainerEdits:
    """A container's Allocate answer as devicehost's model (raises ``ValueError`` naming
    the field when the host sent something the model refuses, such as a relative path)."""
    return ContainerEdits(
        envs=dict(wire.envs),
        mounts=tuple(
            Mount(container_path=m.container_path, host_path=m.host_path, read_only=m.read_only)
            for m in wire.mounts
        ),
        devices=tuple(
            DeviceNode(
                host_path=d.host_path, container_path=d.container_path, permissions=d.permissions
            )
            for d in wire.devices
        ),
        annotations=dict(wire.annotations),
        cdi_devices=tuple(c.name for c in wire.cdi_devices),
    )


@dataclass
class PluginEndpoint:
    """One registered plugin as the stand-in sees it."""

    request: pb.RegisterRequest
    channel: grpc.aio.Channel
    stub: DevicePluginAsyncStub
    lists: list[DeviceList] = field(default_factory=list)
    #: ``time.monotonic()`` when the last list arrived.
    last_list_at: float | None = None
    stream: asyncio.Task[None] | None = None
    stream_error: str | None = None


class KubeletStandIn:
    """The kubelet's Registration service and device-manager client, for tests and demos."""

    def __init__(
        self,
        plugin_dir: Path | str,
        *,
        reject: Mapping[str, str] | None = None,
        start: bool = False,
    ) -> None:
        self.plugin_dir = Path(plugin_dir)
        self.socket_path = self.plugin_dir / "kubelet.sock"
        #: resource name → reason: Register answers with an error, as a kubelet would.
        self.reject: dict[str, str] = dict(reject or {})
        #: Every RegisterRequest received, accepted or not, in order (wire messages; the
        #: ``registrations`` property gives them as ``Registration``).
        self.registrations_raw: list[pb.RegisterRequest] = []
        self.endpoints: dict[str, PluginEndpoint] = {}
        #: resource name → registrations accepted (the endpoint is dialled by then).
        self.accepted: dict[str, int] = {}
        self.restarts = 0
        #: The device-manager checkpoint (``kubelet_internal_checkpoint``) ``allocate``
        #: writes when given a pod UID.
        self.checkpoint = CheckpointWriter(self.plugin_dir)
        #: ``time.perf_counter()`` when kubelet.sock last started answering, and when each
        #: resource was last accepted (benchmarks time restarts with these).
        self.serving_since = 0.0
        self.registered_at: dict[str, float] = {}
        self._cond = threading.Condition()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="kubelet-stand-in", daemon=True
        )
        self._server: grpc.aio.Server | None = None
        self._thread.start()
        if start:
            self.start()

    # -- plumbing ---------------------------------------------------------------------------

    def _run(self, awaitable: Awaitable[T], timeout: float | None = 30.0) -> T:
        """Await ``awaitable`` (a coroutine or a gRPC call) on the stand-in's loop."""

        async def wait() -> T:
            return await awaitable

        return asyncio.run_coroutine_threadsafe(wait(), self._loop).result(timeout)

    def _changed(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def wait_until(
        self,
        predicate: Callable[[], T | bool | None],
        timeout: float = 10.0,
        what: str = "a condition",
        seen: Callable[[], str] | None = None,
    ) -> T:
        """Block until ``predicate()`` (checked on every change the stand-in sees) returns
        something other than None or False, and return it: an empty list counts. A timeout
        says what ``seen()`` reports the stand-in saw last."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                result = predicate()
                if result is not None and result is not False:
                    return result  # type: ignore[return-value]
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    last = f"; {seen()}" if seen is not None else ""
                    raise TimeoutError(
                        f"kubelet stand-in: timed out after {timeout} s waiting for {what}{last}"
                    )
                self._cond.wait(remaining)

    # -- serving ----------------------------------------------------------------------------

    def start(self) -> KubeletStandIn:
        """Serve ``kubelet.sock`` (creating the directory if needed)."""
        self._run(self._start())
        return self

    async def _start(self) -> None:
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)
        server = grpc.aio.server()
        pb_grpc.add_RegistrationServicer_to_server(_Registration(self), server)
        server.add_insecure_port(f"unix:{self.socket_path}")
        await server.start()
        self._server = server
        self.serving_since = time.perf_counter()

    def stop(self) -> None:
        """Stop serving and close every plugin connection (the kubelet went away)."""
        self._run(self._stop())

    async def _stop(self) -> None:
        if self._server is not None:
            await self._server.stop(None)
            self._server = None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)
        for endpoint in list(self.endpoints.values()):
            await self._close_endpoint(endpoint)
        self.endpoints.clear()
        self._changed()

    def restart(self) -> None:
        """Do what a kubelet restart does: forget plugins, delete every socket, serve anew."""
        self._run(self._restart())

    async def _restart(self) -> None:
        await self._stop()
        for entry in self.plugin_dir.iterdir():
            if entry.is_socket() or entry.is_symlink():
                with contextlib.suppress(FileNotFoundError):
                    entry.unlink()
        self.restarts += 1
        await self._start()

    def close(self) -> None:
        """Stop serving and end the background loop."""
        if self._loop.is_closed():
            return
        with contextlib.suppress(Exception):
            self.stop()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    def __enter__(self) -> KubeletStandIn:
        if self._server is None:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plugins ----------------------------------------------------------------------------

    async def _accept(self, request: pb.RegisterRequest) -> None:
        old = self.endpoints.pop(request.resource_name, None)
        if old is not None:
            await self._close_endpoint(old)
        # A channel of its own, as the kubelet has per plugin: never inherit another
        # channel's failed connection to the same path (e.g. a socket just re-created).
        channel = grpc.aio.insecure_channel(
            f"unix://{self.plugin_dir / request.endpoint}",
            options=[("grpc.use_local_subchannel_pool", 1)],
        )
        endpoint = PluginEndpoint(request, channel, pb_grpc.DevicePluginStub(channel))
        self.endpoints[request.resource_name] = endpoint
        endpoint.stream = asyncio.create_task(self._list_and_watch(endpoint))

    async def _list_and_watch(self, endpoint: PluginEndpoint) -> None:
        try:
            async for response in endpoint.stub.ListAndWatch(pb.Empty()):
                listed = {d.ID: _device(d) for d in response.devices}
                with self._cond:
                    endpoint.lists.append(listed)
                    endpoint.last_list_at = time.monotonic()
                    self._cond.notify_all()
        except grpc.aio.AioRpcError as exc:
            endpoint.stream_error = f"{exc.code().name}: {exc.details()}"
        finally:
            self._changed()

    async def _close_endpoint(self, endpoint: PluginEndpoint) -> None:
        if endpoint.stream is not None:
            endpoint.stream.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await endpoint.stream
        await endpoint.channel.close()

    def _call(self, resource: str, method: str, request: Any, timeout: float | None = 30.0) -> Any:
        """Call ``method`` of the plugin serving ``resource``, from any thread: the gRPC call
        is created on the stand-in's own loop."""

        async def call() -> Any:
            return await getattr(self._stub(resource), method)(request, timeout=timeout)

        return self._run(call(), None)

    def _stub(self, resource: str) -> DevicePluginAsyncStub:
        endpoint = self.endpoints.get(resource)
        if endpoint is None:
            raise LookupError(
                f"kubelet stand-in: resource {resource!r} is not registered "
                f"(registered: {sorted(self.endpoints)})"
            )
        return endpoint.stub

    # -- what tests ask -----------------------------------------------------------------------

    def registered(self) -> list[str]:
        """The resource names registered now, sorted."""
        return sorted(self.endpoints)

    @property
    def registrations(self) -> list[Registration]:
        """Every registration request received, accepted or not, in order."""
        with self._cond:
            return [_registration(r) for r in self.registrations_raw]

    def registration_count(self, resource: str) -> int:
        """How many times ``resource`` has been registered, accepted and dialled."""
        with self._cond:
            return self.accepted.get(resource, 0)

    def wait_registered(self, resource: str, timeout: float = 10.0, count: int = 1) -> Registration:
        """Block until ``resource`` has been accepted ``count`` times; return the last request."""

        def done() -> Registration | None:
            if self.registration_count(resource) >= count and resource in self.endpoints:
                return _registration(self.endpoints[resource].request)
            return None

        return self.wait_until(done, timeout, f"registration #{count} of {resource!r}")

    def wait_attempts(self, resource: str, count: int, timeout: float = 10.0) -> None:
        """Block until ``count`` RegisterRequests for ``resource`` arrived (accepted or not)."""
        self.wait_until(
            lambda: (
                sum(r.resource_name == resource for r in self.registrations_raw) >= count or None
            ),
            timeout,
            f"{count} registration attempts of {resource!r}",
        )

    def devices(self, resource: str) -> DeviceList:
        """The latest device list received for ``resource`` (empty before the first)."""
        with self._cond:
            endpoint = self.endpoints.get(resource)
            return dict(endpoint.lists[-1]) if endpoint and endpoint.lists else {}

    def health(self, resource: str) -> dict[str, str]:
        """``{device ID: "Healthy" | "Unhealthy"}`` from the latest list."""
        return {i: str(d.health) for i, d in self.devices(resource).items()}

    def lists(self, resource: str) -> list[DeviceList]:
        """Every list received on the current stream of ``resource``."""
        with self._cond:
            endpoint = self.endpoints.get(resource)
            return list(endpoint.lists) if endpoint else []

    def wait_devices(
        self, resource: str, predicate: Callable[[DeviceList], bool], timeout: float = 10.0
    ) -> DeviceList:
        """Block until the latest list of ``resource`` satisfies ``predicate``; return it."""

        def done() -> DeviceList | None:
            endpoint = self.endpoints.get(resource)
            if endpoint and endpoint.lists and predicate(endpoint.lists[-1]):
                return dict(endpoint.lists[-1])
            return None

        return self.wait_until(
            done,
            timeout,
            f"a device list of {resource!r} matching the predicate",
            seen=lambda: self.last_seen(resource),
        )

    def last_seen(self, resource: str, most: int = 16) -> str:
        """What the stand-in last saw of ``resource``: its last device list with each
        device's health and how long ago it arrived (the first ``most`` devices)."""
        endpoint = self.endpoints.get(resource)
        if endpoint is None:
            return f"{resource!r} is not registered"
        if not endpoint.lists or endpoint.last_list_at is None:
            error = f" (stream: {endpoint.stream_error})" if endpoint.stream_error else ""
            return f"no device list of {resource!r} arrived{error}"
        devices = endpoint.lists[-1]
        shown = ", ".join(f"{i} {d.health}" for i, d in list(devices.items())[:most])
        more = f", and {len(devices) - most} more" if len(devices) > most else ""
        ago = time.monotonic() - endpoint.last_list_at
        return (
            f"the last list of {resource!r} arrived {ago:.1f} s ago with {len(devices)} "
            f"devices: {shown or 'none'}{more}"
        )

    def wait_health(
        self, resource: str, device_id: str, health: str, timeout: float = 10.0
    ) -> DeviceList:
        """Block until ``device_id`` is listed with ``health``; return that whole list."""
        return self.wait_devices(
            resource, lambda d: device_id in d and d[device_id].health == health, timeout
        )

    def options(self, resource: str) -> PluginOptions:
        """Call GetDevicePluginOptions."""
        options = self._call(resource, "GetDevicePluginOptions", pb.Empty())
        return _options(options)

    def allocate(
        self,
        resource: str,
        containers: Sequence[Sequence[str]],
        timeout: float | None = 30.0,
        *,
        pod_uid: str = "",
        container_names: Sequence[str] = (),
    ) -> Allocated:
        """Call Allocate with one container request per list of IDs; return one
        ``ContainerEdits`` per container, in order. A refusal raises ``grpc.RpcError``.

        With ``pod_uid``, the answer is then recorded in the device-manager checkpoint as
        the kubelet records it, for that pod and the containers ``container_names`` (in
        order; ``container-N`` for any not named)."""
        response = self.allocate_raw(resource, containers, timeout)
        if pod_uid:
            devices = self.devices(resource)
            for index, (ids, answer) in enumerate(
                zip(containers, response.container_responses, strict=True)
            ):
                name = container_names[index] if index < len(container_names) else ""
                self.checkpoint.allocated(
                    pod_uid,
                    name or f"container-{index}",
                    resource,
                    devices,
                    ids,
                    answer.SerializeToString(),
                    self._healthy_devices(),
                )
        return Allocated(container_edits(c) for c in response.container_responses)

    def forget_pod(self, pod_uid: str) -> None:
        """Drop a pod's entries from the device-manager checkpoint (the pod is gone)."""
        self.checkpoint.forget(pod_uid, self._healthy_devices())

    def _healthy_devices(self) -> dict[str, list[str]]:
        """``RegisteredDevices`` of the checkpoint: healthy IDs by resource."""
        with self._cond:
            names = list(self.endpoints)
        return {name: [i for i, d in self.devices(name).items() if d.healthy] for name in names}

    def allocate_raw(
        self, resource: str, containers: Sequence[Sequence[str]], timeout: float | None = 30.0
    ) -> pb.AllocateResponse:
        """``allocate`` returning the wire message, for tests of the protocol itself."""
        request = pb.AllocateRequest(
            container_requests=[
                pb.ContainerAllocateRequest(devices_ids=list(ids)) for ids in containers
            ]
        )
        response: pb.AllocateResponse = self._call(resource, "Allocate", request, timeout)
        return response

    def preferred_allocation(
        self,
        resource: str,
        available: Sequence[str],
        must_include: Sequence[str] = (),
        size: int = 1,
    ) -> list[str]:
        """Call GetPreferredAllocation for one container; return the chosen IDs in the
        plugin's order. An error raises ``grpc.RpcError`` (and would fail a pod)."""
        request = pb.PreferredAllocationRequest(
            container_requests=[
                pb.ContainerPreferredAllocationRequest(
                    available_deviceIDs=list(available),
                    must_include_deviceIDs=list(must_include),
                    allocation_size=size,
                )
            ]
        )
        response = self._call(resource, "GetPreferredAllocation", request)
        return list(response.container_responses[0].deviceIDs)

    def pre_start(self, resource: str, device_ids: Sequence[str]) -> None:
        """Call PreStartContainer; an error raises ``grpc.RpcError``."""
        self._call(
            resource, "PreStartContainer", pb.PreStartContainerRequest(devices_ids=list(device_ids))
        )


class _Registration(pb_grpc.RegistrationServicer):
    """The kubelet's Registration service, with the checks the kubelet makes."""

    def __init__(self, kubelet: KubeletStandIn) -> None:
        self.kubelet = kubelet

    async def Register(
        self, request: pb.RegisterRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.Empty:
        kubelet = self.kubelet
        with kubelet._cond:
            kubelet.registrations_raw.append(request)
            kubelet._cond.notify_all()
        problem = None
        if request.version not in SUPPORTED_VERSIONS:
            problem = (
                f"requested device plugin API version {request.version!r} is not "
                f"supported by the kubelet; supported: {', '.join(SUPPORTED_VERSIONS)}"
            )
        elif resource_name_problem(request.resource_name):
            problem = f"invalid name of device plugin socket: {request.resource_name!r}"
        elif not request.endpoint or "/" in request.endpoint:
            problem = f"invalid endpoint {request.endpoint!r}: expected a socket file name"
        elif request.resource_name in kubelet.reject:
            problem = kubelet.reject[request.resource_name]
        if problem:
            await context.abort(grpc.StatusCode.UNKNOWN, problem)
        kubelet.registered_at[request.resource_name] = time.perf_counter()
        await kubelet._accept(request)
        with kubelet._cond:
            name = request.resource_name
            kubelet.accepted[name] = kubelet.accepted.get(name, 0) + 1
            kubelet._cond.notify_all()
        return pb.Empty()
