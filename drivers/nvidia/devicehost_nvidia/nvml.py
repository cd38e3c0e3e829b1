"""The narrow NVML interface: only the calls this driver makes, nothing more.

Everything above this module (discovery, health, topology, allocation) talks to an
``Nvml``; below it sit two implementations: ``PynvmlLibrary`` wraps the real library
through ``pynvml``, and ``SimulatedNvml`` models a node for tests and the demo. Both raise
``NvmlError`` carrying NVML's own return codes, so the code above behaves identically on
either. Handles are opaque: an implementation returns them and takes them back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

#: An opaque device (GPU or MIG device) or event-set handle.
Handle = object

# NVML return codes (nvmlReturn_t), the ones this driver tells apart.
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_UNKNOWN = 999

# Event types (nvmlEventType*), a bit mask.
EVENT_DOUBLE_BIT_ECC_ERROR = 0x2
EVENT_XID_CRITICAL_ERROR = 0x8

# GPU-to-GPU PCIe topology levels (nvmlGpuTopologyLevel_t): lower is closer.
TOPOLOGY_INTERNAL = 0
TOPOLOGY_SINGLE = 10
TOPOLOGY_MULTIPLE = 20
TOPOLOGY_HOSTBRIDGE = 30
TOPOLOGY_NODE = 40
TOPOLOGY_SYSTEM = 50

#: "Not attributable to one MIG instance" in event data (NVML_VALUE_NOT_AVAILABLE).
NO_INSTANCE = 0xFFFFFFFF
#: NVML_NVLINK_MAX_LINKS in current NVML; older GPUs stop earlier (INVALID_ARGUMENT).
NVLINK_MAX_LINKS = 36

#: Field ``NVML_FI_DEV_GET_GPU_RECOVERY_ACTION`` (nvmlDeviceGetFieldValues): what the GPU needs
#: before it can take work again. Values are ``nvmlDeviceGpuRecoveryAction_t`` (go-nvml
#: ``gen/nvml/nvml.h``; nvidia-ml-py adds BUS_RESET and SYSTEM_REBOOT).
FI_DEV_GET_GPU_RECOVERY_ACTION = 230
GPU_RECOVERY_ACTION_NONE = 0
GPU_RECOVERY_ACTION_GPU_RESET = 1
GPU_RECOVERY_ACTION_NODE_REBOOT = 2
GPU_RECOVERY_ACTION_DRAIN_P2P = 3
GPU_RECOVERY_ACTION_DRAIN_AND_RESET = 4
GPU_RECOVERY_ACTION_RECOVER_IMEX_DOMAIN = 5
GPU_RECOVERY_ACTION_BUS_RESET = 6
GPU_RECOVERY_ACTION_SYSTEM_REBOOT = 7

#: How many GPU- and compute-instance profiles NVML knows (``NVML_GPU_INSTANCE_PROFILE_COUNT``,
#: ``NVML_COMPUTE_INSTANCE_PROFILE_COUNT``, ``NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT``).
GPU_INSTANCE_PROFILE_COUNT = 18
COMPUTE_INSTANCE_PROFILE_COUNT = 9
COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT = 1

_ERROR_NAMES = {
    NVML_ERROR_INVALID_ARGUMENT: "invalid argument",
    NVML_ERROR_NOT_SUPPORTED: "not supported",
    NVML_ERROR_NOT_FOUND: "not found",
    NVML_ERROR_DRIVER_NOT_LOADED: "driver not loaded",
    NVML_ERROR_TIMEOUT: "timeout",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML shared library not found",
    NVML_ERROR_FUNCTION_NOT_FOUND: "function not found",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_RESET_REQUIRED: "GPU requires reset",
}


class NvmlError(Exception):
    """An NVML call failed; ``code`` is NVML's return code (``NVML_ERROR_*``)."""

    def __init__(self, code: int, message: str = "") -> None:
        self.code = code
        text = message or _ERROR_NAMES.get(code, "NVML error")
        super().__init__(f"{text} (NVML error {code})")


@dataclass(frozen=True, slots=True)
class MigAttributes:
    """What ``nvmlDeviceGetAttributes`` tells about a MIG device (enough to name its profile)."""

    gpu_instance_slice_count: int
    compute_instance_slice_count: int
    memory_size_mb: int


@dataclass(frozen=True, slots=True)
class RemappedRows:
    """``nvmlDeviceGetRemappedRows``: a pending remap or a failed one needs a GPU reset."""

    corrected: int
    uncorrected: int
    pending: bool
    failure: bool


@dataclass(frozen=True, slots=True)
class NvmlEvent:
    """One event from ``nvmlEventSetWait``. ``device`` is the handle given to
    ``device_register_events``; instance IDs are ``NO_INSTANCE`` unless MIG-scoped."""

    device: Handle
    event_type: int
    event_data: int
    gpu_instance_id: int = NO_INSTANCE
    compute_instance_id: int = NO_INSTANCE


class Nvml(Protocol):
    """The NVML calls the driver needs; each maps to the NVML function of the same name."""

    def init(self) -> None:
        """nvmlInit. Raises NvmlError when the library or the kernel driver is missing."""

    def shutdown(self) -> None: ...
    def system_driver_version(self) -> str: ...
    def system_cuda_driver_version(self) -> int:
        """nvmlSystemGetCudaDriverVersion: e.g. 12040 for CUDA 12.4."""

    def device_count(self) -> int: ...
    def device_handle_by_index(self, index: int) -> Handle: ...
    def device_uuid(self, device: Handle) -> str: ...
    def device_name(self, device: Handle) -> str: ...
    def device_pci_bus_id(self, device: Handle) -> str:
        """The PCI bus ID as NVML spells it, e.g. ``00000000:07:00.0``."""

    def device_minor_number(self, device: Handle) -> int: ...
    def device_memory_total(self, device: Handle) -> int:
        """Total framebuffer memory in bytes."""

    def device_cuda_compute_capability(self, device: Handle) -> tuple[int, int]: ...
    def device_vbios_version(self, device: Handle) -> str:
        """nvmlDeviceGetVbiosVersion: the GPU's firmware (VBIOS), e.g. ``96.00.74.00.0D``."""

    def device_mig_mode(self, device: Handle) -> tuple[int, int]:
        """(current, pending), each 1 for enabled and 0 for disabled."""

    def device_max_mig_device_count(self, device: Handle) -> int: ...
    def device_mig_device_handle_by_index(self, device: Handle, index: int) -> Handle:
        """Raises NvmlError(NOT_FOUND) for an empty slot."""

    def device_gpu_instance_id(self, mig: Handle) -> int: ...
    def device_compute_instance_id(self, mig: Handle) -> int: ...
    def device_attributes(self, mig: Handle) -> MigAttributes: ...
    def gpu_instance_profile_id(self, device: Handle, gpu_instance: int) -> int:
        """nvmlDeviceGetGpuInstanceById then nvmlGpuInstanceGetInfo: the instance's
        ``profileId`` (NVML's ID, not the profile index)."""

    def gpu_instance_profile_info_id(self, device: Handle, profile: int) -> int:
        """nvmlDeviceGetGpuInstanceProfileInfo(``profile`` index).id; NOT_SUPPORTED or
        INVALID_ARGUMENT for a profile this GPU does not offer."""

    def compute_instance_profile_id(
        self, device: Handle, gpu_instance: int, compute_instance: int
    ) -> int:
        """nvmlGpuInstanceGetComputeInstanceById then nvmlComputeInstanceGetInfo: profileId."""

    def compute_instance_profile_info_id(
        self, device: Handle, gpu_instance: int, profile: int, engine_profile: int
    ) -> int:
        """nvmlGpuInstanceGetComputeInstanceProfileInfo(profile, engine_profile).id."""

    def device_nvlink_state(self, device: Handle, link: int) -> bool: ...
    def device_nvlink_remote_pci_bus_id(self, device: Handle, link: int) -> str: ...
    def device_topology_common_ancestor(self, first: Handle, second: Handle) -> int: ...
    def device_remapped_rows(self, device: Handle) -> RemappedRows: ...
    def device_field_value(self, device: Handle, field_id: int) -> int:
        """One field of nvmlDeviceGetFieldValues as an integer; raises NvmlError with the
        field's own return code (NOT_SUPPORTED on a driver that does not offer it)."""

    def device_total_energy_consumption(self, device: Handle) -> int:
        """Millijoules since the driver last (re)initialised the GPU."""

    def device_supported_event_types(self, device: Handle) -> int: ...
    def event_set_create(self) -> Handle: ...
    def device_register_events(
        self, device: Handle, event_types: int, event_set: Handle
    ) -> None: ...
    def event_set_wait(self, event_set: Handle, timeout_ms: int) -> NvmlEvent:
        """Raises NvmlError(TIMEOUT) when no event arrived within ``timeout_ms``."""

    def event_set_free(self, event_set: Handle) -> None: ...
