"""A simulated NVML: the ``Nvml`` interface over a modelled node, for tests and the demo.

It answers every call the driver makes the way NVML would on the modelled hardware —
UUIDs, PCI bus IDs, NVLink pairs, PCIe distance, MIG devices, remapped rows, event sets —
and lets a test or the demo change the hardware: ``xid`` and ``double_bit_ecc`` deliver
events to every registered event set, ``fault`` leaves a GPU needing a reset, ``lose``
makes it fall off the bus (``GPU_IS_LOST``), ``reset`` brings it back, ``destroy_mig``
deletes a MIG instance. The driver above the interface cannot tell it from the real library.

What a reset looks like through NVML is modelled on what NVML documents: the GPU's energy
counter counts "since the driver was last reloaded" (``nvmlDeviceGetTotalEnergyConsumption``,
go-nvml ``gen/nvml/nvml.h``) and starts again from zero; a lost GPU answers again; a
pending row remap is gone; and, on a driver that offers it, the recovery-action field
(``NVML_FI_DEV_GET_GPU_RECOVERY_ACTION``) reads NONE again.
"""

from __future__ import annotations

import threading
import uuid
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from devicehost_nvidia.mig import MigProfile, parse_profile
from devicehost_nvidia.nvml import (
    EVENT_DOUBLE_BIT_ECC_ERROR,
    EVENT_XID_CRITICAL_ERROR,
    FI_DEV_GET_GPU_RECOVERY_ACTION,
    GPU_RECOVERY_ACTION_GPU_RESET,
    GPU_RECOVERY_ACTION_NODE_REBOOT,
    GPU_RECOVERY_ACTION_NONE,
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
XID_REMAP_FAILURE = 64
DEFAULT_MODEL = "NVIDIA A100-SXM4-80GB"
DEFAULT_PCI_DEVICE_ID = "0x20b2"
DRIVER_VERSION = "550.54.15"
#: nvmlSystemGetCudaDriverVersion of that driver: CUDA 12.4.
CUDA_DRIVER_VERSION = 12040
DEFAULT_MEMORY_MIB = 81920
DEFAULT_VBIOS = "92.00.00.00.01"
#: Energy the simulated GPU uses between two readings of its counter, in mJ.
_ENERGY_STEP_MJ = 50_000

#: GPU-instance profiles of an 80 GB A100/H100: name → (NVML profile index, NVML profile
#: ID, eighths of the memory). The IDs of the first seven are those ``nvidia-smi mig -lgip``
#: lists on these GPUs; the variants' IDs are this simulation's own (the naming rule under
#: test maps the *index* to the name, whatever ID a driver gives it).
SIM_GI_PROFILES: dict[str, tuple[int, int, int]] = {
    "1g.10gb": (0, 19, 1),
    "1g.10gb+me": (7, 20, 1),
    "1g.20gb": (9, 15, 2),
    "2g.20gb": (1, 14, 2),
    "3g.40gb": (2, 9, 4),
    "4g.40gb": (3, 5, 4),
    "7g.80gb": (4, 0, 8),
    "1g.10gb-me": (13, 47, 1),
    "2g.20gb-me": (14, 48, 2),
    "1g.10gb+me.all": (15, 49, 1),
    "2g.20gb+me.all": (16, 50, 2),
    "1g.10gb+gfx": (10, 51, 1),
    "2g.20gb+gfx": (11, 52, 2),
    "4g.40gb+gfx": (12, 53, 4),
}
#: Compute slices → NVML compute-instance profile index (its ID in this simulation too).
SIM_CI_PROFILES: dict[int, int] = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4}


def sim_mig_profile(name: str) -> tuple[int, int, int, int]:
    """(GI profile index, GI profile ID, CI profile index, memory eighths) of a simulated
    MIG profile such as ``1g.10gb+me`` or ``1c.2g.20gb``. Raises ValueError otherwise."""
    profile = parse_profile(name)
    instance = str(
        MigProfile(
            profile.slices, profile.slices, profile.gigabytes, profile.attributes, profile.negative
        )
    )
    if instance not in SIM_GI_PROFILES or profile.compute not in SIM_CI_PROFILES:
        raise ValueError(
            f"MIG profile {name!r} does not exist on a simulated 80 GB GPU (GPU instance "
            f"profiles: {', '.join(SIM_GI_PROFILES)}; compute slices 1, 2, 3, 4, 7)"
        )
    if profile.compute > profile.slices:
        raise ValueError(f"MIG profile {name!r}: more compute slices than GPU slices")
    gi_index, gi_id, eighths = SIM_GI_PROFILES[instance]
    return gi_index, gi_id, SIM_CI_PROFILES[profile.compute], eighths


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
    #: The driver offers NVML_FI_DEV_GET_GPU_RECOVERY_ACTION for this GPU.
    recovery_action_supported: bool = False
    compute_capability: tuple[int, int] = (8, 0)
    #: The simulation's own VBIOS version (in the format nvidia-smi shows).
    vbios_version: str = DEFAULT_VBIOS
    #: The bridges above it in sysfs, from its root complex (``pci0000:15/0000:15:01.0/…``);
    #: empty: one made up from its NUMA node and PCIe switch.
    pcie_bus: str = ""

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
    and NVSwitches (``nvswitches`` of them, each joined to every GPU by ``nvswitch_links``
    links, or by the count given per switch)."""

    gpus: list[SimGpu]
    nvlinks: list[tuple[int, int, int]] = field(default_factory=list)
    nvswitches: int = 0
    nvswitch_links: int | tuple[int, ...] = 0
    #: PCI domain the NVSwitches' remote IDs are given in (one no GPU uses).
    nvswitch_domain: int = 0
    driver_version: str = DRIVER_VERSION
    cuda_driver_version: int = CUDA_DRIVER_VERSION
    #: ``/dev/nvidia-modeset`` exists (the nvidia-modeset module is loaded).
    modeset: bool = False
    #: The NVIDIA Container Toolkit has written its CDI spec (``/var/run/cdi/nvidia.yaml``).
    toolkit_cdi_spec: bool = True

    def nvswitch_bus_id(self, switch: int) -> str:
        return f"{self.nvswitch_domain:08X}:{0xC0 + switch:02X}:00.0"

    def links_on(self, switch: int) -> int:
        links = self.nvswitch_links
        return links[switch] if isinstance(links, tuple) else links

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


#: The GPUs' PCI addresses on a DGX H100, in NVML's order, as nvidia-smi lists them on that
#: system; each sits behind the PCIe switch of one compute ConnectX-7 (buses 18, 40, 4f, 5e,
#: 9a, c0, ce, dc in the "Network Ports" table of the NVIDIA DGX H100/H200 User Guide).
DGX_H100_GPU_BUSES = (0x1B, 0x43, 0x52, 0x61, 0x9D, 0xC3, 0xD1, 0xDF)


def dgx_h100_gpu_bridges(bus: int) -> str:
    """The bridges above the DGX H100 GPU on ``bus``: the PCIe switch it shares with its
    compute NIC (three buses below it), so both have one root complex, as the RDMA
    simulation lays out the NIC's side (``devicehost_rdma.simulated.dgx_h100``: root port
    ``<nic bus - 3>:01.0``, switch upstream ``<nic bus - 2>:00.0``, the NIC's downstream
    port ``<nic bus - 1>:00.0``); the GPU hangs off a second downstream port of that switch.
    Real bridge addresses differ; the grouping, which ``resource.kubernetes.io/pcieRoot``
    shows, is the machine's."""
    nic = bus - 3
    return (
        f"pci0000:{nic - 3:02x}/0000:{nic - 3:02x}:01.0/0000:{nic - 2:02x}:00.0/"
        f"0000:{nic - 1:02x}:04.0"
    )


def dgx_h100_node(mig: Mapping[int, Iterable[str]] | None = None) -> SimNode:
    """The GPU part of an NVIDIA DGX H100 (source: NVIDIA DGX H100/H200 User Guide,
    "Introduction: hardware overview" and "Network Connections, Cables, and Adaptors"):
    8 H100 SXM5 80GB (``NVIDIA H100 80GB HBM3``, PCI ID 10de:2330, 81559 MiB as NVML
    reports it, compute capability 9.0), each with 18 NVLink 4 links to four NVSwitch
    chips (5, 4, 4, 5 links), GPUs 0-3 on NUMA node 0 and 4-7 on NUMA node 1 (two CPU
    sockets). The driver is an R570 one that offers the GPU recovery-action field."""
    mig = mig or {}
    return SimNode(
        gpus=[
            SimGpu(
                index=i,
                uuid=sim_uuid(100 + i),
                bus_id=f"00000000:{bus:02X}:00.0",
                numa_node=0 if i < 4 else 1,
                pcie_switch=i,
                minor=i,
                name="NVIDIA H100 80GB HBM3",
                pci_device_id="0x2330",
                memory_mib=81559,
                mig_profiles=tuple(mig.get(i, ())),
                recovery_action_supported=True,
                compute_capability=(9, 0),
                vbios_version="96.00.00.00.01",
                pcie_bus=dgx_h100_gpu_bridges(bus),
            )
            for i, bus in enumerate(DGX_H100_GPU_BUSES)
        ],
        nvswitches=4,
        nvswitch_links=(5, 4, 4, 5),
        nvswitch_domain=1,
        driver_version="570.148.08",
        cuda_driver_version=12080,
        modeset=True,
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
    remap_failed: bool = False
    uncorrected_rows: int = 0
    recovery_action: int = GPU_RECOVERY_ACTION_NONE
    energy_mj: int = 0


class SimulatedNvml:
    """``Nvml`` over a ``SimNode``. Thread-safe; ``event_set_wait`` blocks like NVML's."""

    def __init__(self, node: SimNode | None = None) -> None:
        self.node = node or default_node()
        self._handles = [_GpuHandle(g.index) for g in self.node.gpus]
        self._state = {g.index: _GpuState() for g in self.node.gpus}
        self._migs = {g.index: g.mig_devices() for g in self.node.gpus}
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
            remotes += [self.node.nvswitch_bus_id(switch)] * self.node.links_on(switch)
        return remotes

    # -- what a test or the demo does to the hardware ------------------------------------

    def xid(
        self,
        index: int,
        xid: int,
        gpu_instance: int | None = None,
        compute_instance: int | None = None,
    ) -> None:
        """An Xid event on GPU ``index``, scoped to one GPU instance (and one of its compute
        instances) when given, as NVML's event data carries both IDs."""
        self._deliver(index, EVENT_XID_CRITICAL_ERROR, xid, gpu_instance, compute_instance)

    def _needs(self, index: int, action: int) -> None:
        """Raise the GPU's recovery action (where the driver offers the field)."""
        state = self._state[index]
        if self.node.gpus[index].recovery_action_supported:
            state.recovery_action = max(state.recovery_action, action)

    def double_bit_ecc(self, index: int) -> None:
        """A double-bit ECC error event; leaves a row remap pending (applied at reset)."""
        with self._cond:
            state = self._state[index]
            state.remap_pending, state.uncorrected_rows = True, state.uncorrected_rows + 1
        self._deliver(index, EVENT_DOUBLE_BIT_ECC_ERROR, 0, None, None)

    def fault(self, index: int) -> None:
        """Xid 48 (double-bit ECC): a row remap pending, and a GPU reset needed."""
        with self._cond:
            state = self._state[index]
            state.remap_pending, state.uncorrected_rows = True, state.uncorrected_rows + 1
            self._needs(index, GPU_RECOVERY_ACTION_GPU_RESET)
        self.xid(index, XID_DOUBLE_BIT_ECC)

    def remap_failure(self, index: int) -> None:
        """A row remap failed (Xid 64): the GPU's memory cannot protect itself any more."""
        with self._cond:
            self._state[index].remap_failed = True
            self._needs(index, GPU_RECOVERY_ACTION_GPU_RESET)
        self.xid(index, XID_REMAP_FAILURE)

    def set_recovery_action(self, index: int, action: int) -> None:
        """What the driver's recovery-action field reports, without any event."""
        with self._cond:
            self._state[index].recovery_action = action

    def lose(self, index: int) -> None:
        """Xid 79: the GPU falls off the bus; every later call on it is GPU_IS_LOST, and so
        is waiting on an event set it is registered with (once its events are read)."""
        self.xid(index, XID_FALLEN_OFF_BUS)
        with self._cond:
            self._state[index].lost = True
            self._needs(index, GPU_RECOVERY_ACTION_NODE_REBOOT)

    def reset(self, index: int) -> None:
        """A GPU reset (or reboot): back on the bus, no remap pending, nothing to recover,
        and the energy counter starts again from zero."""
        with self._cond:
            self._state[index] = _GpuState()

    def destroy_mig(self, index: int, gpu_instance: int) -> None:
        """Delete the MIG device of ``gpu_instance`` on GPU ``index`` (nvidia-smi mig -dci/-dgi)."""
        with self._cond:
            self._migs[index] = [m for m in self._migs[index] if m.gpu_instance != gpu_instance]

    def _deliver(
        self,
        index: int,
        event_type: int,
        data: int,
        gpu_instance: int | None,
        compute_instance: int | None,
    ) -> None:
        event = NvmlEvent(
            self._handles[index],
            event_type,
            data,
            NO_INSTANCE if gpu_instance is None else gpu_instance,
            NO_INSTANCE if compute_instance is None else compute_instance,
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
        with self._cond:
            if handle.mig not in self._migs[handle.gpu]:
                raise NvmlError(NVML_ERROR_INVALID_ARGUMENT)  # a deleted instance
        return handle.mig

    def init(self) -> None:
        self.initialised = True

    def shutdown(self) -> None:
        self.initialised = False

    def system_driver_version(self) -> str:
        return self.node.driver_version

    def system_cuda_driver_version(self) -> int:
        return self.node.cuda_driver_version

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

    def device_cuda_compute_capability(self, device: Handle) -> tuple[int, int]:
        return self._gpu(device).compute_capability

    def device_vbios_version(self, device: Handle) -> str:
        return self._gpu(device).vbios_version

    def device_mig_mode(self, device: Handle) -> tuple[int, int]:
        enabled = int(self._gpu(device).mig_enabled)
        return enabled, enabled

    def device_max_mig_device_count(self, device: Handle) -> int:
        return 7 if self._gpu(device).mig_enabled else 0

    def device_mig_device_handle_by_index(self, device: Handle, index: int) -> Handle:
        gpu = self._gpu(device)
        with self._cond:
            migs = list(self._migs[gpu.index])
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
        name = self._mig(mig).profile
        profile = parse_profile(name)
        eighths = sim_mig_profile(name)[3]
        # A little under the nominal share, as real MIG devices report.
        memory_mb = int(gpu.memory_mib * eighths / 8 * 0.96)
        return MigAttributes(profile.slices, profile.compute, memory_mb)

    def _instance(self, device: Handle, gpu_instance: int) -> SimMig:
        gpu = self._gpu(device)
        with self._cond:
            for mig in self._migs[gpu.index]:
                if mig.gpu_instance == gpu_instance:
                    return mig
        raise NvmlError(NVML_ERROR_NOT_FOUND)

    def gpu_instance_profile_id(self, device: Handle, gpu_instance: int) -> int:
        return sim_mig_profile(self._instance(device, gpu_instance).profile)[1]

    def gpu_instance_profile_info_id(self, device: Handle, profile: int) -> int:
        if not self._gpu(device).mig_enabled:
            raise NvmlError(NVML_ERROR_NOT_SUPPORTED)
        for index, profile_id, _ in SIM_GI_PROFILES.values():
            if index == profile:
                return profile_id
        raise NvmlError(NVML_ERROR_NOT_SUPPORTED)

    def compute_instance_profile_id(
        self, device: Handle, gpu_instance: int, compute_instance: int
    ) -> int:
        mig = self._instance(device, gpu_instance)
        if mig.compute_instance != compute_instance:
            raise NvmlError(NVML_ERROR_NOT_FOUND)
        return sim_mig_profile(mig.profile)[2]

    def compute_instance_profile_info_id(
        self, device: Handle, gpu_instance: int, profile: int, engine_profile: int
    ) -> int:
        self._instance(device, gpu_instance)
        if engine_profile != 0 or profile not in SIM_CI_PROFILES.values():
            raise NvmlError(NVML_ERROR_INVALID_ARGUMENT)
        return profile

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
        if gpu.mig_enabled:
            # NVML documents NOT_SUPPORTED for this call while MIG is enabled.
            raise NvmlError(NVML_ERROR_NOT_SUPPORTED)
        with self._cond:
            state = self._state[gpu.index]
            return RemappedRows(0, state.uncorrected_rows, state.remap_pending, state.remap_failed)

    def device_field_value(self, device: Handle, field_id: int) -> int:
        gpu = self._gpu(device)
        if field_id != FI_DEV_GET_GPU_RECOVERY_ACTION or not gpu.recovery_action_supported:
            raise NvmlError(NVML_ERROR_NOT_SUPPORTED)
        with self._cond:
            return self._state[gpu.index].recovery_action

    def device_total_energy_consumption(self, device: Handle) -> int:
        gpu = self._gpu(device)
        with self._cond:
            state = self._state[gpu.index]
            state.energy_mj += _ENERGY_STEP_MJ
            return state.energy_mj

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
