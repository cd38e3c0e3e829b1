"""The NVML interface: its constants are NVML's, the simulated library behaves as NVML does,
and the real one fails cleanly where NVML cannot load."""

import threading

import pynvml
import pytest
from devicehost_nvidia import nvml
from devicehost_nvidia.discovery import MigProfiles, discover
from devicehost_nvidia.mig import memory_gb, profile_from_slices
from devicehost_nvidia.nvml import MigAttributes, NvmlError
from devicehost_nvidia.nvml_real import PynvmlLibrary
from devicehost_nvidia.simulated import SimulatedNvml, default_node


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        ("NVML_ERROR_INVALID_ARGUMENT", "NVML_ERROR_INVALID_ARGUMENT"),
        ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_NOT_SUPPORTED"),
        ("NVML_ERROR_NOT_FOUND", "NVML_ERROR_NOT_FOUND"),
        ("NVML_ERROR_DRIVER_NOT_LOADED", "NVML_ERROR_DRIVER_NOT_LOADED"),
        ("NVML_ERROR_TIMEOUT", "NVML_ERROR_TIMEOUT"),
        ("NVML_ERROR_LIBRARY_NOT_FOUND", "NVML_ERROR_LIBRARY_NOT_FOUND"),
        ("NVML_ERROR_GPU_IS_LOST", "NVML_ERROR_GPU_IS_LOST"),
        ("NVML_ERROR_RESET_REQUIRED", "NVML_ERROR_RESET_REQUIRED"),
        ("EVENT_DOUBLE_BIT_ECC_ERROR", "nvmlEventTypeDoubleBitEccError"),
        ("EVENT_XID_CRITICAL_ERROR", "nvmlEventTypeXidCriticalError"),
        ("TOPOLOGY_SINGLE", "NVML_TOPOLOGY_SINGLE"),
        ("TOPOLOGY_NODE", "NVML_TOPOLOGY_NODE"),
        ("TOPOLOGY_SYSTEM", "NVML_TOPOLOGY_SYSTEM"),
        ("NVLINK_MAX_LINKS", "NVML_NVLINK_MAX_LINKS"),
        ("FI_DEV_GET_GPU_RECOVERY_ACTION", "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION"),
        ("GPU_RECOVERY_ACTION_NONE", "NVML_GPU_RECOVERY_ACTION_NONE"),
        ("GPU_RECOVERY_ACTION_GPU_RESET", "NVML_GPU_RECOVERY_ACTION_GPU_RESET"),
        ("GPU_RECOVERY_ACTION_NODE_REBOOT", "NVML_GPU_RECOVERY_ACTION_NODE_REBOOT"),
        ("GPU_RECOVERY_ACTION_DRAIN_P2P", "NVML_GPU_RECOVERY_ACTION_DRAIN_P2P"),
        ("GPU_RECOVERY_ACTION_DRAIN_AND_RESET", "NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET"),
        ("GPU_RECOVERY_ACTION_BUS_RESET", "NVML_GPU_RECOVERY_ACTION_BUS_RESET"),
        ("GPU_RECOVERY_ACTION_SYSTEM_REBOOT", "NVML_GPU_RECOVERY_ACTION_SYSTEM_REBOOT"),
        ("GPU_INSTANCE_PROFILE_COUNT", "NVML_GPU_INSTANCE_PROFILE_COUNT"),
        ("COMPUTE_INSTANCE_PROFILE_COUNT", "NVML_COMPUTE_INSTANCE_PROFILE_COUNT"),
    ],
)
def test_constants_are_nvmls(ours: str, theirs: str) -> None:
    """The interface's codes are pynvml's values, so real and simulated errors compare alike."""
    assert getattr(nvml, ours) == getattr(pynvml, theirs)


def test_real_library_reports_a_missing_nvml_as_an_nvml_error() -> None:
    """Where NVML cannot load, init raises NvmlError with NVML's own code (no crash)."""
    library = PynvmlLibrary()
    try:
        library.init()
    except NvmlError as exc:
        assert exc.code in (nvml.NVML_ERROR_LIBRARY_NOT_FOUND, nvml.NVML_ERROR_DRIVER_NOT_LOADED)
    else:
        library.shutdown()
        pytest.skip("NVML loads on this node; the missing-library path cannot be seen here")


@pytest.mark.parametrize(
    ("attributes", "total_mib", "name"),
    [
        (MigAttributes(1, 1, 4864), 40536, "1g.5gb"),  # A100 40GB
        (MigAttributes(1, 1, 9856), 81559, "1g.10gb"),  # H100 80GB
        (MigAttributes(2, 2, 19968), 81559, "2g.20gb"),
        (MigAttributes(3, 3, 40192), 81559, "3g.40gb"),
        (MigAttributes(7, 7, 80384), 81559, "7g.80gb"),
        (MigAttributes(2, 1, 19968), 81559, "1c.2g.20gb"),
    ],
)
def test_profile_names_follow_nvidias_rounding(
    attributes: MigAttributes, total_mib: int, name: str
) -> None:
    """Memory in a profile name is rounded up to eighths of the GPU (go-nvlib)."""
    got = profile_from_slices(
        attributes.gpu_instance_slice_count,
        attributes.compute_instance_slice_count,
        attributes.memory_size_mb,
        total_mib * 1024 * 1024,
    )
    assert str(got) == name


def test_simulated_profiles_round_trip() -> None:
    """Every profile the simulated NVML creates is named back to itself from its IDs,
    variants included."""
    profiles = ("1g.10gb+me", "1g.20gb", "2g.20gb-me", "1g.10gb+me.all", "4g.40gb+gfx")
    node = default_node(gpus=1, mig={0: profiles})
    library = SimulatedNvml(node)
    found = discover(library, __import__("pathlib").Path("/nonexistent"), MigProfiles(library))
    assert [str(m.profile) for m in found.migs] == list(profiles)
    assert memory_gb(81920 * 1024 * 1024, 9830) == 10


def test_simulated_lost_gpu_answers_gpu_is_lost() -> None:
    """After ``lose``, every query on that GPU fails with GPU_IS_LOST; others still answer."""
    library = SimulatedNvml(default_node(gpus=2))
    first, second = library.device_handle_by_index(0), library.device_handle_by_index(1)
    library.lose(0)
    with pytest.raises(NvmlError) as raised:
        library.device_pci_bus_id(first)
    assert raised.value.code == nvml.NVML_ERROR_GPU_IS_LOST
    assert library.device_uuid(second).startswith("GPU-")
    library.reset(0)
    assert library.device_pci_bus_id(first) == "00000000:07:00.0"


def test_simulated_event_set_delivers_only_registered_events() -> None:
    """An Xid reaches a set registered for that GPU, with NVML's event fields; a wait on
    an empty set times out with NVML's TIMEOUT code."""
    library = SimulatedNvml(default_node(gpus=2))
    event_set = library.event_set_create()
    gpu = library.device_handle_by_index(1)
    library.device_register_events(gpu, nvml.EVENT_XID_CRITICAL_ERROR, event_set)
    library.xid(0, 79)  # not registered
    library.xid(1, 48)
    event = library.event_set_wait(event_set, 100)
    assert (event.device, event.event_type, event.event_data) == (
        gpu,
        nvml.EVENT_XID_CRITICAL_ERROR,
        48,
    )
    assert event.gpu_instance_id == nvml.NO_INSTANCE
    with pytest.raises(NvmlError) as raised:
        library.event_set_wait(event_set, 10)
    assert raised.value.code == nvml.NVML_ERROR_TIMEOUT


def test_simulated_wait_wakes_when_an_event_arrives() -> None:
    """A blocked wait returns as soon as an event is delivered from another thread."""
    library = SimulatedNvml(default_node(gpus=1))
    event_set = library.event_set_create()
    library.device_register_events(
        library.device_handle_by_index(0), nvml.EVENT_XID_CRITICAL_ERROR, event_set
    )
    timer = threading.Timer(0.05, library.xid, args=(0, 62))
    timer.start()
    assert library.event_set_wait(event_set, 10_000).event_data == 62
    timer.join()


def test_simulated_gpu_without_nvlink_says_not_supported() -> None:
    """NVLink queries on a GPU without links fail as NVML's do (NOT_SUPPORTED)."""
    library = SimulatedNvml(default_node(gpus=1))
    with pytest.raises(NvmlError) as raised:
        library.device_nvlink_state(library.device_handle_by_index(0), 0)
    assert raised.value.code == nvml.NVML_ERROR_NOT_SUPPORTED
