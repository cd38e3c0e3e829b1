"""Find the node's GPUs and MIG devices through NVML, and each GPU's NUMA node in sysfs.

A GPU that NVML cannot describe (lost at start, an error on a query) is left out with a
note naming it and the NVML error: one bad GPU never hides the others.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from devicehost.sysfs import normalise_pci_address, pci_numa_node
from devicehost_nvidia.mig import profile_name
from devicehost_nvidia.nvml import (
    NVML_ERROR_NOT_FOUND,
    NVML_ERROR_NOT_SUPPORTED,
    Handle,
    Nvml,
    NvmlError,
)


@dataclass(frozen=True, kw_only=True, eq=False)
class Gpu:
    """One physical GPU. ``bus_id`` is in sysfs form (``0000:07:00.0``)."""

    index: int
    uuid: str
    name: str
    bus_id: str
    minor: int | None
    numa_node: int | None
    memory_bytes: int
    mig_enabled: bool
    handle: Handle = field(repr=False)


@dataclass(frozen=True, kw_only=True, eq=False)
class MigDevice:
    """One MIG device (a GPU instance with one compute instance) on ``gpu``."""

    gpu: Gpu
    index: int
    uuid: str
    gpu_instance: int
    compute_instance: int
    profile: str


@dataclass
class Discovery:
    driver_version: str = ""
    gpus: list[Gpu] = field(default_factory=list)
    migs: list[MigDevice] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def migs_of(self, gpu: Gpu) -> list[MigDevice]:
        return [m for m in self.migs if m.gpu is gpu]


def _minor(nvml: Nvml, handle: Handle) -> int | None:
    """The /dev/nvidiaN number; some platforms do not report one."""
    try:
        return nvml.device_minor_number(handle)
    except NvmlError as exc:
        if exc.code == NVML_ERROR_NOT_SUPPORTED:
            return None
        raise


def _mig_mode(nvml: Nvml, handle: Handle) -> tuple[int, int]:
    try:
        return nvml.device_mig_mode(handle)
    except NvmlError as exc:
        if exc.code == NVML_ERROR_NOT_SUPPORTED:
            return 0, 0
        raise


def _gpu(nvml: Nvml, root: Path, index: int) -> tuple[Gpu, str | None]:
    """The GPU at ``index`` and a note when its MIG mode is about to change."""
    handle = nvml.device_handle_by_index(index)
    bus_id = normalise_pci_address(nvml.device_pci_bus_id(handle))
    current, pending = _mig_mode(nvml, handle)
    gpu = Gpu(
        index=index,
        uuid=nvml.device_uuid(handle),
        name=nvml.device_name(handle),
        bus_id=bus_id,
        minor=_minor(nvml, handle),
        numa_node=pci_numa_node(root, bus_id),
        memory_bytes=nvml.device_memory_total(handle),
        mig_enabled=bool(current),
        handle=handle,
    )
    note = None
    if current != pending:
        note = (
            f"GPU {index} ({gpu.uuid}): MIG mode change to "
            f"{'enabled' if pending else 'disabled'} is pending; it takes effect after a "
            "GPU reset"
        )
    return gpu, note


def _mig_devices(nvml: Nvml, gpu: Gpu) -> list[MigDevice]:
    migs: list[MigDevice] = []
    for slot in range(nvml.device_max_mig_device_count(gpu.handle)):
        try:
            handle = nvml.device_mig_device_handle_by_index(gpu.handle, slot)
        except NvmlError as exc:
            if exc.code == NVML_ERROR_NOT_FOUND:
                continue
            raise
        migs.append(
            MigDevice(
                gpu=gpu,
                index=slot,
                uuid=nvml.device_uuid(handle),
                gpu_instance=nvml.device_gpu_instance_id(handle),
                compute_instance=nvml.device_compute_instance_id(handle),
                profile=profile_name(nvml.device_attributes(handle), gpu.memory_bytes),
            )
        )
    return migs


def discover(nvml: Nvml, root: Path) -> Discovery:
    """Every GPU NVML can describe, with its MIG devices when MIG is enabled."""
    found = Discovery(driver_version=nvml.system_driver_version())
    for index in range(nvml.device_count()):
        try:
            gpu, note = _gpu(nvml, root, index)
        except NvmlError as exc:
            found.notes.append(f"GPU {index}: NVML cannot describe it ({exc}); not advertised")
            continue
        if note:
            found.notes.append(note)
        if gpu.numa_node is None:
            found.notes.append(
                f"GPU {index} ({gpu.uuid}): no NUMA node in sysfs for PCI "
                f"device {gpu.bus_id}; advertised without topology"
            )
        found.gpus.append(gpu)
        if gpu.mig_enabled:
            try:
                found.migs += _mig_devices(nvml, gpu)
            except NvmlError as exc:
                found.notes.append(
                    f"GPU {index} ({gpu.uuid}): cannot list its MIG devices "
                    f"({exc}); none advertised"
                )
    return found
