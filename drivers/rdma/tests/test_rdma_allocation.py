"""Container edits: what each device and resource declares, and what the host composes."""

from __future__ import annotations

from devicehost_rdma.allocation import pcidevice_env
from devicehost_rdma.driver import RdmaDriver
from devicehost_rdma.simulated import SimulatedNode, set_link, two_port_hca
from rdma_helpers import composed, configured, exclusive_pool, id_of, listed, shared_pool

from devicehost import DeviceNode
from devicehost.testing import FakeRoot


def nodes(*names: str) -> tuple[DeviceNode, ...]:
    return tuple(DeviceNode(host_path=f"/dev/infiniband/{n}", permissions="rw") for n in names)


def test_the_driver_has_no_allocate_hook() -> None:
    """Everything a container gets is declared with devices and resources: the host
    answers Allocate without calling the driver."""
    assert not hasattr(RdmaDriver, "devicehost_allocate")


def test_one_exclusive_device_gives_its_nodes_rdma_cm_and_envs(fake_root: FakeRoot) -> None:
    """One HCA: rdma_cm (from the resource), its uverbs/umad/issm, its name and address."""
    two_port_hca(fake_root)
    driver = configured(fake_root, {"pools": [exclusive_pool()]})
    edits = composed(driver, "rdma/hca", ["0000:3d:00.1"])
    assert edits.envs == {"RDMA_DEVICES": "mlx5_1", "PCIDEVICE_RDMA_HCA": "0000:3d:00.1"}
    assert edits.devices == nodes("rdma_cm", "uverbs1", "umad1", "issm1")
    assert (edits.mounts, edits.cdi_devices) == ((), ())


def test_two_exclusive_devices_join_envs_in_request_order(fake_root: FakeRoot) -> None:
    """Two HCAs: both HCAs' nodes, rdma_cm once, both env variables joined in the order
    the kubelet asked for them."""
    two_port_hca(fake_root)
    driver = configured(fake_root, {"pools": [exclusive_pool()]})
    edits = composed(driver, "rdma/hca", ["0000:3d:00.1", "0000:3d:00.0"])
    assert edits.envs == {
        "RDMA_DEVICES": "mlx5_1,mlx5_0",
        "PCIDEVICE_RDMA_HCA": "0000:3d:00.1,0000:3d:00.0",
    }
    assert edits.devices == nodes(
        "rdma_cm", "uverbs1", "umad1", "issm1", "uverbs0", "umad0", "issm0"
    )


def test_every_exclusive_device_composes_without_a_clash(eight_hca_root: FakeRoot) -> None:
    """All ten exclusive devices of a pool in one container: every node once."""
    driver = configured(eight_hca_root, {"pools": [exclusive_pool()]})
    edits = composed(driver, "rdma/hca", list(listed(driver, "rdma/hca")))
    assert len(edits.envs["PCIDEVICE_RDMA_HCA"].split(",")) == 10
    assert len(edits.devices) == len(set(edits.devices)) == 1 + 10 * 3


def test_no_rdma_cm_on_the_node_means_none_given(fake_root: FakeRoot) -> None:
    """Without rdma_ucm (no rdma_cm), only the HCA's own devices are given."""
    SimulatedNode(fake_root, rdma_cm=False).hca("0000:05:00.0")
    driver = configured(fake_root, {"pools": [exclusive_pool()]})
    assert composed(driver, "rdma/hca", ["0000:05:00.0"]).devices == nodes(
        "uverbs0", "umad0", "issm0"
    )


def test_nodes_missing_from_a_visible_dev_are_left_out(fake_root: FakeRoot) -> None:
    """With /dev/infiniband visible, a node absent there is not given (it would fail the
    container's start); the HCA's other nodes still are."""
    two_port_hca(fake_root)
    fake_root.remove("/dev/infiniband/umad0")
    driver = configured(fake_root, {"pools": [exclusive_pool()]})
    assert composed(driver, "rdma/hca", ["0000:3d:00.0"]).devices == nodes(
        "rdma_cm", "uverbs0", "issm0"
    )


def test_without_a_visible_dev_sysfs_is_trusted(fake_root: FakeRoot) -> None:
    """With no /dev/infiniband under root (host /dev not mounted), every node sysfs names
    is given, rdma_cm included when its misc device exists."""
    two_port_hca(fake_root)
    fake_root.remove("/dev/infiniband")
    driver = configured(fake_root, {"pools": [exclusive_pool()]})
    assert composed(driver, "rdma/hca", ["0000:3d:00.0"]).devices == nodes(
        "rdma_cm", "uverbs0", "umad0", "issm0"
    )


def test_shared_slot_gives_every_hca_of_the_pool_even_one_that_is_down(
    fake_root: FakeRoot,
) -> None:
    """Issue item 9: a slot gives all the pool's HCAs, also one whose link is down (the
    old answer left it out, and the container missed it for good)."""
    two_port_hca(fake_root, link_layer="Ethernet")
    driver = configured(fake_root, {"pools": [shared_pool()]})
    set_link(fake_root.path, "mlx5_1", up=False)
    edits = composed(driver, "rdma/hca_shared", ["slot-3"])
    assert edits.envs == {"RDMA_DEVICES": "mlx5_0,mlx5_1"}
    assert edits.devices == nodes(
        "rdma_cm", "uverbs0", "umad0", "issm0", "uverbs1", "umad1", "issm1"
    )


def test_several_slots_in_one_container_give_each_device_once(fake_root: FakeRoot) -> None:
    """Two slots of the same pool do not duplicate device nodes or env values."""
    two_port_hca(fake_root)
    driver = configured(fake_root, {"pools": [shared_pool()]})
    edits = composed(driver, "rdma/hca_shared", ["slot-0", "slot-1"])
    assert edits.envs == {"RDMA_DEVICES": "mlx5_0,mlx5_1"}
    assert len(edits.devices) == len(set(edits.devices)) == 7


def test_resource_declares_rdma_cm_and_its_joined_envs(eight_hca_root: FakeRoot) -> None:
    """rdma_cm is the resource's, once per container; exclusive pools join RDMA_DEVICES
    and PCIDEVICE_<RESOURCE>, shared pools RDMA_DEVICES."""
    driver = configured(eight_hca_root)
    specs = {s.name: s for s in driver.devicehost_resources()}
    assert specs["rdma/hca"].edits.devices == nodes("rdma_cm")
    assert specs["rdma/hca"].joined_envs == ("RDMA_DEVICES", "PCIDEVICE_RDMA_HCA")
    assert specs["rdma/hca_shared"].joined_envs == ("RDMA_DEVICES",)


def test_pcidevice_name_follows_the_sriov_device_plugin() -> None:
    """PCIDEVICE_ + prefix + _ + name, dots to underscores, upper case."""
    assert pcidevice_env("rdma/ib_vf") == "PCIDEVICE_RDMA_IB_VF"
    assert pcidevice_env("nvidia.com/cx7_vf") == "PCIDEVICE_NVIDIA_COM_CX7_VF"
    assert pcidevice_env("intel.com/sriov") == "PCIDEVICE_INTEL_COM_SRIOV"


def test_exclusive_device_ids_are_pci_addresses(eight_hca_root: FakeRoot) -> None:
    """Issue item 8: an exclusive device's ID is its PCI function's address."""
    driver = configured(eight_hca_root)
    assert id_of(driver, "mlx5_0") == "0000:4d:00.0"
    assert list(listed(driver, "rdma/hca"))[:2] == ["0000:4d:00.0", "0000:4e:00.0"]
