"""Through a real host and the kubelet stand-in, on the simulated DCMI."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
import pytest

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
    """The kubelet's Allocate gets ASCEND_VISIBLE_DEVICES with physical IDs in request
    order, nothing else; composed by the host from the devices' edits."""
    start(run_host, kubelet)
    response = kubelet.allocate(NPU, [["Ascend910-5", "Ascend910-4"], ["Ascend910-0"]])
    first, second = response
    assert dict(first.envs) == {"ASCEND_VISIBLE_DEVICES": "5,4"}
    assert dict(second.envs) == {"ASCEND_VISIBLE_DEVICES": "0"}
    assert (list(first.devices), list(first.mounts), list(first.cdi_devices)) == ([], [], [])


def test_fault_reaches_the_kubelet_and_so_does_the_recovery(
    run_host: Callable[..., HostThread], kubelet: KubeletStandIn
) -> None:
    """A chip fault is pushed to the kubelet as Unhealthy, and its recovery as Healthy,
    without waiting for the (here hour-long) poll or scan intervals."""
    host = start(run_host, kubelet, healthPollSeconds=3600)
    driver = host.host.resources[NPU].driver
    assert host.run(
        driver.acall(
            "devicehost_simulate_health", 10.0, resource=NPU, device_id="Ascend910-6", healthy=False
        )
    )
    devices = kubelet.wait_health(NPU, "Ascend910-6", "Unhealthy")
    assert [i for i, d in devices.items() if d.health == "Unhealthy"] == ["Ascend910-6"]
    assert host.run(
        driver.acall(
            "devicehost_simulate_health", 10.0, resource=NPU, device_id="Ascend910-6", healthy=True
        )
    )
    kubelet.wait_health(NPU, "Ascend910-6", "Healthy")


def test_preferred_allocations_respect_hccs_groups(
    run_host: Callable[..., HostThread], kubelet: KubeletStandIn
) -> None:
    """GetPreferredAllocation keeps 1, 2 and 4 chips in one HCCS ring in the published
    order, gives all 8 for 8, and always includes must_include."""
    start(run_host, kubelet)
    busy_0 = ALL[1:]  # chip 0 is in use: ring 0 has 3 free, ring 1 has 4
    assert kubelet.preferred_allocation(NPU, busy_0, size=1) == ["Ascend910-1"]
    assert kubelet.preferred_allocation(NPU, busy_0, size=2) == ["Ascend910-4", "Ascend910-5"]
    assert kubelet.preferred_allocation(NPU, busy_0, size=4) == ALL[4:]
    assert sorted(kubelet.preferred_allocation(NPU, ALL, size=8)) == ALL
    assert kubelet.preferred_allocation(NPU, busy_0, ["Ascend910-5"], 2) == [
        "Ascend910-5",
        "Ascend910-4",
    ]


def test_plain_runtime_answer_carries_nodes_and_mounts(
    run_host: Callable[..., HostThread], kubelet: KubeletStandIn
) -> None:
    """useAscendRuntime false: the AllocateResponse has the shared nodes and the chip's
    node, and read-only mounts of what CANN reads, version files included — host paths in
    the simulated tree, where the simulation made them."""
    host = start(run_host, kubelet, useAscendRuntime=False)
    tree = str(host.simulated_root("ascend").path)
    response = kubelet.allocate(NPU, [["Ascend910-2"]])[0]
    assert dict(response.envs) == {}
    assert [(d.host_path, d.container_path, d.permissions) for d in response.devices] == [
        (tree + "/dev/davinci_manager", "/dev/davinci_manager", "rw"),
        (tree + "/dev/devmm_svm", "/dev/devmm_svm", "rw"),
        (tree + "/dev/hisi_hdc", "/dev/hisi_hdc", "rw"),
        (tree + "/dev/davinci2", "/dev/davinci2", "rw"),
    ]
    assert [(m.host_path, m.container_path, m.read_only) for m in response.mounts] == [
        (tree + path, path, True)
        for path in (
            "/usr/local/Ascend/driver/lib64",
            "/usr/local/Ascend/driver/include",
            "/usr/local/Ascend/driver/version.info",
            "/etc/ascend_install.info",
            "/usr/local/dcmi",
            "/usr/local/bin/npu-smi",
        )
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


def on_node(
    run_host: Callable[..., HostThread],
    kubelet: KubeletStandIn,
    node: str,
    resource: str = NPU,
    **config: Any,
) -> HostThread:
    """A host simulating the published machine ``node``, its resource registered."""
    host = run_host(
        enabled_drivers=("ascend",),
        simulate=True,
        simulate_node=node,
        drivers={"ascend": config},
        scan_interval=60.0,
    )
    kubelet.wait_registered(resource)
    kubelet.wait_devices(resource, lambda devices: len(devices) == 8)
    return host


def test_atlas_800_9000_keeps_small_jobs_inside_one_ring(
    run_host: Callable[..., HostThread], kubelet: KubeletStandIn
) -> None:
    """On the Atlas 800 (model 9000), with chips 1 and 5 busy (3 free in each ring), 2- and
    3-chip preferences stay in one ring."""
    on_node(run_host, kubelet, "atlas-800-9000")
    free = [i for i in ALL if i not in ("Ascend910-1", "Ascend910-5")]
    assert kubelet.preferred_allocation(NPU, free, size=2) == ["Ascend910-0", "Ascend910-2"]
    assert kubelet.preferred_allocation(NPU, free, size=3) == [
        "Ascend910-0",
        "Ascend910-2",
        "Ascend910-3",
    ]


def test_strict_hccs_refuses_an_allocate_across_rings(
    run_host: Callable[..., HostThread], kubelet: KubeletStandIn
) -> None:
    """hccsStrict: Allocate of chips 3 and 4 (rings 0 and 1) fails FAILED_PRECONDITION with
    the rule named; chips 4 and 5 are allocated."""
    on_node(run_host, kubelet, "atlas-800-9000", hccsStrict=True)
    with pytest.raises(grpc.RpcError) as refused:
        kubelet.allocate(NPU, [["Ascend910-3", "Ascend910-4"]])
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "HCCS rule: on an 8-chip Ascend 910 server" in (refused.value.details() or "")
    response = kubelet.allocate(NPU, [["Ascend910-4", "Ascend910-5"]])
    assert dict(response[0].envs) == {"ASCEND_VISIBLE_DEVICES": "4,5"}


def test_atlas_800t_a2_is_one_mesh(
    run_host: Callable[..., HostThread], kubelet: KubeletStandIn
) -> None:
    """On the Atlas 800T A2 (910B, full mesh) there are no rings, so even with hccsStrict
    chips 2 and 5 are allocated together."""
    on_node(run_host, kubelet, "atlas-800t-a2", hccsStrict=True)
    response = kubelet.allocate(NPU, [["Ascend910-2", "Ascend910-5"]])
    assert dict(response[0].envs) == {"ASCEND_VISIBLE_DEVICES": "2,5"}


def test_atlas_800_3000_serves_its_310p_chips(
    run_host: Callable[..., HostThread], kubelet: KubeletStandIn
) -> None:
    """The inference server's eight 310P chips register, with their NUMA nodes."""
    on_node(run_host, kubelet, "atlas-800-3000", "huawei.com/Ascend310P")
    devices = kubelet.wait_devices("huawei.com/Ascend310P", lambda d: len(d) == 8)
    numa = {i: list(d.numa_nodes) for i, d in devices.items()}
    assert numa["Ascend310P-0"] == [0] and numa["Ascend310P-7"] == [1]


def test_a_machine_without_npus_serves_no_ascend_resource(
    run_host: Callable[..., HostThread], kubelet: KubeletStandIn
) -> None:
    """--node dgx-h100: the driver is unavailable with the reason, and the host runs on."""
    host = run_host(
        enabled_drivers=("ascend",), simulate=True, simulate_node="dgx-h100", scan_interval=60.0
    )
    info = next(i for i in host.host.plugins.infos if i.name == "ascend")
    assert "no Ascend NPU here" in info.reason
    assert not any(r.startswith("huawei.com/") for r in host.host.resources)


def test_every_npu_carries_its_chip_memory_ring_and_driver_version(
    run_host: Callable[..., HostThread], kubelet: KubeletStandIn
) -> None:
    """Each chip's attributes cross the worker boundary and the host's checks: DCMI's chip
    name and memory, the HCCS ring it sits in (0-3 and 4-7 on the Atlas 800 9000) and the
    driver's version.info."""
    host = start(run_host, kubelet)
    devices = host.call(lambda: dict(host.host.resources[NPU].state.devices))
    attributes = [devices[i].attributes for i in ALL]
    assert {a.chip_type for a in attributes} == {"910A"}
    assert {a.product for a in attributes} == {"Ascend 910A"}
    assert {a.memory_bytes for a in attributes} == {32 * 1024**3}
    assert [a.interconnect_group for a in attributes] == ["hccs-ring-0"] * 4 + ["hccs-ring-1"] * 4
    assert {a.driver_version for a in attributes} == {"24.1.rc2"}
