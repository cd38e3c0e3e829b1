"""Discovery: what the driver reads from sysfs about each HCA."""

from __future__ import annotations

import pytest
from devicehost_rdma.discovery import char_device_map, discover, netns_mode
from devicehost_rdma.hca import Port, parse_phys_state, parse_state
from devicehost_rdma.simulated import SimulatedNode, sriov_hca, two_port_hca

from devicehost.testing import FakeRoot


def test_pci_function_read_through_device_link(fake_root: FakeRoot) -> None:
    """Vendor, device ID, driver, NUMA node, netdevs come from the HCA's PCI function."""
    two_port_hca(fake_root, numa_node=1)
    hca = discover(fake_root.path)[1]
    assert (
        hca.name,
        hca.pci_address,
        hca.vendor,
        hca.device_id,
        hca.driver,
        hca.numa_node,
        hca.netdevs,
    ) == ("mlx5_1", "0000:3d:00.1", "15b3", "101b", "mlx5_core", 1, ("ib1",))


def test_two_port_card_is_two_hcas_with_one_port_each(fake_root: FakeRoot) -> None:
    """A dual-port ConnectX card shows as two RDMA devices, each with port 1 up."""
    two_port_hca(fake_root)
    hcas = discover(fake_root.path)
    assert [(h.name, [p.number for p in h.ports], h.ports[0].up) for h in hcas] == [
        ("mlx5_0", [1], True),
        ("mlx5_1", [1], True),
    ]
    assert hcas[0].ports[0].link_layer == "InfiniBand"


def test_pci_path_is_the_ancestry_below_sys_devices(fake_root: FakeRoot) -> None:
    """The resolved /sys/devices path gives root complex, root port and switch ports."""
    two_port_hca(fake_root)
    assert discover(fake_root.path)[0].pci_path == (
        "pci0000:3a",
        "0000:3a:00.0",
        "0000:3b:00.0",
        "0000:3c:00.0",
    )


def test_char_devices_follow_the_ibdev_attribute_not_the_numbering(fake_root: FakeRoot) -> None:
    """uverbsN belongs to whichever HCA its ibdev file names, whatever N is."""
    two_port_hca(fake_root)
    fake_root.write("/sys/class/infiniband_verbs/uverbs0/ibdev", "mlx5_1")
    fake_root.write("/sys/class/infiniband_verbs/uverbs1/ibdev", "mlx5_0")
    by_name = {h.name: h.char_devices for h in discover(fake_root.path)}
    assert by_name == {
        "mlx5_0": ("uverbs1", "umad0", "issm0"),
        "mlx5_1": ("uverbs0", "umad1", "issm1"),
    }


def test_multi_port_hca_has_one_umad_and_issm_per_port(fake_root: FakeRoot) -> None:
    """A two-port RDMA device gets one uverbs and, per port, one umad and one issm."""
    SimulatedNode(fake_root).hca("0000:05:00.0", ports=2)
    assert discover(fake_root.path)[0].char_devices == (
        "uverbs0",
        "umad0",
        "umad1",
        "issm0",
        "issm1",
    )


def test_class_abi_version_files_are_not_devices(fake_root: FakeRoot) -> None:
    """The abi_version files in the verbs and MAD classes map to no HCA."""
    two_port_hca(fake_root)
    assert fake_root.at("/sys/class/infiniband_mad/abi_version").is_file()
    assert sorted(char_device_map(fake_root.path)) == ["mlx5_0", "mlx5_1"]


def test_sriov_vf_is_recognised_by_its_physfn_link(fake_root: FakeRoot) -> None:
    """A VF's PCI function links to its PF (physfn); the PF has no such link."""
    names = sriov_hca(fake_root, vfs=2)
    hcas = {h.name: h for h in discover(fake_root.path)}
    assert [(n, hcas[n].is_vf, hcas[n].physfn, hcas[n].device_id) for n in names] == [
        ("mlx5_0", False, None, "1017"),
        ("mlx5_1", True, "0000:60:00.0", "1018"),
        ("mlx5_2", True, "0000:60:00.0", "1018"),
    ]


def test_unknown_numa_node_is_none(fake_root: FakeRoot) -> None:
    """numa_node -1 (a single-node machine) is reported as unknown, not as node -1."""
    SimulatedNode(fake_root).hca("0000:05:00.0", numa_node=-1)
    assert discover(fake_root.path)[0].numa_node is None


def test_hca_without_pci_function_is_still_listed(fake_root: FakeRoot) -> None:
    """A software RDMA device (no PCI parent) is found, with its ports, PCI fields empty."""
    fake_root.write("/sys/devices/virtual/infiniband/rxe0/ports/1/state", "4: ACTIVE")
    fake_root.write("/sys/devices/virtual/infiniband/rxe0/ports/1/phys_state", "5: LinkUp")
    fake_root.symlink("/sys/class/infiniband/rxe0", "/sys/devices/virtual/infiniband/rxe0")
    hca = discover(fake_root.path)[0]
    assert (hca.name, hca.pci_address, hca.vendor, hca.ports[0].up) == ("rxe0", None, None, True)


def test_removed_hca_is_not_discovered(fake_root: FakeRoot) -> None:
    """An HCA whose class entry vanished (hot-unplug) is gone from the next discovery."""
    two_port_hca(fake_root)
    fake_root.remove("/sys/class/infiniband/mlx5_0")
    assert [h.name for h in discover(fake_root.path)] == ["mlx5_1"]


def test_hcas_are_in_natural_order(fake_root: FakeRoot) -> None:
    """mlx5_2 comes before mlx5_10."""
    node = SimulatedNode(fake_root)
    for index in range(11):
        node.hca(f"0000:{index + 1:02x}:00.0")
    assert [h.name for h in discover(fake_root.path)][1:3] == ["mlx5_1", "mlx5_2"]


@pytest.mark.parametrize(
    ("text", "state"),
    [("4: ACTIVE", 4), ("1: DOWN", 1), ("ACTIVE", 4), ("", None), ("bogus", None)],
)
def test_port_state_parsing(text: str, state: int | None) -> None:
    """Port state reads '<n>: NAME' as n; a bare name is understood; junk is unknown."""
    assert parse_state(text) == state


def test_port_is_up_only_when_active_and_link_up() -> None:
    """ACTIVE without LinkUp, or LinkUp without ACTIVE (no subnet manager), is not up."""
    assert Port(number=1, state="4: ACTIVE", phys_state="5: LinkUp").up
    assert not Port(number=1, state="4: ACTIVE", phys_state="3: Disabled").up
    assert not Port(number=1, state="2: INIT", phys_state="5: LinkUp").up
    assert parse_phys_state("LinkUp") == 5


@pytest.mark.parametrize(
    ("value", "mode"),
    [("Y", "shared"), ("1", "shared"), ("N", "exclusive"), ("0", "exclusive"), (None, None)],
)
def test_netns_mode(fake_root: FakeRoot, value: str | None, mode: str | None) -> None:
    """ib_core's netns_mode Y/1 is shared, N/0 exclusive, absent (old kernel) unknown."""
    if value is not None:
        fake_root.write("/sys/module/ib_core/parameters/netns_mode", value)
    assert netns_mode(fake_root.path) == mode
