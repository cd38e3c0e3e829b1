"""NVIDIA GPUs for devicehost: NVML enumeration, health that recovers, MIG, time-slicing,
NVLink-aware allocation.

The driver reads NVML through the narrow ``Nvml`` interface (real: ``PynvmlLibrary``;
simulated: ``SimulatedNvml``) and sysfs/dev under ``root``. At configure it discovers the
GPUs, builds the inventory (MIG strategy, device ID strategy, time-slicing), reads the
topology and opens the NVML event set. Enumerate reports each unit's health from the
event marks and NVML's view of the GPU now; watch pumps the event set and notifies the
host on every change, recovery included.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from devicehost import (
    Allocation,
    Device,
    DriverUnavailable,
    Health,
    ResourceSpec,
    UnknownDevice,
    hookimpl,
)
from devicehost_nvidia.allocation import CONTROL_NODE, allocation_for
from devicehost_nvidia.cdispec import spec_directory, write_cdi_spec
from devicehost_nvidia.config import (
    DeviceListStrategy,
    NvidiaConfig,
    ReplicaAllocation,
    parse_config,
)
from devicehost_nvidia.discovery import discover
from devicehost_nvidia.events import HealthMonitor
from devicehost_nvidia.health import HealthTracker, soundness
from devicehost_nvidia.inventory import Advertised, Inventory, build_inventory
from devicehost_nvidia.nvml import (
    NVML_ERROR_DRIVER_NOT_LOADED,
    NVML_ERROR_LIBRARY_NOT_FOUND,
    Nvml,
    NvmlError,
)
from devicehost_nvidia.preferred import choose_gpus, choose_replicas
from devicehost_nvidia.simtree import build_tree
from devicehost_nvidia.simulated import SimulatedNvml, default_node
from devicehost_nvidia.topology import Topology, read_topology

log = logging.getLogger(__name__)

#: Seconds a watch waits after the event set failed before waiting on it again.
WATCH_ERROR_BACKOFF_SECONDS = 1.0
#: Xid 94: a contained ECC error, scoped to one GPU instance (what a MIG fault looks like).
XID_CONTAINED_ECC = 94


def _real_nvml() -> Nvml:
    """Load and initialise the real NVML, or say plainly why this node has none."""
    try:
        from devicehost_nvidia.nvml_real import PynvmlLibrary
    except ImportError as exc:
        raise DriverUnavailable(
            f"the NVML Python binding (nvidia-ml-py) is not installed: {exc}"
        ) from None
    library = PynvmlLibrary()
    try:
        library.init()
    except NvmlError as exc:
        why = {
            NVML_ERROR_LIBRARY_NOT_FOUND: "; no NVIDIA driver on this node",
            NVML_ERROR_DRIVER_NOT_LOADED: "; the NVIDIA kernel driver is not loaded",
        }.get(exc.code, "")
        raise DriverUnavailable(f"NVML cannot be loaded: {exc}{why}") from None
    return library


class NvidiaDriver:
    """The ``nvidia`` driver. ``nvml`` lets a test hand in its own simulated library."""

    def __init__(self, nvml: Nvml | None = None) -> None:
        self._given = nvml
        self._simulate_root: Path | None = None
        self.nvml: Nvml | None = None
        self.config = NvidiaConfig()
        self.root = Path("/")
        self.inventory = Inventory()
        self.topology = Topology()
        self.tracker = HealthTracker(0.0)
        self.monitor: HealthMonitor | None = None
        self._notes: list[str] = []
        self._reasons: dict[str, str] = {}
        self._cdi_problem: str | None = None
        self._order: dict[str, dict[str, int]] = {}

    @property
    def simulator(self) -> SimulatedNvml | None:
        """The simulated NVML in use, if any (tests and the demo change its hardware)."""
        return self.nvml if isinstance(self.nvml, SimulatedNvml) else None

    # -- start-up --------------------------------------------------------------------------

    @hookimpl
    def devicehost_simulate(self, root: Path) -> None:
        """Lay out the default simulated node: 8 GPUs in NVLink pairs on two NUMA nodes."""
        self._simulate_root = root
        build_tree(root, default_node())

    def _open(self, config: NvidiaConfig, root: Path, simulated: bool) -> Nvml:
        if self._given is not None:
            nvml = self._given
        elif simulated:
            sim = config.simulation
            node = default_node(sim.gpus, sim.numa_nodes, sim.mig)
            if self._simulate_root == root:
                build_tree(root, node)  # adds what a configured node has beyond the default
            nvml = SimulatedNvml(node)
        else:
            return _real_nvml()
        try:
            nvml.init()
        except NvmlError as exc:
            raise DriverUnavailable(f"NVML cannot be loaded: {exc}") from None
        return nvml

    @hookimpl
    def devicehost_configure(self, config: Mapping[str, Any], root: Path, simulated: bool) -> None:
        self.config = parse_config(config)
        self.root = root
        self.nvml = nvml = self._open(self.config, root, simulated)
        found = discover(nvml, root)
        self.inventory = build_inventory(found, self.config)
        self.topology = read_topology(nvml, found.gpus)
        self._order = {
            name: {d.id: n for n, d in enumerate(devices)}
            for name, devices in self.inventory.resources.items()
        }
        self.tracker = HealthTracker(self.config.quiet_period(simulated))
        self.monitor = HealthMonitor(
            nvml, self.inventory.gpus(), self.tracker, self.config.ignored_xids
        )
        notes = [self.simulator.node.describe()] if self.simulator else []
        if not found.gpus:
            notes.append(
                f"NVML (driver {found.driver_version}) finds no GPU on this node: "
                "nothing is advertised"
            )
        notes += found.notes + self.inventory.notes + self.monitor.start()
        if (
            self.config.uses(DeviceListStrategy.DEVICE_NODES)
            and not (root / CONTROL_NODE.lstrip("/")).exists()
        ):
            notes.append(
                f"deviceListStrategy device-nodes: {CONTROL_NODE} is missing under "
                f"{root}; containers will fail to start until it exists"
            )
        self._notes = notes
        self._refresh_cdi_spec()
        log.info(
            "NVML driver %s: %d GPUs, resources %s",
            found.driver_version,
            len(found.gpus),
            ", ".join(self.inventory.resources) or "none",
        )

    def _refresh_cdi_spec(self) -> None:
        if not self.config.uses(DeviceListStrategy.CDI) or not self.inventory.resources:
            return
        try:
            write_cdi_spec(self.root, self.config.cdi_spec_dir, self.inventory.units())
        except OSError as exc:
            problem = (
                f"deviceListStrategy cdi: cannot write the CDI spec in "
                f"{spec_directory(self.root, self.config.cdi_spec_dir)} ({exc}); "
                "CDI names will not resolve until it can"
            )
            if problem != self._cdi_problem:
                log.error("%s", problem)
            self._cdi_problem = problem
        else:
            self._cdi_problem = None

    @hookimpl
    def devicehost_resources(self) -> Sequence[ResourceSpec]:
        return [ResourceSpec(name=name) for name in self.inventory.resources]

    @hookimpl
    def devicehost_notes(self) -> Sequence[str]:
        return self._notes + ([self._cdi_problem] if self._cdi_problem else [])

    # -- devices ---------------------------------------------------------------------------

    def _health(self, device: Advertised, unsound: Mapping[str, str | None]) -> str | None:
        unit = device.unit
        instance = unit.mig.gpu_instance if unit.mig else None
        return unsound.get(unit.gpu.uuid) or self.tracker.marked(unit.gpu.uuid, instance)

    def _log_reason(self, resource: str, device_id: str, reason: str | None) -> None:
        """Say once why a device turned Unhealthy (the host logs the flip itself)."""
        key = f"{resource}/{device_id}"
        if reason is None:
            self._reasons.pop(key, None)
        elif self._reasons.get(key) != reason:
            self._reasons[key] = reason
            log.warning("resource %r, device %s: Unhealthy: %s", resource, device_id, reason)

    @hookimpl
    def devicehost_enumerate(self, resource: str) -> Sequence[Device]:
        nvml = self.nvml
        if nvml is None:
            return []
        unsound = {g.uuid: soundness(nvml, g) for g in self.inventory.gpus(resource)}
        if self.tracker.has_marks():
            self.tracker.recheck(lambda uuid: uuid in unsound and unsound[uuid] is None)
        devices = []
        for device in self.inventory.resources.get(resource, []):
            reason = self._health(device, unsound)
            self._log_reason(resource, device.id, reason)
            numa = device.unit.gpu.numa_node
            devices.append(
                Device(
                    id=device.id,
                    health=Health.UNHEALTHY if reason else Health.HEALTHY,
                    numa_nodes=() if numa is None else (numa,),
                )
            )
        self._refresh_cdi_spec()
        return devices

    @hookimpl
    def devicehost_watch(
        self, resource: str, notify: Callable[[], None], stop: threading.Event
    ) -> None:
        """Pump the NVML event set; notify on a critical event and on a recovery."""
        monitor = self.monitor
        if monitor is None:
            return
        seen = monitor.version
        while not stop.is_set():
            ok = monitor.pump(stop)
            if monitor.version != seen:
                seen = monitor.version
                notify()
            if not ok:
                stop.wait(WATCH_ERROR_BACKOFF_SECONDS)

    # -- kubelet requests ------------------------------------------------------------------

    def _device(self, resource: str, device_id: str) -> Advertised:
        device = self.inventory.device(resource, device_id)
        if device is None:
            raise UnknownDevice(resource, device_id)
        return device

    @hookimpl
    def devicehost_allocate(self, resource: str, device_ids: Sequence[str]) -> Allocation:
        units = [self._device(resource, i).unit for i in device_ids]
        return allocation_for(units, self.config, self.root)

    @hookimpl
    def devicehost_preferred_allocation(
        self, resource: str, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> Sequence[str] | None:
        devices = {i: self.inventory.device(resource, i) for i in available}
        if any(d is None for d in devices.values()):
            return None
        known = {i: d for i, d in devices.items() if d is not None}
        order = self._order.get(resource, {})

        def position(device_id: str) -> int:
            return order.get(device_id, len(order))

        if resource in self.inventory.shared:
            packed = self.config.time_slicing.replica_allocation is ReplicaAllocation.PACKED
            return choose_replicas(
                available, must_include, size, lambda i: known[i].unit.id, position, packed
            )
        if any(d.unit.mig is not None for d in known.values()):
            return None  # MIG devices: the host's NUMA packing is all that applies
        return choose_gpus(
            available, must_include, size, lambda i: known[i].unit.gpu.uuid, position, self.topology
        )

    @hookimpl
    def devicehost_simulate_health(
        self, resource: str, device_id: str, healthy: bool
    ) -> bool | None:
        """Fault or repair the simulated GPU behind ``device_id``, as hardware would."""
        sim = self.simulator
        device = self.inventory.device(resource, device_id)
        if sim is None or device is None:
            return None
        index = device.unit.gpu.index
        if healthy:
            sim.reset(index)
        elif device.unit.mig is not None:
            sim.xid(index, XID_CONTAINED_ECC, gpu_instance=device.unit.mig.gpu_instance)
        else:
            sim.fault(index)
        return True

    @hookimpl
    def devicehost_shutdown(self) -> None:
        if self.monitor is not None:
            self.monitor.close()
        if self.nvml is not None:
            try:
                self.nvml.shutdown()
            except NvmlError as exc:
                log.debug("nvmlShutdown: %s", exc)
