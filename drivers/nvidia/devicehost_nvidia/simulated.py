"""A simulated NVML: the ``Nvml`` interface over a modelled node, for tests and the demo.

It answers every call the driver makes the way NVML would on the modelled hardware —
UUIDs, PCI bus IDs, NVLink pairs, PCIe distance, MIG devices, remapped rows, event sets —
and lets a test or the demo change the hardware: ``xid`` and ``double_bit_ecc`` deliver
events to every registered event set, ``fault`` leaves a GPU needing a reset, ``lose``
makes it fall off the bus (``GPU_IS_LOST``), ``reset`` brings it back. The driver above
the interface cannot tell it from the real library.
"""

from __future__ import annotations

import threading
import uuid
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from devicehost_nvidia.mig import nominal_attributes
from devicehost_nvidia.nvml import (
    EVENT_DOUBLE_BIT_ECC_ERROR,
    EVENT_XID_CRITICAL_ERROR,
    NO_INSTANCE,
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_NOT_FOUND,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_ERROR_TIMEOUT,
    TOPOLOGY_INTERNAL,
    TOPOLOGY_NODE,
    TOPOLOGY_SINGLE,
    TOPOLOGY_SYSTEM,
    Handle,
    MigAttributes,
    NvmlError,
    NvmlEvent,
    RemappedRows,
)

_NAMESPACE = uuid.UUID("6f1c7c3e-52a4-4b8e-9d0e-3c1a2b4d5e6f")
#: Xid 48 is a double-bit ECC error; Xid 79 means the GPU has fallen off the bus.
XID_DOUBLE_BIT_ECC = 48
XID_FALLEN_OFF_BUS = 79
DEFAULT_MODEL = "NVIDIA A100-SXM4-80GB"
DEFAULT_PCI_DEVICE_ID = "0x20b2"
DRIVER_VERSION = "550.54.15"
DEFAULT_MEMORY_MIB = 81920


@dataclass(frozen=True, slots=True)
class SimMig:
    """One MIG device of a simulated GPU."""

    index: int
    gpu_instance: int
    compute_instance: int
    profile: str
    uuid: str


@dataclass(kw_only=True)
class SimGpu:
    """One simulated GPU. ``mig_profiles`` non-empty means MIG is enabled with those devices."""

    index: int
    uuid: str
    bus_id: str
    numa_node: int
    pcie_switch: int
    minor: int
    name: str = DEFAULT_MODEL
    pci_device_id: str = DEFAULT_PCI_DEVICE_ID
    memory_mib: int = DEFAULT_MEMORY_MIB
    mig_profiles: tuple[str, ...] = ()
    events_supported: bool = True
    remapping_supported: bool = True

    @property
    def mig_enabled(self) -> bool:
        return bool(self.mig_profiles)

    def mig_devices(self) -> list[SimMig]:
        """The MIG devices, GPU instance IDs counting from 1, one compute instance each."""
        return [
            SimMig(
                index=i,
                gpu_instance=i + 1,
                compute_instance=0,
                profile=profile,
                uuid=f"MIG-{uuid.uuid5(_NAMESPACE, f'{self.uuid}/{i + 1}/0')}",
            )
            for i, profile in enumerate(self.mig_profiles)
        ]


@dataclass(kw_only=True)
class SimNode:
    """A simulated node: its GPUs, direct NVLink connections ``(gpu, gpu, link count)``,
    and NVSwitches (``nvswitches`` of them, each joined to every GPU by ``nvswitch_links``)."""

    gpus: list[SimGpu]
    nvlinks: list[tuple[int, int, int]] = field(default_factory=list)
    nvswitches: int = 0
    nvswitch_links: int = 0

    def nvswitch_bus_id(self, switch: int) -> str:
        return f"00000000:{0xC0 + switch:02X}:00.0"

    def describe(self) -> str:
        numa = sorted({g.numa_node for g in self.gpus})
        model = self.gpus[0].name if self.gpus else "no GPU"
        links = (
            "on NVSwitches"
            if self.nvswitches
            else "in NVLink pairs"
            if self.nvlinks
            else "without NVLink"
        )
        mig = sum(1 for g in self.gpus if g.mig_enabled)
        return (
            f"simulated NVML: {len(self.gpus)} GPUs ({model}) {links} across NUMA nodes "
            f"{', '.join(map(str, numa))}" + (f"; {mig} with MIG enabled" if mig else "")
        )


def sim_uuid(index: int) -> str:
    """The deterministic UUID of simulated GPU ``index`` (40 characters, as NVML's)."""
    return f"GPU-{uuid.uuid5(_NAMESPACE, f'gpu-{index}')}"


def sim_gpu(
    index: int, *, numa_node: int = 0, pcie_switch: int | None = None, **details: Any
) -> SimGpu:
    """Simulated GPU ``index`` with a deterministic UUID, bus ID and minor number; its own
    PCIe switch unless ``pcie_switch`` says otherwise; ``details`` set other fields."""
    return SimGpu(
        index=index,
        uuid=sim_uuid(index),
        bus_id=f"00000000:{(0x07 + 0x10 * index) % 0x100:02X}:00.0",
        numa_node=numa_node,
        pcie_switch=index if pcie_switch is None else pcie_switch,
        minor=index,
        **details,
    )


def default_node(
    gpus: int = 8, numa_nodes: int = 2, mig: Mapping[int, Iterable[str]] | None = None
) -> SimNode:
    """GPUs in NVLink pairs (0-1, 2-3, …), each pair behind one PCIe switch, spread in
    equal blocks over ``numa_nodes``: the default node is 8 GPUs on two NUMA nodes."""
    mig = mig or {}
    per_node = max(1, -(-gpus // numa_nodes))
    return SimNode(
        gpus=[
            sim_gpu(
                i,
                numa_node=min(i // per_node, numa_nodes - 1),
                pcie_switch=i // 2,
                mig_profiles=tuple(mig.get(i, ())),
            )
            for i in range(gpus)
        ],
        nvlinks=[(i, i + 1, 4) for i in range(0, gpus - 1, 2)],
    )


@dataclass(frozen=True, slots=True)
class _GpuHandle:
    index: int


@dataclass(frozen=True, slots=True)
class _MigHandle:
    gpu: int
    mig: SimMig


@dataclass(eq=False)
class _EventSet:
    queue: deque[NvmlEvent] = field(default_factory=deque)
    masks: dict[int, int] = field(default_factory=dict)
    freed: bool = False


@dataclass
class _GpuState:
    lost: bool = False
    remap_pending: bool = False
    uncorrected_rows: int = 0


class SimulatedNvml:
    """``Nvml`` over a ``SimNode``. Thread-safe; ``event_set_wait`` blocks like NVML's."""

    def __init__(self, node: SimNode | None = None) -> None:
        self.node = node or default_node()
        self._handles = [_GpuHandle(g.index) for g in self.node.gpus]
        self._state = {g.index: _GpuState() for g in self.node.gpus}
        self._links = {g.index: self._link_table(g.index) for g in self.node.gpus}
        self._sets: list[_EventSet] = []
        self._cond = threading.Condition()
        self.initialised = False

    def _link_table(self, index: int) -> list[str]:
        """The remote PCI bus ID of each NVLink of GPU ``index``, link by link."""
        remotes: list[str] = []
        for a, b, count in self.node.nvlinks:
            if index in (a, b):
                remotes += [self.node.gpus[b if index == a else a].bus_id] * count
        for switch in range(self.node.nvswitches):
            remotes += [self.node.nvswitch_bus_id(switch)] * self.node.nvswitch_links
        return remotes

    # -- what a test or the demo does to the hardware ------------------------------------

    def xid(self, index: int, xid: int, gpu_instance: int | None = None) -> None:
        """An Xid event on GPU ``index`` (scoped to one GPU instance when given)."""
        self._deliver(index, EVENT_XID_CRITICAL_ERROR, xid, gpu_instance)

    def double_bit_ecc(self, index: int) -> None:
        """A double-bit ECC error event; leaves a row remap pending (needs a reset)."""
        with self._cond:
            state = self._state[index]
            state.remap_pending, state.uncorrected_rows = True, state.uncorrected_rows + 1
        self._deliver(index, EVENT_DOUBLE_BIT_ECC_ERROR, 0, None)

    def fault(self, index: int) -> None:
        """Xid 48 (double-bit ECC): the GPU reports a pending row remap until reset."""
        with self._cond:
            state = self._state[index]
            state.remap_pending, state.uncorrected_rows = True, state.uncorrected_rows + 1
        self.xid(index, XID_DOUBLE_BIT_ECC)

    def lose(self, index: int) -> None:
        """Xid 79: the GPU falls off the bus; every later call on it is GPU_IS_LOST, and so
        is waiting on an event set it is registered with (once its events are read)."""
        self.xid(index, XID_FALLEN_OFF_BUS)
        with self._cond:
            self._state[index].lost = True

    def reset(self, index: int) -> None:
        """A GPU reset (or reboot): back on the bus, no remap pending."""
        with self._cond:
            self._state[index] = _GpuState()

    def _deliver(self, index: int, event_type: int, data: int, gpu_instance: int | None) -> None:
        event = NvmlEvent(
            self._handles[index],
            event_type,
            data,
            NO_INSTANCE if gpu_instance is None else gpu_instance,
            NO_INSTANCE if gpu_instance is None else 0,
        )
        with self._cond:
            for event_set in self._sets:
                if event_set.masks.get(index, 0) & event_type and not event_set.freed:
                    event_set.queue.append(event)
            self._cond.notify_all()

    # -- the Nvml interface ----------------------------------------------------------------

    def _gpu(self, handle: Handle) -> SimGpu:
        if not isinstance(handle, _GpuHandle):
            raise NvmlError(NVML_ERROR_INVALID_ARGUMENT)
        with self._cond:
            if self._state[handle.index].lost:
                raise NvmlError(NVML_ERROR_GPU_IS_LOST)
        return self.node.gpus[handle.index]

    def _mig(self, handle: Handle) -> SimMig:
        if not isinstance(handle, _MigHandle):
            raise NvmlError(NVML_ERROR_INVALID_ARGUMENT)
        self._gpu(self._handles[handle.gpu])
        return handle.mig

    def init(self) -> None:
        self.initialised = True

    def shutdown(self) -> None:
        self.initialised = False

    def system_driver_version(self) -> str:
        return DRIVER_VERSION

    def device_count(self) -> int:
        return len(self.node.gpus)

    def device_handle_by_index(self, index: int) -> Handle:
        if not 0 <= index < len(self._handles):
            raise NvmlError(NVML_ERROR_INVALID_ARGUMENT)
        self._gpu(self._handles[index])
        return self._handles[index]

    def device_uuid(self, device: Handle) -> str:
        if isinstance(device, _MigHandle):
            return self._mig(device).uuid
        return self._gpu(device).uuid

    def device_name(self, device: Handle) -> str:
        return self._gpu(device).name

    def device_pci_bus_id(self, device: Handle) -> str:
        return self._gpu(device).bus_id

    def device_minor_number(self, device: Handle) -> int:
        return self._gpu(device).minor

    def device_memory_total(self, device: Handle) -> int:
        return self._gpu(device).memory_mib * 1024 * 1024

    def device_mig_mode(self, device: Handle) -> tuple[int, int]:
        enabled = int(self._gpu(device).mig_enabled)
        return enabled, enabled

    def device_max_mig_device_count(self, device: Handle) -> int:
        return 7 if self._gpu(device).mig_enabled else 0

    def device_mig_device_handle_by_index(self, device: Handle, index: int) -> Handle:
        gpu = self._gpu(device)
        migs = gpu.mig_devices()
        if not gpu.mig_enabled or not 0 <= index < 7:
            raise NvmlError(NVML_ERROR_INVALID_ARGUMENT)
        if index >= len(migs):
            raise NvmlError(NVML_ERROR_NOT_FOUND)
        return _MigHandle(gpu.index, migs[index])

    def device_gpu_instance_id(self, mig: Handle) -> int:
        return self._mig(mig).gpu_instance

    def device_compute_instance_id(self, mig: Handle) -> int:
        return self._mig(mig).compute_instance

    def device_attributes(self, mig: Handle) -> MigAttributes:
        gpu = self.node.gpus[mig.gpu] if isinstance(mig, _MigHandle) else None
        if gpu is None:
            raise NvmlError(NVML_ERROR_INVALID_ARGUMENT)
        return nominal_attributes(self._mig(mig).profile, gpu.memory_mib * 1024 * 1024)

    def device_nvlink_state(self, device: Handle, link: int) -> bool:
        remotes = self._links[self._gpu(device).index]
        if not remotes:
            raise NvmlError(NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= link < len(remotes):
            raise NvmlError(NVML_ERROR_INVALID_ARGUMENT)
        return True

    def device_nvlink_remote_pci_bus_id(self, device: Handle, link: int) -> str:
        self.device_nvlink_state(device, link)
        return self._links[self._gpu(device).index][link]

    def device_topology_common_ancestor(self, first: Handle, second: Handle) -> int:
        a, b = self._gpu(first), self._gpu(second)
        if a.index == b.index:
            return TOPOLOGY_INTERNAL
        if a.pcie_switch == b.pcie_switch:
            return TOPOLOGY_SINGLE
        return TOPOLOGY_NODE if a.numa_node == b.numa_node else TOPOLOGY_SYSTEM

    def device_remapped_rows(self, device: Handle) -> RemappedRows:
        gpu = self._gpu(device)
        if not gpu.remapping_supported:
            raise NvmlError(NVML_ERROR_NOT_SUPPORTED)
        with self._cond:
            state = self._state[gpu.index]
            return RemappedRows(0, state.uncorrected_rows, state.remap_pending, False)

    def device_supported_event_types(self, device: Handle) -> int:
        gpu = self._gpu(device)
        return (
            EVENT_XID_CRITICAL_ERROR | EVENT_DOUBLE_BIT_ECC_ERROR | 0x1 | 0x4
            if gpu.events_supported
            else 0
        )

    def event_set_create(self) -> Handle:
        event_set = _EventSet()
        with self._cond:
            self._sets.append(event_set)
        return event_set

    def device_register_events(self, device: Handle, event_types: int, event_set: Handle) -> None:
        gpu = self._gpu(device)
        if not isinstance(event_set, _EventSet) or event_set.freed:
            raise NvmlError(NVML_ERROR_INVALID_ARGUMENT)
        if event_types & ~self.device_supported_event_types(device):
            raise NvmlError(NVML_ERROR_NOT_SUPPORTED)
        with self._cond:
            event_set.masks[gpu.index] = event_set.masks.get(gpu.index, 0) | event_types

    def event_set_wait(self, event_set: Handle, timeout_ms: int) -> NvmlEvent:
        if not isinstance(event_set, _EventSet) or event_set.freed:
            raise NvmlError(NVML_ERROR_INVALID_ARGUMENT)
        with self._cond:
            lost = any(self._state[i].lost for i in event_set.masks)
            if not self._cond.wait_for(
                lambda: bool(event_set.queue) or event_set.freed or lost, timeout_ms / 1000
            ):
                raise NvmlError(NVML_ERROR_TIMEOUT)
            if event_set.freed:
                raise NvmlError(NVML_ERROR_INVALID_ARGUMENT)
            if not event_set.queue:
                # NVML's wait fails while a registered GPU has fallen off the bus.
                raise NvmlError(NVML_ERROR_GPU_IS_LOST)
            return event_set.queue.popleft()

    def event_set_free(self, event_set: Handle) -> None:
        if not isinstance(event_set, _EventSet):
            raise NvmlError(NVML_ERROR_INVALID_ARGUMENT)
        with self._cond:
            event_set.freed = True
            if event_set in self._sets:
                self._sets.remove(event_set)
            self._cond.notify_all()
