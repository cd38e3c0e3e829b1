"""Through a real host and the kubelet stand-in: an Xid reaches ListAndWatch as Unhealthy,
Allocate refuses the GPU while it is, and recovery streams it back as Healthy."""

import grpc
import pytest
from devicehost_nvidia.simulated import sim_uuid

GPU = "nvidia.com/gpu"
QUICK = {"nvidia": {"quietPeriodSeconds": 0.5}}


def _simulate(host, device_id, healthy):
    """Fault or repair a simulated GPU through the driver's own simulate_health hook: the
    driver runs in its worker process, where its simulated NVML lives."""
    driver = host.host.resources[GPU].driver
    call = driver.acall(
        "devicehost_simulate_health", 10.0, resource=GPU, device_id=device_id, healthy=healthy
    )
    assert host.run(call) is True


def test_simulated_node_is_served_with_numa_topology(kubelet, run_host) -> None:
    """``run --simulate``: 8 healthy GPUs in ListAndWatch, 0-3 on NUMA 0 and 4-7 on NUMA 1,
    and a two-GPU preference is an NVLink pair."""
    run_host(enabled_drivers=("nvidia",), simulate=True)
    kubelet.wait_registered(GPU)
    devices = kubelet.wait_devices(GPU, lambda d: len(d) == 8)
    assert all(d.health == "Healthy" for d in devices.values())
    assert [devices[sim_uuid(i)].numa_nodes for i in range(8)] == [(0,)] * 4 + [(1,)] * 4
    chosen = kubelet.preferred_allocation(GPU, list(devices), [sim_uuid(3)], size=2)
    assert set(chosen) == {sim_uuid(2), sim_uuid(3)}


def test_xid_turns_gpu_unhealthy_refused_then_healthy(kubelet, run_host) -> None:
    """A critical Xid with a pending row remap: Unhealthy in ListAndWatch, Allocate answers
    FAILED_PRECONDITION; after a reset and the quiet period, Healthy and allocatable again."""
    host = run_host(enabled_drivers=("nvidia",), simulate=True, drivers=QUICK)
    kubelet.wait_registered(GPU)
    kubelet.wait_devices(GPU, lambda d: len(d) == 8)
    _simulate(host, sim_uuid(2), healthy=False)
    devices = kubelet.wait_health(GPU, sim_uuid(2), "Unhealthy")
    assert [i for i, d in devices.items() if d.health == "Unhealthy"] == [sim_uuid(2)]
    with pytest.raises(grpc.RpcError) as refused:
        kubelet.allocate(GPU, [[sim_uuid(2)]])
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION

    _simulate(host, sim_uuid(2), healthy=True)
    kubelet.wait_health(GPU, sim_uuid(2), "Healthy")
    response = kubelet.allocate(GPU, [[sim_uuid(2)]])
    assert response[0].envs["NVIDIA_VISIBLE_DEVICES"] == sim_uuid(2)


def test_shared_replicas_through_the_kubelet(kubelet, run_host) -> None:
    """Time-sliced and renamed: 16 replica IDs under nvidia.com/gpu.shared; two replicas of
    one GPU allocate as that GPU once."""
    config = {
        "nvidia": {
            "timeSlicing": {"renameByDefault": True, "resources": [{"name": GPU, "replicas": 2}]}
        }
    }
    run_host(enabled_drivers=("nvidia",), simulate=True, drivers=config)
    kubelet.wait_registered("nvidia.com/gpu.shared")
    kubelet.wait_devices("nvidia.com/gpu.shared", lambda d: len(d) == 16)
    ids = [f"{sim_uuid(4)}::0", f"{sim_uuid(4)}::1"]
    response = kubelet.allocate("nvidia.com/gpu.shared", [ids])
    assert response[0].envs["NVIDIA_VISIBLE_DEVICES"] == sim_uuid(4)


def test_dgx_h100_through_the_kubelet(kubelet, run_host) -> None:
    """--node dgx-h100 through a real host: 8 GPUs, NUMA 0/1; the composed Allocate of two
    GPUs joins their UUIDs; a GPU whose Xid 48 leaves the recovery action at GPU_RESET is
    Unhealthy, and Healthy again after the reset."""
    host = run_host(
        enabled_drivers=("nvidia",), simulate=True, simulate_node="dgx-h100", drivers=QUICK
    )
    kubelet.wait_registered(GPU)
    devices = kubelet.wait_devices(GPU, lambda d: len(d) == 8)
    ids = sorted(devices, key=lambda i: (devices[i].numa_nodes, i))
    assert [devices[i].numa_nodes for i in ids] == [(0,)] * 4 + [(1,)] * 4
    response = kubelet.allocate(GPU, [[ids[6], ids[7]]])
    assert response[0].envs["NVIDIA_VISIBLE_DEVICES"] == f"{ids[6]},{ids[7]}"
    _simulate(host, ids[3], healthy=False)
    kubelet.wait_health(GPU, ids[3], "Unhealthy")
    _simulate(host, ids[3], healthy=True)
    kubelet.wait_health(GPU, ids[3], "Healthy")


def test_every_gpu_carries_what_nvml_says_of_it_through_the_host(kubelet, run_host) -> None:
    """Each GPU's attributes cross the worker boundary and the host's checks: NVML's
    product name, memory and driver version, the GPU's PCI address and its PCIe root."""
    host = run_host(enabled_drivers=("nvidia",), simulate=True)
    kubelet.wait_devices(GPU, lambda d: len(d) == 8)
    devices = host.call(lambda: dict(host.host.resources[GPU].state.devices))
    first = devices[sim_uuid(0)].attributes
    assert first.product == "NVIDIA A100-SXM4-80GB"
    assert first.memory_bytes == 80 * 1024**3
    assert first.driver_version == "550.54.15"
    assert first.pci_address == "0000:07:00.0"
    assert first.pcie_root.startswith("pci0000:")
    assert len({d.attributes.pci_address for d in devices.values()}) == 8
