"""The real NVML, through ``pynvml`` (nvidia-ml-py): one thin method per NVML call.

Kept mechanical on purpose: every decision lives above the ``Nvml`` interface, where the
simulated library exercises it. This module only converts types and turns
``pynvml.NVMLError`` into ``NvmlError`` with the same code.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import pynvml  # type: ignore[import-untyped]

from devicehost_nvidia.nvml import (
    NVML_ERROR_NOT_FOUND,
    Handle,
    MigAttributes,
    NvmlError,
    NvmlEvent,
    RemappedRows,
)

T = TypeVar("T")

#: nvmlValueType_t → the member of the nvmlValue_t union that holds the value.
_VALUE_MEMBERS = {1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _call(fn: Callable[..., T], *args: Any) -> T:
    try:
        return fn(*args)
    except pynvml.NVMLError as exc:
        raise NvmlError(int(exc.value), str(exc)) from None


def _address(handle: Any) -> int:
    """A device handle's pointer value: how an event's device is matched to its handle."""
    return int(ctypes.cast(handle, ctypes.c_void_p).value or 0)


class PynvmlLibrary:
    """``Nvml`` on the real library. ``init`` raises NvmlError where NVML cannot load.

    ``library`` is the path of ``libnvidia-ml.so.1`` to load (a driver container's copy);
    None lets the dynamic loader find it as usual."""

    def __init__(self, library: str | None = None) -> None:
        self._library = library
        self._registered: dict[int, Handle] = {}
        self._lock = threading.Lock()

    def init(self) -> None:
        if self._library is not None and getattr(pynvml, "nvmlLib", None) is None:
            # pynvml loads "libnvidia-ml.so.1" by name unless its module-level handle is
            # already set; setting it is how a driver root's copy gets used.
            try:
                pynvml.nvmlLib = ctypes.CDLL(self._library)
            except OSError as exc:
                raise NvmlError(12, f"cannot load {self._library}: {exc}") from None
        _call(pynvml.nvmlInit)

    def shutdown(self) -> None:
        _call(pynvml.nvmlShutdown)

    def system_driver_version(self) -> str:
        return _text(_call(pynvml.nvmlSystemGetDriverVersion))

    def system_cuda_driver_version(self) -> int:
        return int(_call(pynvml.nvmlSystemGetCudaDriverVersion))

    def device_count(self) -> int:
        return int(_call(pynvml.nvmlDeviceGetCount))

    def device_handle_by_index(self, index: int) -> Handle:
        return _call(pynvml.nvmlDeviceGetHandleByIndex, index)

    def device_uuid(self, device: Handle) -> str:
        return _text(_call(pynvml.nvmlDeviceGetUUID, device))

    def device_name(self, device: Handle) -> str:
        return _text(_call(pynvml.nvmlDeviceGetName, device))

    def device_pci_bus_id(self, device: Handle) -> str:
        return _text(_call(pynvml.nvmlDeviceGetPciInfo, device).busId)

    def device_minor_number(self, device: Handle) -> int:
        return int(_call(pynvml.nvmlDeviceGetMinorNumber, device))

    def device_memory_total(self, device: Handle) -> int:
        return int(_call(pynvml.nvmlDeviceGetMemoryInfo, device).total)

    def device_vbios_version(self, device: Handle) -> str:
        return _text(_call(pynvml.nvmlDeviceGetVbiosVersion, device))

    def device_cuda_compute_capability(self, device: Handle) -> tuple[int, int]:
        major, minor = _call(pynvml.nvmlDeviceGetCudaComputeCapability, device)
        return int(major), int(minor)

    def device_mig_mode(self, device: Handle) -> tuple[int, int]:
        current, pending = _call(pynvml.nvmlDeviceGetMigMode, device)
        return int(current), int(pending)

    def device_max_mig_device_count(self, device: Handle) -> int:
        return int(_call(pynvml.nvmlDeviceGetMaxMigDeviceCount, device))

    def device_mig_device_handle_by_index(self, device: Handle, index: int) -> Handle:
        handle = _call(pynvml.nvmlDeviceGetMigDeviceHandleByIndex, device, index)
        if not _address(handle):
            raise NvmlError(NVML_ERROR_NOT_FOUND)
        return handle

    def device_gpu_instance_id(self, mig: Handle) -> int:
        return int(_call(pynvml.nvmlDeviceGetGpuInstanceId, mig))

    def device_compute_instance_id(self, mig: Handle) -> int:
        return int(_call(pynvml.nvmlDeviceGetComputeInstanceId, mig))

    def device_attributes(self, mig: Handle) -> MigAttributes:
        attrs = _call(pynvml.nvmlDeviceGetAttributes, mig)
        return MigAttributes(
            int(attrs.gpuInstanceSliceCount),
            int(attrs.computeInstanceSliceCount),
            int(attrs.memorySizeMB),
        )

    def gpu_instance_profile_id(self, device: Handle, gpu_instance: int) -> int:
        instance = _call(pynvml.nvmlDeviceGetGpuInstanceById, device, gpu_instance)
        return int(_call(pynvml.nvmlGpuInstanceGetInfo, instance).profileId)

    def gpu_instance_profile_info_id(self, device: Handle, profile: int) -> int:
        return int(_call(pynvml.nvmlDeviceGetGpuInstanceProfileInfo, device, profile).id)

    def compute_instance_profile_id(
        self, device: Handle, gpu_instance: int, compute_instance: int
    ) -> int:
        instance = _call(pynvml.nvmlDeviceGetGpuInstanceById, device, gpu_instance)
        compute = _call(pynvml.nvmlGpuInstanceGetComputeInstanceById, instance, compute_instance)
        return int(_call(pynvml.nvmlComputeInstanceGetInfo, compute).profileId)

    def compute_instance_profile_info_id(
        self, device: Handle, gpu_instance: int, profile: int, engine_profile: int
    ) -> int:
        instance = _call(pynvml.nvmlDeviceGetGpuInstanceById, device, gpu_instance)
        info = _call(
            pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo, instance, profile, engine_profile
        )
        return int(info.id)

    def device_nvlink_state(self, device: Handle, link: int) -> bool:
        return bool(_call(pynvml.nvmlDeviceGetNvLinkState, device, link))

    def device_nvlink_remote_pci_bus_id(self, device: Handle, link: int) -> str:
        return _text(_call(pynvml.nvmlDeviceGetNvLinkRemotePciInfo, device, link).busId)

    def device_topology_common_ancestor(self, first: Handle, second: Handle) -> int:
        return int(_call(pynvml.nvmlDeviceGetTopologyCommonAncestor, first, second))

    def device_remapped_rows(self, device: Handle) -> RemappedRows:
        corrected, uncorrected, pending, failure = _call(pynvml.nvmlDeviceGetRemappedRows, device)
        return RemappedRows(int(corrected), int(uncorrected), bool(pending), bool(failure))

    def device_field_value(self, device: Handle, field_id: int) -> int:
        (value,) = _call(pynvml.nvmlDeviceGetFieldValues, device, [field_id])
        if int(value.nvmlReturn) != pynvml.NVML_SUCCESS:
            raise NvmlError(int(value.nvmlReturn))
        member = _VALUE_MEMBERS.get(int(value.valueType), "ullVal")
        return int(getattr(value.value, member))

    def device_total_energy_consumption(self, device: Handle) -> int:
        return int(_call(pynvml.nvmlDeviceGetTotalEnergyConsumption, device))

    def device_supported_event_types(self, device: Handle) -> int:
        return int(_call(pynvml.nvmlDeviceGetSupportedEventTypes, device))

    def event_set_create(self) -> Handle:
        return _call(pynvml.nvmlEventSetCreate)

    def device_register_events(self, device: Handle, event_types: int, event_set: Handle) -> None:
        _call(pynvml.nvmlDeviceRegisterEvents, device, event_types, event_set)
        with self._lock:
            self._registered[_address(device)] = device

    def event_set_wait(self, event_set: Handle, timeout_ms: int) -> NvmlEvent:
        data = _call(pynvml.nvmlEventSetWait, event_set, timeout_ms)
        with self._lock:
            device = self._registered.get(_address(data.device), data.device)
        return NvmlEvent(
            device,
            int(data.eventType),
            int(data.eventData),
            int(data.gpuInstanceId),
            int(data.computeInstanceId),
        )

    def event_set_free(self, event_set: Handle) -> None:
        _call(pynvml.nvmlEventSetFree, event_set)
