"""Health from port state, in the device lists the driver enumerates."""

from __future__ import annotations

from devicehost_rdma.simulated import SimulatedNode, set_link, two_port_hca
from rdma_helpers import configured, exclusive_pool, health, listed, named, shared_pool

from devicehost.testing import FakeRoot

PORT = "/sys/class/infiniband/{}/ports/{}/{}"


def test_link_down_turns_only_that_hca_unhealthy_and_back(fake_root: FakeRoot) -> None:
    """A pulled cable makes its HCA Unhealthy; plugged back, Healthy again."""
    two_port_hca(fake_root)
    driver = configured(fake_root, {"pools": [exclusive_pool()]})
    set_link(fake_root.path, "mlx5_1", up=False)
    assert health(driver, "rdma/hca") == {"mlx5_0": "Healthy", "mlx5_1": "Unhealthy"}
    set_link(fake_root.path, "mlx5_1", up=True)
    assert health(driver, "rdma/hca") == {"mlx5_0": "Healthy", "mlx5_1": "Healthy"}


def test_active_port_without_physical_link_is_unhealthy(fake_root: FakeRoot) -> None:
    """state ACTIVE is not enough: phys_state must be LinkUp too."""
    two_port_hca(fake_root)
    fake_root.write(PORT.format("mlx5_0", 1, "phys_state"), "3: Disabled")
    driver = configured(fake_root, {"pools": [exclusive_pool()]})
    assert health(driver, "rdma/hca")["mlx5_0"] == "Unhealthy"


def test_link_up_port_not_yet_active_is_unhealthy(fake_root: FakeRoot) -> None:
    """LinkUp but INIT (no subnet manager has configured the port) is Unhealthy."""
    two_port_hca(fake_root)
    fake_root.write(PORT.format("mlx5_0", 1, "state"), "2: INIT")
    driver = configured(fake_root, {"pools": [exclusive_pool()]})
    assert health(driver, "rdma/hca")["mlx5_0"] == "Unhealthy"


def test_multi_port_hca_is_healthy_while_any_used_port_is_up(fake_root: FakeRoot) -> None:
    """A two-port RDMA device stays Healthy with one port down, not with both down."""
    SimulatedNode(fake_root).hca("0000:05:00.0", ports=2)
    driver = configured(fake_root, {"pools": [exclusive_pool()]})
    set_link(fake_root.path, "mlx5_0", up=False, port=1)
    assert health(driver, "rdma/hca") == {"mlx5_0": "Healthy"}
    set_link(fake_root.path, "mlx5_0", up=False, port=2)
    assert health(driver, "rdma/hca") == {"mlx5_0": "Unhealthy"}


def test_pool_judges_mixed_hca_by_the_ports_of_its_link_type(fake_root: FakeRoot) -> None:
    """Port 1 InfiniBand down, port 2 Ethernet up: Healthy for an Ethernet pool only."""
    SimulatedNode(fake_root).hca("0000:05:00.0", ports=2)
    fake_root.write(PORT.format("mlx5_0", 2, "link_layer"), "Ethernet")
    set_link(fake_root.path, "mlx5_0", up=False, port=1)
    driver = configured(
        fake_root,
        {
            "pools": [
                exclusive_pool("rdma/ib", linkTypes=["ib"]),
                exclusive_pool("rdma/eth", linkTypes=["eth"]),
            ]
        },
    )
    assert health(driver, "rdma/ib") == {"mlx5_0": "Unhealthy"}
    assert health(driver, "rdma/eth") == {"mlx5_0": "Healthy"}


def test_exclusive_device_carries_its_numa_node(eight_hca_root: FakeRoot) -> None:
    """Each exclusive device reports the NUMA node of its PCI function."""
    driver = configured(eight_hca_root)
    numa = {i: d.numa_nodes for i, d in named(driver, "rdma/hca").items()}
    assert numa["mlx5_0"] == (0,)
    assert numa["mlx5_9"] == (1,)


def test_shared_slots_healthy_while_any_pool_hca_is(fake_root: FakeRoot) -> None:
    """N slots; Healthy with one of two HCAs down, Unhealthy with both, back after."""
    two_port_hca(fake_root)
    driver = configured(fake_root, {"pools": [shared_pool(slots=3)]})
    assert health(driver, "rdma/hca_shared") == {f"slot-{i}": "Healthy" for i in range(3)}
    set_link(fake_root.path, "mlx5_0", up=False)
    assert set(health(driver, "rdma/hca_shared").values()) == {"Healthy"}
    set_link(fake_root.path, "mlx5_1", up=False)
    assert set(health(driver, "rdma/hca_shared").values()) == {"Unhealthy"}
    set_link(fake_root.path, "mlx5_0", up=True)
    assert set(health(driver, "rdma/hca_shared").values()) == {"Healthy"}


def test_shared_slots_span_the_numa_nodes_of_the_pool(eight_hca_root: FakeRoot) -> None:
    """A slot gives every HCA of the pool, so it is local to all their NUMA nodes."""
    driver = configured(eight_hca_root, {"pools": [shared_pool(slots=2, functionTypes=["pf"])]})
    assert {d.numa_nodes for d in listed(driver, "rdma/hca_shared").values()} == {(0, 1)}


def test_shared_pool_without_hcas_advertises_no_slot(fake_root: FakeRoot) -> None:
    """No matching HCA: no slots at all (capacity 0), not N Unhealthy ones."""
    two_port_hca(fake_root)
    driver = configured(fake_root, {"pools": [shared_pool(ifNames=["nothing"])]})
    assert listed(driver, "rdma/hca_shared") == {}


def test_removed_hca_disappears_from_the_list(fake_root: FakeRoot) -> None:
    """Hot-unplug: the HCA is absent from the next enumeration, not Unhealthy."""
    two_port_hca(fake_root)
    driver = configured(fake_root, {"pools": [exclusive_pool()]})
    fake_root.remove("/sys/class/infiniband/mlx5_0")
    assert health(driver, "rdma/hca") == {"mlx5_1": "Healthy"}
