"""Find the node's GPUs and MIG devices through NVML, and each GPU's NUMA node in sysfs.

A GPU that NVML cannot describe (lost at start, an error on a query) is left out with a
note naming it and the NVML error: one bad GPU never hides the others. MIG devices are
listed again on every scan (``mig_devices``), so a deleted instance disappears.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path

from devicehost.sysfs import normalise_pci_address, pci_numa_node
from devicehost_nvidia.mig import MigProfile, profile_from_ids, profile_from_slices
from devicehost_nvidia.nvml import (
    COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT,
    COMPUTE_INSTANCE_PROFILE_COUNT,
    GPU_INSTANCE_PROFILE_COUNT,
    NVML_ERROR_INVALID_ARGUMENT,
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
    mig_capable: bool = False
    compute_capability: tuple[int, int] | None = None
    vbios_version: str = ""
    handle: Handle = field(repr=False)


@dataclass(frozen=True, kw_only=True, eq=False)
class MigDevice:
    """One MIG device (a GPU instance with one compute instance) on ``gpu``."""

    gpu: Gpu
    index: int
    uuid: str
    gpu_instance: int
    compute_instance: int
    profile: MigProfile


@dataclass
class Discovery:
    driver_version: str = ""
    cuda_driver_version: int | None = None
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


def _mig_mode(nvml: Nvml, handle: Handle) -> tuple[int, int] | None:
    """(current, pending), or None on a GPU without MIG."""
    try:
        return nvml.device_mig_mode(handle)
    except NvmlError as exc:
        if exc.code == NVML_ERROR_NOT_SUPPORTED:
            return None
        raise


def _compute_capability(nvml: Nvml, handle: Handle) -> tuple[int, int] | None:
    try:
        return nvml.device_cuda_compute_capability(handle)
    except NvmlError:
        return None


def _vbios_version(nvml: Nvml, handle: Handle) -> str:
    try:
        return nvml.device_vbios_version(handle)
    except NvmlError:
        return ""


def _gpu(nvml: Nvml, root: Path, index: int) -> tuple[Gpu, str | None]:
    """The GPU at ``index`` and a note when its MIG mode is about to change."""
    handle = nvml.device_handle_by_index(index)
    bus_id = normalise_pci_address(nvml.device_pci_bus_id(handle))
    mode = _mig_mode(nvml, handle)
    current, pending = mode or (0, 0)
    gpu = Gpu(
        index=index,
        uuid=nvml.device_uuid(handle),
        name=nvml.device_name(handle),
        bus_id=bus_id,
        minor=_minor(nvml, handle),
        numa_node=pci_numa_node(root, bus_id),
        memory_bytes=nvml.device_memory_total(handle),
        mig_enabled=bool(current),
        mig_capable=mode is not None,
        compute_capability=_compute_capability(nvml, handle),
        vbios_version=_vbios_version(nvml, handle),
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


def _skippable(exc: NvmlError) -> bool:
    return exc.code in (NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_INVALID_ARGUMENT)


def _profile_index(lookup: dict[int, int], profile_id: int) -> int | None:
    return next((index for index, pid in lookup.items() if pid == profile_id), None)


class MigProfiles:
    """Names MIG devices from their GPU- and compute-instance profile IDs, the way go-nvlib's
    ``migdevice.GetProfile`` does: NVML gives an instance's profile *ID*; the profile
    *index* that fixes slices and variants is the one whose profile info has that ID."""

    def __init__(self, nvml: Nvml) -> None:
        self.nvml = nvml
        self._gi: dict[str, dict[int, int]] = {}

    def _gi_ids(self, gpu: Gpu) -> dict[int, int]:
        if gpu.uuid not in self._gi:
            ids: dict[int, int] = {}
            for index in range(GPU_INSTANCE_PROFILE_COUNT):
                try:
                    ids[index] = self.nvml.gpu_instance_profile_info_id(gpu.handle, index)
                except NvmlError as exc:
                    if not _skippable(exc):
                        raise
            self._gi[gpu.uuid] = ids
        return self._gi[gpu.uuid]

    def _ci_index(self, gpu: Gpu, gi: int, ci: int) -> int | None:
        wanted = self.nvml.compute_instance_profile_id(gpu.handle, gi, ci)
        for index in range(COMPUTE_INSTANCE_PROFILE_COUNT):
            for engine in range(COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT):
                try:
                    if (
                        self.nvml.compute_instance_profile_info_id(gpu.handle, gi, index, engine)
                        == wanted
                    ):
                        return index
                except NvmlError as exc:
                    if not _skippable(exc):
                        raise
        return None

    def name(self, gpu: Gpu, handle: Handle, gi: int, ci: int) -> MigProfile:
        attributes = self.nvml.device_attributes(handle)
        try:
            gi_index = _profile_index(
                self._gi_ids(gpu), self.nvml.gpu_instance_profile_id(gpu.handle, gi)
            )
            ci_index = self._ci_index(gpu, gi, ci)
        except NvmlError as exc:
            if not _skippable(exc):
                raise
            gi_index = ci_index = None
        if gi_index is None or ci_index is None:
            # An older driver that cannot name the profile: slices and memory, no variants.
            return profile_from_slices(
                attributes.gpu_instance_slice_count,
                attributes.compute_instance_slice_count,
                attributes.memory_size_mb,
                gpu.memory_bytes,
            )
        return profile_from_ids(gi_index, ci_index, attributes.memory_size_mb, gpu.memory_bytes)


def mig_devices(nvml: Nvml, gpu: Gpu, profiles: MigProfiles) -> list[MigDevice]:
    """The MIG devices that exist on ``gpu`` now."""
    migs: list[MigDevice] = []
    for slot in range(nvml.device_max_mig_device_count(gpu.handle)):
        try:
            handle = nvml.device_mig_device_handle_by_index(gpu.handle, slot)
        except NvmlError as exc:
            if exc.code == NVML_ERROR_NOT_FOUND:
                continue
            raise
        gi = nvml.device_gpu_instance_id(handle)
        ci = nvml.device_compute_instance_id(handle)
        migs.append(
            MigDevice(
                gpu=gpu,
                index=slot,
                uuid=nvml.device_uuid(handle),
                gpu_instance=gi,
                compute_instance=ci,
                profile=profiles.name(gpu, handle, gi, ci),
            )
        )
    return migs


def rescan_migs(nvml: Nvml, found: Discovery, profiles: MigProfiles) -> list[str]:
    """List every MIG-enabled GPU's MIG devices again; return notes on GPUs that failed."""
    notes: list[str] = []
    migs: list[MigDevice] = []
    for gpu in found.gpus:
        if not gpu.mig_enabled:
            continue
        try:
            migs += mig_devices(nvml, gpu, profiles)
        except NvmlError as exc:
            notes.append(
                f"GPU {gpu.index} ({gpu.uuid}): cannot list its MIG devices ({exc}); none "
                "advertised"
            )
    found.migs = migs
    return notes


def discover(nvml: Nvml, root: Path, profiles: MigProfiles) -> Discovery:
    """Every GPU NVML can describe, with its MIG devices when MIG is enabled."""
    found = Discovery(driver_version=nvml.system_driver_version())
    with contextlib.suppress(NvmlError):  # an old driver: no CUDA version label
        found.cuda_driver_version = nvml.system_cuda_driver_version()
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
    found.notes += rescan_migs(nvml, found, profiles)
    return found
