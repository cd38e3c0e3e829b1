"""Through a real host and the kubelet stand-in, on the simulated DCMI."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from devicehost.testing import HostThread, KubeletStandIn

NPU = "huawei.com/Ascend910"
ALL = [f"Ascend910-{i}" for i in range(8)]


def start(
    run_host: Callable[..., HostThread],
    kubelet: KubeletStandIn,
    resource: str = NPU,
    count: int = 8,
    **config: Any,
) -> HostThread:
    host = run_host(
        enabled_drivers=("ascend",), simulate=True, drivers={"ascend": config}, scan_interval=60.0
    )
    kubelet.wait_registered(resource)
    kubelet.wait_devices(resource, lambda devices: len(devices) == count)
    return host


def test_allocate_answers_ascend_visible_devices(
    run_host: Callable[..., HostThread], kubelet: KubeletStandIn
) -> None:
    """The kubelet's Allocate gets ASCEND_VISIBLE_DEVICES with physical IDs, nothing else."""
    start(run_host, kubelet)
    response = kubelet.allocate(NPU, [["Ascend910-5", "Ascend910-4"], ["Ascend910-0"]])
    first, second = response
    assert dict(first.envs) == {"ASCEND_VISIBLE_DEVICES": "4,5"}
    assert dict(second.envs) == {"ASCEND_VISIBLE_DEVICES": "0"}
    assert (list(first.devices), list(first.mounts), list(first.cdi_devices)) == ([], [], [])


def test_fault_reaches_the_kubelet_and_so_does_the_recovery(
    run_host: Callable[..., HostThread], kubelet: KubeletStandIn
) -> None:
    """A chip fault is pushed to the kubelet as Unhealthy, and its recovery as Healthy,
    without waiting for the (here hour-long) poll or scan intervals."""
    host = start(run_host, kubelet, healthPollSeconds=3600)
    driver = host.host.resources[NPU].driver
    assert driver.call(
        "devicehost_simulate_health", resource=NPU, device_id="Ascend910-6", healthy=False
    )
    devices = kubelet.wait_health(NPU, "Ascend910-6", "Unhealthy")
    assert [i for i, d in devices.items() if d.health == "Unhealthy"] == ["Ascend910-6"]
    assert driver.call(
        "devicehost_simulate_health", resource=NPU, device_id="Ascend910-6", healthy=True
    )
    kubelet.wait_health(NPU, "Ascend910-6", "Healthy")


def test_preferred_allocations_respect_hccs_groups(
    run_host: Callable[..., HostThread], kubelet: KubeletStandIn
) -> None:
    """GetPreferredAllocation keeps 1, 2 and 4 chips in one HCCS group (best fit), gives all
    8 for 8, and always includes must_include."""
    start(run_host, kubelet)
    busy_0 = ALL[1:]  # chip 0 is in use
    assert kubelet.preferred_allocation(NPU, busy_0, size=1) == ["Ascend910-1"]
    assert kubelet.preferred_allocation(NPU, busy_0, size=2) == ["Ascend910-1", "Ascend910-2"]
    assert kubelet.preferred_allocation(NPU, busy_0, size=4) == ALL[4:]
    assert sorted(kubelet.preferred_allocation(NPU, ALL, size=8)) == ALL
    assert kubelet.preferred_allocation(NPU, busy_0, ["Ascend910-5"], 2) == [
        "Ascend910-5",
        "Ascend910-4",
    ]


def test_plain_runtime_answer_carries_nodes_and_mounts(
    run_host: Callable[..., HostThread], kubelet: KubeletStandIn
) -> None:
    """useAscendRuntime false: the AllocateResponse has the nodes and read-only mounts."""
    start(run_host, kubelet, useAscendRuntime=False)
    response = kubelet.allocate(NPU, [["Ascend910-2"]])[0]
    assert dict(response.envs) == {}
    assert [(d.host_path, d.container_path, d.permissions) for d in response.devices] == [
        ("/dev/davinci2", "/dev/davinci2", "rw"),
        ("/dev/davinci_manager", "/dev/davinci_manager", "rw"),
        ("/dev/devmm_svm", "/dev/devmm_svm", "rw"),
        ("/dev/hisi_hdc", "/dev/hisi_hdc", "rw"),
    ]
    assert [(m.host_path, m.container_path, m.read_only) for m in response.mounts] == [
        ("/usr/local/Ascend/driver/lib64", "/usr/local/Ascend/driver/lib64", True),
        ("/usr/local/dcmi", "/usr/local/dcmi", True),
        ("/usr/local/bin/npu-smi", "/usr/local/bin/npu-smi", True),
    ]


def test_vnpus_register_as_their_own_resource(
    run_host: Callable[..., HostThread], kubelet: KubeletStandIn
) -> None:
    """Pre-created vNPUs are a resource of their own, allocated with the VIRTUAL option."""
    start(run_host, kubelet, "huawei.com/Ascend910-4c", 4, simulatedNode="ascend910x8-vnpu")
    kubelet.wait_registered(NPU)
    response = kubelet.allocate("huawei.com/Ascend910-4c", [["Ascend910-4c-215-7"]])
    assert dict(response[0].envs) == {
        "ASCEND_VISIBLE_DEVICES": "215",
        "ASCEND_RUNTIME_OPTIONS": "VIRTUAL",
    }
