"""The DevicePlugin gRPC service for one resource, answering the kubelet from the driver.

Requests are checked before the driver sees them (unknown IDs, unhealthy devices,
impossible sizes), and the driver's answers are checked before the kubelet sees them.
Every refusal is a gRPC status with a message naming the resource and the device. Every
request runs in a span (``Telemetry``), with one child span per driver hook it calls.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import grpc

from devicehost._proto.deviceplugin.v1beta1 import api_pb2 as pb
from devicehost._proto.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc
from devicehost.drivers.snapshots import ResourceState
from devicehost.drivers.validation import Invalid, allocation_from_plain
from devicehost.edits.compose import CompositionClash, PolicyChain, compose
from devicehost.errors import DriverError, DriverTimeout, RequestRefused, UnknownDevice
from devicehost.kubelet.deviceplugin.preferred import numa_map, preferred_allocation
from devicehost.model import NO_EDITS, Allocation, Device, ResourceSpec
from devicehost.system.pacing import in_slices
from devicehost.telemetry import tracing
from devicehost.telemetry.facade import Telemetry
from devicehost.telemetry.tracing import fail

if TYPE_CHECKING:
    from opentelemetry.trace import Span

    from devicehost.edits.cdi import CdiWriter

log = logging.getLogger(__name__)


class DriverCalls(Protocol):
    """What the servicer needs of a driver: its name, its hooks, and calls into it."""

    name: str

    def implements(self, hook: str) -> bool: ...

    async def acall(self, hook: str, timeout: float, **kwargs: Any) -> Any: ...


T = TypeVar("T")
Context = grpc.aio.ServicerContext[Any, Any]


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


def _encode(device: Device) -> bytes:
    """One device as the bytes of a one-device ListAndWatchResponse; repeated fields
    concatenate, so joining these gives the whole list."""
    topology = pb.TopologyInfo(nodes=[pb.NUMANode(ID=n) for n in device.numa_nodes])
    entry = pb.Device(
        ID=device.id, health=str(device.health), topology=topology if device.numa_nodes else None
    )
    return pb.ListAndWatchResponse(devices=[entry]).SerializeToString()


MAX_MESSAGE = 1000

#: The kubelet reads a plugin's answers with gRPC-go's default client receive limit
#: (``defaultClientMaxReceiveMessageSize = 1024 * 1024 * 4`` in grpc-go's dialoptions.go;
#: the kubelet's device-plugin client sets no other). A larger answer is refused here, with
#: the resource and the size, rather than sent to fail as RESOURCE_EXHAUSTED in the kubelet.
KUBELET_MAX_RECEIVE_BYTES = 4 * 1024 * 1024


def oversized(resource: str, driver: str, size: int) -> Refusal | None:
    """The refusal of an Allocate answer of ``size`` bytes, when the kubelet cannot read it."""
    if size <= KUBELET_MAX_RECEIVE_BYTES:
        return None
    return Refusal(
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        f"resource {resource!r} (driver {driver!r}): the Allocate answer is {size} bytes, over "
        f"the kubelet's {KUBELET_MAX_RECEIVE_BYTES}-byte receive limit; not sent",
    )


def driver_refusal(exc: DriverError) -> Refusal:
    timed_out = isinstance(exc, DriverTimeout)
    code = grpc.StatusCode.DEADLINE_EXCEEDED if timed_out else grpc.StatusCode.INTERNAL
    message = str(exc)
    if len(message) > MAX_MESSAGE:
        message = message[: MAX_MESSAGE - 1] + "…"
    return Refusal(code, message)


def shorten_id(device_id: str, limit: int = 80) -> str:
    """An ID quoted for a message, cut short: refusals must stay small for any request."""
    text = repr(device_id)
    return text if len(text) <= limit else text[: limit - 4] + "…'"


def shorten(ids: Any, limit: int = 5) -> str:
    """A list of IDs quoted for a message: the first few, then how many in all."""
    try:
        items = list(ids)
    except TypeError:
        return shorten_id(repr(ids))
    shown = ", ".join(shorten_id(str(i)) for i in items[:limit])
    return f"[{shown}]" if len(items) <= limit else f"[{shown}, … {len(items)} in all]"


def _result(code: grpc.StatusCode | None) -> str:
    """The ``result`` label of a refused request: the gRPC code in lower case."""
    return code.name.lower() if isinstance(code, grpc.StatusCode) else "error"


class DevicePluginServicer(pb_grpc.DevicePluginServicer):
    """Serves one resource of one driver."""

    def __init__(
        self,
        spec: ResourceSpec,
        driver: DriverCalls,
        state: ResourceState,
        timeout: float,
        telemetry: Telemetry | None = None,
        policies: PolicyChain | None = None,
        cdi: CdiWriter | None = None,
        tree: Path | None = None,
        allowed_edits: frozenset[str] = frozenset(),
    ) -> None:
        """``tree``: the driver's simulated tree, where its ``allocate`` answers' host
        paths are moved (``simulated_paths``); None on a real node."""
        self.spec = spec
        self.tree = tree
        self.allowed_edits = allowed_edits
        self.cdi = cdi
        self.resource = spec.name
        self.driver = driver
        self.state = state
        self.timeout = timeout
        self.telemetry = telemetry or Telemetry()
        self.policies = policies
        self.tracing = self.telemetry.tracing
        self.options = pb.DevicePluginOptions(
            pre_start_required=driver.implements("devicehost_pre_start"),
            get_preferred_allocation_available=True,
        )
        self._list: tuple[int, pb.ListAndWatchResponse] | None = None
        self._encoded: dict[Device, bytes] = {}
        self._numa: tuple[int, dict[str, int]] | None = None
        #: One device's whole answer, per snapshot: what a container needs from a device is
        #: a fixed property of the snapshot, like its ListAndWatch entry. Keyed by the
        #: snapshot's device mapping itself, which is replaced on any change — edits alone
        #: included, which do not bump the version streams wait on.
        metrics = self.telemetry.metrics
        self._allocate_seconds = metrics.allocate_duration.series(resource=self.resource)
        self._allocated_ok = metrics.allocations.series(resource=self.resource, result="ok")
        self._answers: tuple[
            object, dict[str, pb.ContainerAllocateResponse], dict[str, pb.AllocateResponse]
        ] = (None, {}, {})

    # -- helpers ---------------------------------------------------------------------------

    async def _device_list(self) -> pb.ListAndWatchResponse:
        """The current list as a message, built once per state version for every stream.

        Each device's wire bytes are cached while the device is unchanged, so a change to one
        device of thousands costs one encoding and a parse of the joined bytes, not thousands
        of message constructions; the devices are looked up and encoded ``in_slices`` (10 000
        of them take ~35 ms: in one go, a stall of every other RPC).
        """
        version = self.state.version
        if self._list is None or self._list[0] != version:
            cache, encoded = self._encoded, {}

            def encode(device: Device) -> None:
                encoded[device] = cache.get(device) or _encode(device)

            await in_slices(list(self.state.devices.values()), encode)
            message = pb.ListAndWatchResponse.FromString(b"".join(encoded.values()))
            if self._list is None or self._list[0] < version:
                self._encoded, self._list = encoded, (version, message)
            return message
        return self._list[1]

    def _numa_map(self) -> dict[str, int]:
        """Device → NUMA node for the current snapshot, built once per version."""
        if self._numa is None or self._numa[0] != self.state.version:
            self._numa = (self.state.version, numa_map(self.state.devices.values()))
        return self._numa[1]

    def check_known(self, device_ids: Sequence[str], *, healthy: bool) -> None:
        """Refuse empty, duplicate, unknown and (when ``healthy``) unhealthy device IDs."""
        where = f"resource {self.resource!r}"
        if not device_ids:
            raise Refusal(grpc.StatusCode.INVALID_ARGUMENT, f"{where}: the request names no device")
        if len(set(device_ids)) != len(device_ids):
            raise Refusal(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"{where}: a device ID is named twice in {shorten(device_ids)}",
            )
        devices = self.state.devices
        for device_id in device_ids:
            device = devices.get(device_id)
            if device is None:
                raise Refusal(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"unknown device ID {shorten_id(device_id)} for {where}",
                )
            if healthy and not device.healthy:
                raise Refusal(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"device {shorten_id(device_id)} of {where} is Unhealthy",
                )

    def check_not_shared(self, containers: Sequence[Sequence[str]]) -> None:
        """Refuse a device named in two containers of one request: each container gets its
        devices for itself, so one device cannot go to two of them."""
        owner: dict[str, int] = {}
        for index, ids in enumerate(containers):
            for device_id in dict.fromkeys(ids):
                first = owner.setdefault(device_id, index)
                if first != index:
                    raise Refusal(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        f"resource {self.resource!r}: device {shorten_id(device_id)} is named "
                        f"in containers {first} and {index} of one Allocate",
                    )

    async def call_driver(
        self, hook: str, span_attributes: dict[str, Any] | None = None, **kwargs: Any
    ) -> Any:
        """Call the driver's ``hook`` in a child span; a failure becomes a ``Refusal``."""
        attributes = {tracing.DRIVER: self.driver.name, **(span_attributes or {})}
        with self.tracing.child_span(hook, **attributes):
            try:
                return await self.driver.acall(hook, self.timeout, resource=self.resource, **kwargs)
            except DriverError as exc:
                self.telemetry.driver_error(self.driver.name, hook)
                log.error("%s (resource %r)", exc, self.resource)
                raise driver_refusal(exc) from exc
            except RequestRefused as exc:  # the request broke a hardware rule: not a fault
                message = f"driver {self.driver.name!r}, resource {self.resource!r}: {exc}"
                log.warning("%s", message)
                raise Refusal(grpc.StatusCode.FAILED_PRECONDITION, message[:MAX_MESSAGE]) from exc
            except UnknownDevice as exc:  # gone since the snapshot the host checked against
                message = f"driver {self.driver.name!r}: {exc}"
                log.warning("%s", message)
                raise Refusal(grpc.StatusCode.INVALID_ARGUMENT, message[:MAX_MESSAGE]) from exc

    # -- answers, independent of gRPC (so they can be benchmarked and fuzzed) --------------

    async def allocate_one(
        self, device_ids: Sequence[str], index: int = 0
    ) -> pb.ContainerAllocateResponse:
        """Compose one container's answer from the snapshot; call the driver only when it
        implements ``allocate`` (work that must happen at allocation time)."""
        self.check_known(device_ids, healthy=True)
        if len(device_ids) == 1 and self._answer_is_fixed():
            return self._one_device_answer(device_ids[0])
        extra = NO_EDITS
        if self.driver.implements("devicehost_allocate"):
            extra = await self._driver_allocation(device_ids, index)
        return self._compose(device_ids, extra)

    def _answer_is_fixed(self) -> bool:
        """True when a device's answer depends on the snapshot alone: no driver call, no
        policy and no CDI spec in between."""
        return (
            self.cdi is None
            and not (self.policies is not None and self.policies.active)
            and not self.driver.implements("devicehost_allocate")
        )

    def _snapshot_answers(
        self,
    ) -> tuple[dict[str, pb.ContainerAllocateResponse], dict[str, pb.AllocateResponse]]:
        """This snapshot's cached one-device answers: a container's, and a whole Allocate's."""
        snapshot, answers, wholes = self._answers
        if snapshot is not self.state.devices:
            answers, wholes = {}, {}
            self._answers = (self.state.devices, answers, wholes)
        return answers, wholes

    def _one_device_answer(self, device_id: str) -> pb.ContainerAllocateResponse:
        """A single device's answer, composed once per snapshot (as ListAndWatch caches each
        device's bytes)."""
        answers, _ = self._snapshot_answers()
        answer = answers.get(device_id)
        if answer is None:
            answer = answers[device_id] = self._compose([device_id], NO_EDITS)
        return answer

    def _whole_answer(self, request: pb.AllocateRequest) -> pb.AllocateResponse | None:
        """The whole answer to the commonest Allocate — one container, one known healthy
        device, an answer the snapshot alone decides — composed once per snapshot; None for
        any other request, which takes the general path with its checks and refusals."""
        containers = request.container_requests
        if len(containers) != 1:
            return None
        ids = containers[0].devices_ids
        if len(ids) != 1 or not self._answer_is_fixed():
            return None
        device = self.state.devices.get(ids[0])
        if device is None or not device.healthy:
            return None
        _, wholes = self._snapshot_answers()
        whole = wholes.get(device.id)
        if whole is None:
            try:
                one = self._one_device_answer(device.id)
            except Refusal:  # the general path refuses it, with its span and metrics
                return None
            whole = pb.AllocateResponse(container_responses=[one])
            if oversized(self.resource, self.driver.name, whole.ByteSize()) is not None:
                return None  # the general path refuses it, with its span and metrics
            wholes[device.id] = whole
        return whole

    def _compose(
        self, device_ids: Sequence[str], extra: Allocation
    ) -> pb.ContainerAllocateResponse:
        try:
            edits = compose(self.spec, self.state.devices, device_ids, extra)
            if self.policies is not None:
                edits = self.policies.apply(self.resource, list(device_ids), edits)
        except CompositionClash as clash:
            self.telemetry.driver_error(self.driver.name, "devicehost_allocate")
            message = f"driver {self.driver.name!r}, resource {self.resource!r}: {clash}"
            log.error("%s", message)
            raise Refusal(grpc.StatusCode.INTERNAL, message[:MAX_MESSAGE]) from clash
        if self.cdi is not None:  # the runtime applies the declared edits from the spec
            from devicehost.edits.cdi import CdiUnavailable  # CDI is off unless configured

            try:
                edits = self.cdi.allocation(self.spec, self.state.devices, device_ids, edits)
            except CdiUnavailable as exc:
                raise Refusal(grpc.StatusCode.UNAVAILABLE, str(exc)[:MAX_MESSAGE]) from exc
        return allocation_to_pb(edits)

    async def _driver_allocation(self, device_ids: Sequence[str], index: int) -> Allocation:
        """The driver's allocation-time edits, rebuilt and checked like any driver answer."""
        answer = await self.call_driver(
            "devicehost_allocate",
            device_ids=list(device_ids),
            span_attributes={tracing.CONTAINER_INDEX: index, tracing.REQUESTED: list(device_ids)},
        )
        try:
            return allocation_from_plain(answer, self.allowed_edits, self.tree)
        except Invalid as exc:
            self.telemetry.driver_error(self.driver.name, "devicehost_allocate")
            error = DriverError(
                self.driver.name, "devicehost_allocate", f"returned an invalid Allocation: {exc}"
            )
            log.error("%s (resource %r)", error, self.resource)
            raise driver_refusal(error) from None

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
        if not set(must) <= set(available) or len(must) > size:
            raise Refusal(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"{where}: must-include devices {shorten(must)} are not all available, or "
                f"more than the {size} requested",
            )
        known = self.state.devices
        unknown = [d for d in available if d not in known]
        if unknown:
            # The kubelet's list can be older than our snapshot. A failed preference fails
            # the pod's admission (kubelet devicemanager, devicesToAllocate), while any
            # answer is only intersected with what it may grant: drop the unknown IDs, and
            # answer no preference when too few are left.
            log.warning(
                "%s: GetPreferredAllocation names %s, unknown to the current device list; "
                "choosing without them",
                where,
                shorten(unknown),
            )
            available = [d for d in available if d in known]
            must = [d for d in must if d in known]
            if size > len(available):
                return []
        if self.driver.implements("devicehost_preferred_allocation"):
            chosen = await self._driver_choice(available, must, size)
            if chosen is not None:
                return chosen
        return preferred_allocation(self._numa_map(), available, must, size)

    async def _driver_choice(
        self, available: list[str], must: list[str], size: int
    ) -> list[str] | None:
        """The driver's preference when valid; None (with a log line) means "use ours"."""
        hook = "devicehost_preferred_allocation"
        try:
            answer = await self.call_driver(
                hook,
                available=available,
                must_include=must,
                size=size,
                span_attributes={tracing.REQUESTED: must},
            )
        except Refusal as refusal:
            log.error("%s; using the host's default choice", refusal.message)
            return None
        if answer is None:
            return None
        try:
            chosen = list(answer)
            valid = (
                len(chosen) == size == len(set(chosen))
                and set(chosen) <= set(available)
                and set(must) <= set(chosen)
            )
        except TypeError:  # not iterable, or unhashable elements
            chosen, valid = answer, False
        if valid:
            return chosen
        self.telemetry.driver_error(self.driver.name, hook)
        log.error(
            "driver %r, hook %s: returned %s, not %d distinct available IDs including %s; "
            "using the host's default choice for resource %r",
            self.driver.name,
            hook,
            shorten(chosen),
            size,
            shorten(must),
            self.resource,
        )
        return None

    async def pre_start(self, device_ids: Sequence[str]) -> None:
        self.check_known(device_ids, healthy=False)
        if self.driver.implements("devicehost_pre_start"):
            await self.call_driver("devicehost_pre_start", device_ids=list(device_ids))

    # -- gRPC ------------------------------------------------------------------------------

    async def _answer(
        self,
        method: str,
        context: Context,
        answer: Callable[[Span], Awaitable[T]],
        attributes: dict[str, Any] | None = None,
    ) -> T:
        """Run one request in its span: the gRPC status on the span, a refusal as a status to
        the kubelet, an unexpected error as INTERNAL (never a dropped call). ``attributes``
        known up front are given at the span's start: one validation pass in the SDK."""
        tracer = self.tracing
        metadata = context.invocation_metadata() if tracer.enabled else None
        with tracer.rpc_span(method, self.resource, self.driver, metadata, attributes) as span:
            try:
                result = await answer(span)
            except Refusal as refused:
                refusal = refused
                fail(span, refused, refused.message)
            except Exception as exc:
                log.exception("resource %r: %s failed", self.resource, method)
                refusal = Refusal(grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}")
                fail(span, exc)
            else:
                tracing.set_rpc_status(span, grpc.StatusCode.OK.name)
                return result
            tracing.set_rpc_status(span, refusal.code.name)
        await context.abort(refusal.code, refusal.message)
        raise AssertionError("unreachable: abort raises")

    async def GetDevicePluginOptions(
        self, request: pb.Empty, context: Context
    ) -> pb.DevicePluginOptions:
        return self.options

    async def ListAndWatch(
        self, request: pb.Empty, context: Context
    ) -> AsyncIterator[pb.ListAndWatchResponse]:
        version = -1
        while not self.state.closed:
            if version != self.state.version:
                version = self.state.version
                yield await self._device_list()
            await self.state.wait_newer(version)

    async def Allocate(self, request: pb.AllocateRequest, context: Context) -> pb.AllocateResponse:
        started = time.perf_counter()
        start_ns = time.time_ns() if self.tracing.enabled else 0
        whole = self._whole_answer(request)
        if whole is not None and self._answered(context, request, start_ns, started):
            return whole
        containers = [list(c.devices_ids) for c in request.container_requests]

        async def answer(span: Span) -> pb.AllocateResponse:
            self.check_not_shared(containers)
            responses = [
                await self.allocate_one(ids, index) for index, ids in enumerate(containers)
            ]
            response = pb.AllocateResponse(container_responses=responses)
            too_big = oversized(self.resource, self.driver.name, response.ByteSize())
            if too_big is not None:
                log.error("%s", too_big.message)
                raise too_big
            if not self.options.pre_start_required:
                self.telemetry.allocated(self.resource, containers, span.get_span_context())
            return response

        result = "ok"
        try:
            attributes = None
            if self.tracing.enabled:
                attributes = {
                    tracing.CONTAINER_COUNT: len(containers),
                    tracing.REQUESTED: [i for ids in containers for i in ids],
                }
            return await self._answer("Allocate", context, answer, attributes)
        except BaseException:
            result = _result(context.code())
            raise
        finally:
            self._count_allocation(started, result)

    def _answered(
        self, context: Context, request: pb.AllocateRequest, start_ns: int, started: float
    ) -> bool:
        """Count an Allocate answered by ``_whole_answer`` and record its span as a row
        (``Tracing.record_answered``): no span is started or made current on this path.
        False when its span must be a full one (a ``traceparent``, a sampler to ask); the
        caller then takes the general path."""
        if self.tracing.enabled:
            device_id = request.container_requests[0].devices_ids[0]
            attributes = {tracing.CONTAINER_COUNT: 1, tracing.REQUESTED: [device_id]}
            linked = not self.options.pre_start_required and self.telemetry.finds_pods
            ids = self.tracing.record_answered(
                "Allocate",
                self.resource,
                self.driver,
                context.invocation_metadata() or (),
                start_ns,
                start_ns + int((time.perf_counter() - started) * 1e9),
                attributes,
                identified=linked,  # the pod-identity span links to it
            )
            if ids is None:
                return False
            if linked:
                span = self.tracing.context_of(ids)
                self.telemetry.allocated(self.resource, [[device_id]], span)
        self._count_allocation(started, "ok")
        return True

    def _count_allocation(self, started: float, result: str) -> None:
        self._allocate_seconds.add(time.perf_counter() - started)
        if result == "ok":
            self._allocated_ok.add()
        else:
            self.telemetry.metrics.allocations.inc(resource=self.resource, result=result)

    async def GetPreferredAllocation(
        self, request: pb.PreferredAllocationRequest, context: Context
    ) -> pb.PreferredAllocationResponse:
        async def answer(span: Span) -> pb.PreferredAllocationResponse:
            answers = []
            for index, container in enumerate(request.container_requests):
                chosen = await self.prefer_one(container)
                tracing.record_choice(span, index, chosen)
                answers.append(pb.ContainerPreferredAllocationResponse(deviceIDs=chosen))
            return pb.PreferredAllocationResponse(container_responses=answers)

        return await self._answer("GetPreferredAllocation", context, answer)

    async def PreStartContainer(
        self, request: pb.PreStartContainerRequest, context: Context
    ) -> pb.PreStartContainerResponse:
        device_ids = list(request.devices_ids)

        async def answer(span: Span) -> pb.PreStartContainerResponse:
            span.set_attribute(tracing.REQUESTED, device_ids)
            await self.pre_start(device_ids)
            await self.telemetry.identify_on(span, self.resource, device_ids)
            return pb.PreStartContainerResponse()

        return await self._answer("PreStartContainer", context, answer)
