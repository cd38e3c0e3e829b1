"""Through a real host and the kubelet stand-in, over real unix sockets."""

from __future__ import annotations

import time

import grpc
import pytest
from devicehost_rdma.simulated import set_link, two_port_hca
from rdma_helpers import exclusive_pool, shared_pool

from devicehost.testing import FakeRoot, KubeletStandIn

HCA = "rdma/hca"
SHARED = "rdma/hca_shared"


def first_list(kubelet: KubeletStandIn, resource: str, timeout: float = 10.0) -> dict:
    """The first ListAndWatch list of ``resource``, even an empty one (``wait_devices``
    only returns non-empty lists)."""
    deadline = time.monotonic() + timeout
    while not kubelet.lists(resource):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no device list for {resource!r} within {timeout} s")
        time.sleep(0.02)
    return kubelet.lists(resource)[0]


def rdma_host(run_host, **drivers_config):  # type: ignore[no-untyped-def]
    return run_host(enabled_drivers=("rdma",), drivers={"rdma": drivers_config})


def test_link_down_and_up_streams_refuses_and_allocates(
    fake_root: FakeRoot, kubelet: KubeletStandIn, run_host
) -> None:
    """On the simulated node with default settings (1 s poll): a port going down shows
    Unhealthy in ListAndWatch, Allocate refuses the device with FAILED_PRECONDITION, the
    port coming back shows Healthy, and Allocate then answers with exactly the HCA's
    character devices, rdma_cm and RDMA_DEVICES."""
    host = run_host(enabled_drivers=("rdma",), simulate=True)
    tree = host.simulated_root("rdma").path
    kubelet.wait_registered(HCA)
    kubelet.wait_devices(HCA, lambda d: len(d) == 8)

    set_link(tree, "mlx5_3", up=False)
    kubelet.wait_health(HCA, "mlx5_3", "Unhealthy")
    with pytest.raises(grpc.RpcError) as refused:
        kubelet.allocate(HCA, [["mlx5_3"]])
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION

    set_link(tree, "mlx5_3", up=True)
    kubelet.wait_health(HCA, "mlx5_3", "Healthy")
    response = kubelet.allocate(HCA, [["mlx5_3"]])[0]
    assert [(d.host_path, d.container_path, d.permissions) for d in response.devices] == [
        ("/dev/infiniband/uverbs3", "/dev/infiniband/uverbs3", "rw"),
        ("/dev/infiniband/umad3", "/dev/infiniband/umad3", "rw"),
        ("/dev/infiniband/issm3", "/dev/infiniband/issm3", "rw"),
        ("/dev/infiniband/rdma_cm", "/dev/infiniband/rdma_cm", "rw"),
    ]
    assert dict(response.envs) == {"RDMA_DEVICES": "mlx5_3"}
    assert (list(response.mounts), list(response.cdi_devices)) == ([], [])


def test_shared_slots_go_unhealthy_only_with_the_whole_pool(
    fake_root: FakeRoot, kubelet: KubeletStandIn, run_host
) -> None:
    """Slots stay Healthy with one HCA down, turn Unhealthy with both, and recover; a
    slot then gives both HCAs in one container."""
    two_port_hca(fake_root, link_layer="Ethernet")
    rdma_host(run_host, pools=[shared_pool(SHARED, slots=2)], pollIntervalSeconds=0.1)
    kubelet.wait_devices(SHARED, lambda d: len(d) == 2)
    set_link(fake_root.path, "mlx5_0", up=False)
    set_link(fake_root.path, "mlx5_1", up=False)
    kubelet.wait_health(SHARED, "slot-1", "Unhealthy")
    set_link(fake_root.path, "mlx5_1", up=True)
    kubelet.wait_health(SHARED, "slot-1", "Healthy")
    response = kubelet.allocate(SHARED, [["slot-1"]])[0]
    assert dict(response.envs) == {"RDMA_DEVICES": "mlx5_1"}
    set_link(fake_root.path, "mlx5_0", up=True)
    kubelet.wait_devices(SHARED, lambda d: True)
    response = kubelet.allocate(SHARED, [["slot-0"], ["slot-1"]])
    assert [dict(r.envs) for r in response] == [
        {"RDMA_DEVICES": "mlx5_0,mlx5_1"},
        {"RDMA_DEVICES": "mlx5_0,mlx5_1"},
    ]


def test_removed_hca_leaves_the_device_list(
    fake_root: FakeRoot, kubelet: KubeletStandIn, run_host
) -> None:
    """Hot-unplug: the HCA disappears from ListAndWatch within a poll."""
    two_port_hca(fake_root)
    rdma_host(run_host, pools=[exclusive_pool(HCA)], pollIntervalSeconds=0.1)
    kubelet.wait_devices(HCA, lambda d: set(d) == {"mlx5_0", "mlx5_1"})
    fake_root.remove("/sys/class/infiniband/mlx5_1")
    kubelet.wait_devices(HCA, lambda d: set(d) == {"mlx5_0"})


def test_pool_matching_nothing_registers_empty_with_a_note(
    fake_root: FakeRoot, kubelet: KubeletStandIn, run_host
) -> None:
    """A pool that selects nothing still registers, lists zero devices (capacity 0), and
    its note reaches the driver's notes shown by `devicehost drivers`."""
    two_port_hca(fake_root)
    host = rdma_host(
        run_host, pools=[exclusive_pool(HCA), shared_pool(SHARED, linkTypes=["ethernet"])]
    )
    kubelet.wait_registered(SHARED)
    kubelet.wait_devices(HCA, lambda d: len(d) == 2)
    assert first_list(kubelet, SHARED) == {}
    [info] = [i for i in host.host.plugins.infos if i.name == "rdma"]
    assert info.notes == [
        "pool 'rdma/hca_shared' advertises nothing: none of the 2 HCAs matches every "
        "selector; linkTypes ['ethernet'] matches 0 (this node has: infiniband)"
    ]


def test_preferred_allocation_over_grpc_keeps_to_one_switch(
    kubelet: KubeletStandIn, run_host
) -> None:
    """GetPreferredAllocation for two of the simulated IB HCAs picks one switch's pair."""
    run_host(enabled_drivers=("rdma",), simulate=True)
    kubelet.wait_devices(HCA, lambda d: len(d) == 8)
    assert kubelet.options(HCA).get_preferred_allocation_available
    # Three free on each NUMA node; on node 0 the pair behind one switch wins over
    # mlx5_0, which natural order alone would take first.
    available = ["mlx5_0", "mlx5_2", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_8"]
    assert kubelet.preferred_allocation(HCA, available, size=2) == ["mlx5_2", "mlx5_3"]
