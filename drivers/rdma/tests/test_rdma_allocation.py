"""Allocate: device nodes, the RDMA_DEVICES env, shared slots, CDI."""

from __future__ import annotations

import json

import pytest
from devicehost_rdma.simulated import SimulatedNode, set_link, two_port_hca
from rdma_helpers import configured, exclusive_pool, listed, shared_pool

from devicehost import DeviceNode, UnknownDevice
from devicehost.testing import FakeRoot


def nodes(*names: str) -> tuple[DeviceNode, ...]:
    return tuple(DeviceNode(host_path=f"/dev/infiniband/{n}", permissions="rw") for n in names)


def test_exclusive_allocation_gives_char_devices_rdma_cm_and_env(fake_root: FakeRoot) -> None:
    """Two HCAs: each one's uverbs/umad/issm, rdma_cm once, RDMA_DEVICES naming both."""
    two_port_hca(fake_root)
    driver = configured(fake_root, {"pools": [exclusive_pool()]})
    allocation = driver.devicehost_allocate(resource="rdma/hca", device_ids=["mlx5_1", "mlx5_0"])
    assert allocation.envs == {"RDMA_DEVICES": "mlx5_0,mlx5_1"}
    assert allocation.devices == nodes(
        "uverbs0", "umad0", "issm0", "uverbs1", "umad1", "issm1", "rdma_cm"
    )
    assert (allocation.mounts, allocation.cdi_devices) == ((), ())


def test_no_rdma_cm_on_the_node_means_none_given(fake_root: FakeRoot) -> None:
    """Without rdma_ucm (no rdma_cm), only the HCA's own devices are given."""
    SimulatedNode(fake_root, rdma_cm=False).hca("0000:05:00.0")
    driver = configured(fake_root, {"pools": [exclusive_pool()]})
    allocation = driver.devicehost_allocate(resource="rdma/hca", device_ids=["mlx5_0"])
    assert allocation.devices == nodes("uverbs0", "umad0", "issm0")


def test_nodes_missing_from_a_visible_dev_are_left_out(fake_root: FakeRoot) -> None:
    """With /dev/infiniband visible, a node absent there is not given (it would fail the
    container's start); the HCA's other nodes still are."""
    two_port_hca(fake_root)
    fake_root.remove("/dev/infiniband/umad0")
    driver = configured(fake_root, {"pools": [exclusive_pool()]})
    allocation = driver.devicehost_allocate(resource="rdma/hca", device_ids=["mlx5_0"])
    assert allocation.devices == nodes("uverbs0", "issm0", "rdma_cm")


def test_without_a_visible_dev_sysfs_is_trusted(fake_root: FakeRoot) -> None:
    """With no /dev/infiniband under root (host /dev not mounted), every node sysfs names
    is given, rdma_cm included when its misc device exists."""
    two_port_hca(fake_root)
    fake_root.remove("/dev/infiniband")
    driver = configured(fake_root, {"pools": [exclusive_pool()]})
    allocation = driver.devicehost_allocate(resource="rdma/hca", device_ids=["mlx5_0"])
    assert allocation.devices == nodes("uverbs0", "umad0", "issm0", "rdma_cm")


def test_shared_slot_gives_every_healthy_hca_of_the_pool(fake_root: FakeRoot) -> None:
    """A slot gives the pool's HCAs whose links are up, leaving out one that is down."""
    two_port_hca(fake_root, link_layer="Ethernet")
    driver = configured(fake_root, {"pools": [shared_pool()]})
    set_link(fake_root.path, "mlx5_1", up=False)
    allocation = driver.devicehost_allocate(resource="rdma/hca_shared", device_ids=["slot-3"])
    assert allocation.envs == {"RDMA_DEVICES": "mlx5_0"}
    assert allocation.devices == nodes("uverbs0", "umad0", "issm0", "rdma_cm")


def test_several_slots_in_one_container_give_each_device_once(fake_root: FakeRoot) -> None:
    """Two slots of the same pool do not duplicate device nodes."""
    two_port_hca(fake_root)
    driver = configured(fake_root, {"pools": [shared_pool()]})
    allocation = driver.devicehost_allocate(
        resource="rdma/hca_shared", device_ids=["slot-0", "slot-1"]
    )
    assert allocation.envs == {"RDMA_DEVICES": "mlx5_0,mlx5_1"}
    assert len(allocation.devices) == len(set(allocation.devices)) == 7


@pytest.mark.parametrize(
    ("resource", "device_id"),
    [
        ("rdma/hca", "mlx5_6"),  # exists, but in the other pool
        ("rdma/hca", "mlx5_99"),
        ("rdma/hca_shared", "slot-100"),  # past the 100 slots
        ("rdma/hca_shared", "slot-01"),
        ("rdma/hca_shared", "mlx5_6"),
    ],
)
def test_unknown_id_is_refused(eight_hca_root: FakeRoot, resource: str, device_id: str) -> None:
    """An ID the pool does not advertise raises UnknownDevice naming it."""
    driver = configured(eight_hca_root)
    with pytest.raises(UnknownDevice, match=device_id):
        driver.devicehost_allocate(resource=resource, device_ids=[device_id])


CDI = {"enabled": True, "kind": "example.com/rdma"}


def test_cdi_spec_lists_each_hca_with_rdma_cm_in_common_edits(fake_root: FakeRoot) -> None:
    """With CDI on, <root>/var/run/cdi holds a spec: one device per HCA, rdma_cm common."""
    two_port_hca(fake_root)
    configured(fake_root, {"pools": [exclusive_pool()], "cdi": CDI})
    spec = json.loads(fake_root.at("/var/run/cdi/devicehost-example.com-rdma.json").read_text())
    assert spec["kind"] == "example.com/rdma"
    assert [d["name"] for d in spec["devices"]] == ["mlx5_0", "mlx5_1"]
    assert [n["path"] for n in spec["devices"][1]["containerEdits"]["deviceNodes"]] == [
        "/dev/infiniband/uverbs1",
        "/dev/infiniband/umad1",
        "/dev/infiniband/issm1",
    ]
    assert spec["containerEdits"]["deviceNodes"][0]["path"] == "/dev/infiniband/rdma_cm"


def test_cdi_allocation_names_devices_instead_of_listing_nodes(fake_root: FakeRoot) -> None:
    """With CDI on, the answer carries CDI names and the env; nodes come from the spec."""
    two_port_hca(fake_root)
    driver = configured(fake_root, {"pools": [exclusive_pool()], "cdi": CDI})
    allocation = driver.devicehost_allocate(resource="rdma/hca", device_ids=["mlx5_1"])
    assert allocation.cdi_devices == ("example.com/rdma=mlx5_1",)
    assert (allocation.envs, allocation.devices) == ({"RDMA_DEVICES": "mlx5_1"}, ())


def test_cdi_spec_follows_a_removed_hca(fake_root: FakeRoot) -> None:
    """An HCA unplugged leaves the spec at the next enumeration."""
    two_port_hca(fake_root)
    driver = configured(fake_root, {"pools": [exclusive_pool()], "cdi": {**CDI, "dir": "/etc/cdi"}})
    fake_root.remove("/sys/class/infiniband/mlx5_0")
    listed(driver, "rdma/hca")
    spec = json.loads(fake_root.at("/etc/cdi/devicehost-example.com-rdma.json").read_text())
    assert [d["name"] for d in spec["devices"]] == ["mlx5_1"]
