"""The conformance battery, on the simulated node and on a real-layout fake tree."""

from __future__ import annotations

from devicehost_rdma.simulated import sriov_hca, two_port_hca
from rdma_helpers import exclusive_pool, shared_pool

from devicehost.testing import FakeRoot, check_driver


def test_conformance_on_the_simulated_node(fake_root: FakeRoot) -> None:
    """The demo's node: 8 exclusive IB devices and 100 shared RoCE slots, all healthy."""
    report = check_driver("rdma", fake_root, simulated=True)
    assert report.devices == {"rdma/hca": 8, "rdma/hca_shared": 100}
    assert report.healthy == report.devices


def test_conformance_on_a_two_port_hca_with_explicit_pools(fake_root: FakeRoot) -> None:
    """A dual-port card split into an exclusive and a shared pool by PCI address."""
    two_port_hca(fake_root)
    report = check_driver(
        "rdma",
        fake_root,
        config={
            "pools": [
                exclusive_pool("rdma/hca_a", pciAddresses=["0000:3d:00.0"]),
                shared_pool("rdma/hca_shared_devices_b", slots=10, pciAddresses=["0000:3d:00.1"]),
            ]
        },
    )
    assert report.devices == {"rdma/hca_a": 1, "rdma/hca_shared_devices_b": 10}


def test_conformance_with_sriov_vfs_and_a_link_down(fake_root: FakeRoot) -> None:
    """VFs as exclusive devices; one VF with its link down is listed Unhealthy."""
    sriov_hca(fake_root, vfs=4)
    fake_root.write("/sys/class/infiniband/mlx5_2/ports/1/state", "1: DOWN")
    report = check_driver(
        "rdma", fake_root, config={"pools": [exclusive_pool("rdma/roce_vf", functionTypes=["vf"])]}
    )
    assert (report.devices, report.healthy) == ({"rdma/roce_vf": 4}, {"rdma/roce_vf": 3})
