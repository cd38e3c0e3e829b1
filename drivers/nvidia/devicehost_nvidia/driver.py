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
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from devicehost import (
    Device,
    DriverUnavailable,
    Health,
    HostPath,
    ResourceSpec,
    hookimpl,
)
from devicehost_nvidia.attributes import AttributeCache
from devicehost_nvidia.config import (
    DeviceListStrategy,
    MigStrategy,
    NvidiaConfig,
    ReplicaAllocation,
    parse_config,
)
from devicehost_nvidia.discovery import Discovery, MigProfiles, discover, rescan_migs
from devicehost_nvidia.edits import (
    VISIBLE_DEVICES,
    resource_edits,
    shared_nodes,
    unit_edits,
)
from devicehost_nvidia.events import HealthMonitor
from devicehost_nvidia.health import HealthTracker, Observer
from devicehost_nvidia.inventory import Inventory, build_inventory
from devicehost_nvidia.labels import gpu_labels
from devicehost_nvidia.nvml import (
    NVML_ERROR_DRIVER_NOT_LOADED,
    NVML_ERROR_LIBRARY_NOT_FOUND,
    Nvml,
    NvmlError,
)
from devicehost_nvidia.preferred import choose_gpus, choose_replicas
from devicehost_nvidia.toolkit import ToolkitSpec, read_toolkit_spec
from devicehost_nvidia.topology import Topology, read_topology

if TYPE_CHECKING:
    from devicehost_nvidia.simulated import SimNode, SimulatedNvml

log = logging.getLogger(__name__)
#: Where the simulated NVML lives. A node that is not simulated never imports it (nor the
#: tree builder and the testing kit they use): the driver's import took 21 ms with them,
#: 17 ms without (three runs each).
SIMULATED_MODULE = "devicehost_nvidia.simulated"

#: Seconds a watch waits after the event set failed before waiting on it again.
WATCH_ERROR_BACKOFF_SECONDS = 1.0
#: Xid 94: a contained ECC error, scoped to one GPU instance (what a MIG fault looks like).
XID_CONTAINED_ECC = 94
#: Simulated machines with NVIDIA GPUs (``--node``); any other name has none.
SIMULATED_MACHINES = ("dgx-h100",)
#: Where a driver root keeps libnvidia-ml.so.1 (k8s-device-plugin
#: ``cmd/nvidia-device-plugin/root.go``, ``tryResolveLibrary``).
LIBRARY_DIRS = (
    "/usr/lib64",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/lib64",
    "/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
)
NVML_LIBRARY = "libnvidia-ml.so.1"


def nvml_library(root: Path, driver_root: str) -> str | None:
    """The host path of libnvidia-ml.so.1 under a driver root; None for ``/`` (the loader
    finds it). Raises DriverUnavailable when a driver root has none."""
    if driver_root == "/":
        return None
    for directory in LIBRARY_DIRS:
        candidate = f"{driver_root.rstrip('/')}{directory}/{NVML_LIBRARY}"
        if (root / candidate.lstrip("/")).exists():
            return candidate
    raise DriverUnavailable(
        f"driverRoot {driver_root}: no {NVML_LIBRARY} in any of {', '.join(LIBRARY_DIRS)} "
        "under it; is the driver container running?"
    )


def _real_nvml(root: Path, driver_root: str) -> Nvml:
    """Load and initialise the real NVML, or say plainly why this node has none."""
    library = nvml_library(root, driver_root)
    try:
        from devicehost_nvidia.nvml_real import PynvmlLibrary
    except ImportError as exc:
        raise DriverUnavailable(
            f"the NVML Python binding (nvidia-ml-py) is not installed: {exc}"
        ) from None
    nvml = PynvmlLibrary(None if library is None else str(root / library.lstrip("/")))
    try:
        nvml.init()
    except NvmlError as exc:
        why = {
            NVML_ERROR_LIBRARY_NOT_FOUND: "; no NVIDIA driver on this node",
            NVML_ERROR_DRIVER_NOT_LOADED: "; the NVIDIA kernel driver is not loaded",
        }.get(exc.code, "")
        raise DriverUnavailable(f"NVML cannot be loaded: {exc}{why}") from None
    return nvml


def simulated_node(config: NvidiaConfig, machine: str) -> SimNode:
    """The simulated node for ``--node machine`` ("" : the configurable default)."""
    from devicehost_nvidia.simulated import SimNode, default_node, dgx_h100_node

    sim = config.simulation
    if machine == "":
        return default_node(sim.gpus, sim.numa_nodes, sim.mig)
    if machine == "dgx-h100":
        return dgx_h100_node(sim.mig)
    return SimNode(gpus=[], toolkit_cdi_spec=False)


class NvidiaDriver:
    """The ``nvidia`` driver. ``nvml`` lets a test hand in its own simulated library."""

    def __init__(self, nvml: Nvml | None = None) -> None:
        self._given = nvml
        self._simulate_root: Path | None = None
        self._machine = ""
        self.nvml: Nvml | None = None
        self.config = NvidiaConfig()
        self.root = Path("/")
        self.inventory = Inventory()
        self.attributes = AttributeCache(self.root, "")
        self.topology = Topology()
        self.tracker = HealthTracker(0.0)
        self.monitor: HealthMonitor | None = None
        self.observer: Observer | None = None
        self.found = Discovery()
        self.toolkit = ToolkitSpec()
        self._profiles: MigProfiles | None = None
        self._notes: list[str] = []
        self._scan_notes: list[str] = []
        self._reasons: dict[str, str] = {}
        self._order: dict[str, dict[str, int]] = {}
        self._registered: frozenset[str] = frozenset()
        self._lock = threading.RLock()

    @property
    def simulator(self) -> SimulatedNvml | None:
        """The simulated NVML in use, if any (tests and the demo change its hardware)."""
        simulated = sys.modules.get(SIMULATED_MODULE)  # not imported: nothing is simulated
        if simulated is not None and isinstance(self.nvml, simulated.SimulatedNvml):
            return cast("SimulatedNvml", self.nvml)
        return None

    # -- start-up --------------------------------------------------------------------------

    @hookimpl
    def devicehost_simulate(self, root: Path, config: Mapping[str, Any], node: str) -> None:
        """Lay out the simulated node: by default 8 GPUs in NVLink pairs on two NUMA nodes
        (shaped by ``simulation``); ``dgx-h100`` the GPU part of a DGX H100; any other
        machine has no NVIDIA GPU, so nothing is built and configure finds no driver."""
        from devicehost_nvidia.simtree import build_tree

        self._simulate_root, self._machine = root, node
        parsed = parse_config(config)
        build_tree(root, simulated_node(parsed, node), parsed.driver_root)

    def _open(self, config: NvidiaConfig, root: Path, simulated: bool) -> Nvml:
        if self._given is not None:
            nvml = self._given
        elif simulated:
            if self._machine and self._machine not in SIMULATED_MACHINES:
                # Such a machine has no NVIDIA driver, so no NVML: unavailable, as on it.
                raise DriverUnavailable(
                    f"NVML cannot be loaded: the simulated machine {self._machine!r} has no "
                    "NVIDIA GPU, so no NVIDIA driver"
                )
            from devicehost_nvidia.simtree import build_tree
            from devicehost_nvidia.simulated import SimulatedNvml

            node = simulated_node(config, self._machine)
            if self._simulate_root == root:
                build_tree(root, node, config.driver_root)  # adds what config asks beyond it
            nvml = SimulatedNvml(node)
        else:
            return _real_nvml(root, config.driver_root)
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
        self._profiles = MigProfiles(nvml)
        self.found = found = discover(nvml, root, self._profiles)
        self.attributes = AttributeCache(root, found.driver_version)
        self.inventory = build_inventory(found, self.config)
        self._registered = frozenset(self.inventory.resources)
        self._order = self._orders()
        self.topology = read_topology(nvml, found.gpus)
        self.tracker = HealthTracker(self.config.quiet_period(simulated))
        self.observer = Observer(nvml, self.config.remap_pending_unhealthy)
        self.monitor = HealthMonitor(
            nvml, found.gpus, self.tracker, self.config.ignored_xids, self.observer
        )
        notes = [self.simulator.node.describe()] if self.simulator else []
        if not found.gpus:
            notes.append(
                f"NVML (driver {found.driver_version}) finds no GPU on this node: "
                "nothing is advertised"
            )
        notes += found.notes + self.inventory.notes + self.monitor.start()
        if self.config.uses(DeviceListStrategy.DEVICE_NODES) and found.gpus:
            missing = shared_nodes(root, self.config)[1]
            if missing:
                notes.append(
                    f"deviceListStrategy device-nodes: {', '.join(missing)} missing under "
                    f"{root}; containers will fail to start until they exist"
                )
        self._notes = notes
        self._refresh_toolkit()
        log.info(
            "NVML driver %s: %d GPUs, resources %s",
            found.driver_version,
            len(found.gpus),
            ", ".join(self.inventory.resources) or "none",
        )

    def _orders(self) -> dict[str, dict[str, int]]:
        return {
            name: {d.id: n for n, d in enumerate(devices)}
            for name, devices in self.inventory.resources.items()
        }

    def _refresh_toolkit(self) -> None:
        """Re-read the NVIDIA Container Toolkit's CDI spec (``cdi`` only); say what changed."""
        if not self.config.uses(DeviceListStrategy.CDI) or not self.found.gpus:
            return
        spec = read_toolkit_spec(self.root, self.config.cdi_spec_dirs)
        if spec.files != self.toolkit.files or spec.names != self.toolkit.names:
            if spec.files:
                log.info("NVIDIA Container Toolkit CDI spec: %s", ", ".join(spec.files))
            else:
                log.warning("%s", self._toolkit_note(spec))
        self.toolkit = spec

    def _toolkit_note(self, spec: ToolkitSpec) -> str | None:
        if not self.config.uses(DeviceListStrategy.CDI) or not self.found.gpus:
            return None
        problems = "; ".join(spec.problems)
        if not spec.files:
            return (
                "deviceListStrategy cdi: no NVIDIA Container Toolkit CDI spec of kind "
                f"nvidia.com/gpu in {', '.join(self.config.cdi_spec_dirs)} (generate it with "
                "`nvidia-ctk cdi generate --output=/var/run/cdi/nvidia.yaml`, or enable the "
                "nvidia-cdi-refresh service); GPUs are Unhealthy until it exists"
                + (f" ({problems})" if problems else "")
            )
        missing = sorted(
            u.uuid
            for u in self.inventory.units()
            if spec.qualified(u.uuid) is None and spec.qualified(str(u.gpu.index)) is None
        )
        if missing:
            return (
                f"deviceListStrategy cdi: the NVIDIA Container Toolkit's spec "
                f"({', '.join(spec.files)}) does not name {', '.join(missing)}; regenerate it "
                "(nvidia-ctk cdi generate) after a GPU or MIG change"
            )
        return None

    @hookimpl
    def devicehost_resources(self) -> Sequence[ResourceSpec]:
        edits = resource_edits(self.root, self.config)
        return [
            ResourceSpec(name=name, edits=edits, joined_envs=(VISIBLE_DEVICES,))
            for name in self.inventory.resources
        ]

    @hookimpl
    def devicehost_notes(self) -> Sequence[str]:
        toolkit = self._toolkit_note(self.toolkit)
        return self._notes + self._scan_notes + ([toolkit] if toolkit else [])

    @hookimpl
    def devicehost_labels(self) -> Mapping[str, str]:
        return gpu_labels(self.found, self.topology)

    @hookimpl
    def devicehost_host_paths(self) -> Sequence[HostPath]:
        return [
            HostPath(
                path="/dev",
                purpose="/dev/nvidia* GPU, control, UVM and modeset nodes and "
                "/dev/nvidia-caps (MIG); a directory, since nodes appear as modules load",
            ),
            HostPath(
                path="/sys/bus/pci/devices",
                purpose="each GPU's PCI function: its NUMA node",
            ),
            HostPath(path="/sys/devices", purpose="what the /sys/bus/pci/devices links point at"),
            HostPath(
                path="/proc/driver/nvidia",
                purpose="MIG capabilities: the /dev/nvidia-caps minors of GPU and compute "
                "instances",
            ),
            HostPath(path="/etc/cdi", purpose="the NVIDIA Container Toolkit's CDI spec (cdi)"),
            HostPath(path="/var/run/cdi", purpose="the NVIDIA Container Toolkit's CDI spec (cdi)"),
            HostPath(
                path="/run/nvidia/driver",
                purpose="driverRoot of a driver-container install: libnvidia-ml.so.1 and "
                "its device nodes",
            ),
        ]

    # -- devices ---------------------------------------------------------------------------

    def _rescan(self) -> None:
        """List MIG devices again (a deleted instance disappears; a new one of a known
        profile appears) and rebuild the inventory around the registered resources."""
        nvml, profiles = self.nvml, self._profiles
        if nvml is None or profiles is None or self.config.mig_strategy is MigStrategy.NONE:
            return
        if not any(g.mig_enabled for g in self.found.gpus):
            return
        notes = rescan_migs(nvml, self.found, profiles)
        inventory = build_inventory(self.found, self.config, self._registered)
        for note in notes + inventory.notes:
            if note not in self._scan_notes:
                log.warning("%s", note)
        self._scan_notes = notes + inventory.notes
        before = {n: set(d) for n, d in self._order.items()}
        self.inventory = inventory
        self._order = self._orders()
        for name, ids in before.items():
            gone = ids - set(self._order.get(name, {}))
            if gone:
                log.info("resource %r: MIG devices gone: %s", name, ", ".join(sorted(gone)))

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
        observer = self.observer
        if self.nvml is None or observer is None:
            return []
        with self._lock:
            self._rescan()
            self._refresh_toolkit()
            inventory, toolkit = self.inventory, self.toolkit
        conditions = {g.uuid: observer.check(g) for g in inventory.gpus(resource)}
        if self.tracker.has_marks():
            self.tracker.recheck(
                lambda uuid: conditions.get(uuid) or self.monitor.condition(uuid)  # type: ignore[union-attr]
            )
        devices = []
        for device in inventory.resources.get(resource, []):
            unit = device.unit
            edits, problem = unit_edits(self.root, self.config, unit, toolkit)
            mig = unit.mig
            reason = (
                conditions[unit.gpu.uuid].problem
                or self.tracker.marked(
                    unit.gpu.uuid,
                    None if mig is None else mig.gpu_instance,
                    None if mig is None else mig.compute_instance,
                )
                or problem
            )
            self._log_reason(resource, device.id, reason)
            numa = unit.gpu.numa_node
            devices.append(
                Device(
                    id=device.id,
                    health=Health.UNHEALTHY if reason else Health.HEALTHY,
                    numa_nodes=() if numa is None else (numa,),
                    edits=edits,
                    attributes=self.attributes.of(unit),
                )
            )
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
        index, mig = device.unit.gpu.index, device.unit.mig
        if healthy:
            sim.reset(index)
        elif mig is not None:
            sim.xid(index, XID_CONTAINED_ECC, mig.gpu_instance, mig.compute_instance)
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
