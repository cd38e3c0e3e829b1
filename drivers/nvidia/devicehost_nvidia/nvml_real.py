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
    """``Nvml`` on the real library. ``init`` raises NvmlError where NVML cannot load."""

    def __init__(self) -> None:
        self._registered: dict[int, Handle] = {}
        self._lock = threading.Lock()

    def init(self) -> None:
        _call(pynvml.nvmlInit)

    def shutdown(self) -> None:
        _call(pynvml.nvmlShutdown)

    def system_driver_version(self) -> str:
        return _text(_call(pynvml.nvmlSystemGetDriverVersion))

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

    def device_nvlink_state(self, device: Handle, link: int) -> bool:
        return bool(_call(pynvml.nvmlDeviceGetNvLinkState, device, link))

    def device_nvlink_remote_pci_bus_id(self, device: Handle, link: int) -> str:
        return _text(_call(pynvml.nvmlDeviceGetNvLinkRemotePciInfo, device, link).busId)

    def device_topology_common_ancestor(self, first: Handle, second: Handle) -> int:
        return int(_call(pynvml.nvmlDeviceGetTopologyCommonAncestor, first, second))

    def device_remapped_rows(self, device: Handle) -> RemappedRows:
        corrected, uncorrected, pending, failure = _call(pynvml.nvmlDeviceGetRemappedRows, device)
        return RemappedRows(int(corrected), int(uncorrected), bool(pending), bool(failure))

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
