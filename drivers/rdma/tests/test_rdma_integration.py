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
#: On the default simulated node: mlx5_2 and mlx5_3 behind one switch on NUMA node 0.
MLX5_3 = "0000:6e:00.0"


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


def nodes(response) -> list[str]:  # type: ignore[no-untyped-def]
    return [d.host_path.removeprefix("/dev/infiniband/") for d in response.devices]


def test_link_down_and_up_streams_refuses_and_allocates(kubelet: KubeletStandIn, run_host) -> None:
    """On the simulated node with default settings (1 s poll): a port going down shows
    Unhealthy in ListAndWatch, Allocate refuses the device with FAILED_PRECONDITION, the
    port coming back shows Healthy, and Allocate then answers — composed by the host from
    the declared edits — with exactly the HCA's character devices, rdma_cm, its name in
    RDMA_DEVICES and its PCI address in PCIDEVICE_RDMA_HCA."""
    host = run_host(enabled_drivers=("rdma",), simulate=True)
    tree = host.simulated_root("rdma").path
    kubelet.wait_registered(HCA, timeout=30)
    kubelet.wait_devices(HCA, lambda d: len(d) == 8, timeout=30)

    set_link(tree, "mlx5_3", up=False)
    kubelet.wait_health(HCA, MLX5_3, "Unhealthy", timeout=30)
    with pytest.raises(grpc.RpcError) as refused:
        kubelet.allocate(HCA, [[MLX5_3]])
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION

    set_link(tree, "mlx5_3", up=True)
    kubelet.wait_health(HCA, MLX5_3, "Healthy", timeout=30)
    response = kubelet.allocate(HCA, [[MLX5_3]])[0]
    assert [(d.host_path, d.container_path, d.permissions) for d in response.devices] == [
        (f"{tree}{path}", path, "rw")
        for path in (
            "/dev/infiniband/rdma_cm",
            "/dev/infiniband/uverbs3",
            "/dev/infiniband/umad3",
            "/dev/infiniband/issm3",
        )
    ]
    assert dict(response.envs) == {"RDMA_DEVICES": "mlx5_3", "PCIDEVICE_RDMA_HCA": MLX5_3}
    assert (list(response.mounts), list(response.cdi_devices)) == ([], [])


def test_shared_slot_gives_every_pool_member_whatever_its_link(
    fake_root: FakeRoot, kubelet: KubeletStandIn, run_host
) -> None:
    """Issue item 9: with one HCA's link down the slots stay Healthy, and a container
    allocated then still gets both HCAs' device nodes (health shapes ListAndWatch only);
    with both links down the slots turn Unhealthy."""
    two_port_hca(fake_root, link_layer="Ethernet")
    rdma_host(run_host, pools=[shared_pool(SHARED, slots=2)], pollIntervalSeconds=0.1)
    kubelet.wait_devices(SHARED, lambda d: len(d) == 2, timeout=30)
    set_link(fake_root.path, "mlx5_1", up=False)
    response = kubelet.allocate(SHARED, [["slot-1"]])[0]
    assert dict(response.envs) == {"RDMA_DEVICES": "mlx5_0,mlx5_1"}
    assert nodes(response) == [
        "rdma_cm", "uverbs0", "umad0", "issm0", "uverbs1", "umad1", "issm1"
    ]  # fmt: skip
    set_link(fake_root.path, "mlx5_0", up=False)
    kubelet.wait_health(SHARED, "slot-1", "Unhealthy", timeout=30)


def test_shared_slot_follows_an_unplugged_pool_member(
    fake_root: FakeRoot, kubelet: KubeletStandIn, run_host
) -> None:
    """A pool member unplugged after start-up is no longer handed out (its device nodes
    are gone: the runtime would fail the container on them), because the pool's nodes
    are declared with each enumeration, not fixed at registration."""
    two_port_hca(fake_root, link_layer="Ethernet")
    rdma_host(run_host, pools=[shared_pool(SHARED, slots=2)], pollIntervalSeconds=0.1)
    kubelet.wait_devices(SHARED, lambda d: len(d) == 2, timeout=30)
    fake_root.remove("/sys/class/infiniband/mlx5_1")
    kubelet.wait_devices(SHARED, lambda d: True, timeout=30)
    deadline = time.monotonic() + 30
    while True:
        response = kubelet.allocate(SHARED, [["slot-0"]])[0]
        if dict(response.envs) == {"RDMA_DEVICES": "mlx5_0"} or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert nodes(response) == ["rdma_cm", "uverbs0", "umad0", "issm0"]


def test_removed_hca_leaves_the_device_list(
    fake_root: FakeRoot, kubelet: KubeletStandIn, run_host
) -> None:
    """Hot-unplug: the HCA (its PCI function gone too) disappears from ListAndWatch."""
    two_port_hca(fake_root)
    rdma_host(run_host, pools=[exclusive_pool(HCA)], pollIntervalSeconds=0.1)
    kubelet.wait_devices(HCA, lambda d: set(d) == {"0000:3d:00.0", "0000:3d:00.1"}, timeout=30)
    fake_root.remove("/sys/class/infiniband/mlx5_1")
    kubelet.wait_devices(HCA, lambda d: set(d) == {"0000:3d:00.0"}, timeout=30)


def test_pool_matching_nothing_registers_empty_with_a_note(
    fake_root: FakeRoot, kubelet: KubeletStandIn, run_host
) -> None:
    """A pool that selects nothing still registers, lists zero devices (capacity 0), and
    its note reaches the driver's notes shown by `devicehost drivers`."""
    two_port_hca(fake_root)
    host = rdma_host(
        run_host, pools=[exclusive_pool(HCA), shared_pool(SHARED, linkTypes=["ethernet"])]
    )
    kubelet.wait_registered(SHARED, timeout=30)
    kubelet.wait_devices(HCA, lambda d: len(d) == 2, timeout=30)
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
    kubelet.wait_devices(HCA, lambda d: len(d) == 8, timeout=30)
    assert kubelet.options(HCA).get_preferred_allocation_available
    # Three free on each NUMA node (mlx5_0, mlx5_2, mlx5_3 | mlx5_4, mlx5_5, mlx5_8): on
    # node 0 the pair behind one switch wins over mlx5_0, which address order would take.
    available = [
        "0000:4d:00.0", "0000:6d:00.0", MLX5_3, "0000:ad:00.0", "0000:ae:00.0", "0000:ad:00.1"
    ]  # fmt: skip
    assert kubelet.preferred_allocation(HCA, available, size=2) == ["0000:6d:00.0", MLX5_3]


def test_each_hca_carries_its_product_and_pci_place_through_the_host(
    kubelet: KubeletStandIn, run_host
) -> None:
    """An exclusive pool's HCA carries its product (from its PCI IDs), its PCI address and
    its PCIe root through the host's checks; a shared slot carries its pool's product and
    no PCI facts (it is no one function)."""
    host = run_host(enabled_drivers=("rdma",), simulate=True)
    kubelet.wait_devices("rdma/hca", lambda devices: len(devices) > 0)
    kubelet.wait_devices("rdma/hca_shared", lambda devices: len(devices) > 0)
    resources = host.call(
        lambda: {k: dict(r.state.devices) for k, r in host.host.resources.items()}
    )
    for device_id, device in resources["rdma/hca"].items():
        assert device.attributes.product.startswith("ConnectX-6")
        assert device.attributes.pci_address == device_id
        assert device.attributes.pcie_root.startswith("pci0000:")
    slot = next(iter(resources["rdma/hca_shared"].values())).attributes
    assert (slot.product, slot.pci_address, slot.pcie_root) == ("ConnectX-5", "", "")
