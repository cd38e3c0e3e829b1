"""The simulated node and simulate_health: the fake hardware the demo serves."""

from __future__ import annotations

from collections import Counter

from devicehost_rdma.discovery import discover
from devicehost_rdma.driver import RdmaDriver
from rdma_helpers import IB_HCAS, configured, health, id_of

from devicehost.testing import FakeRoot

PORT = "/sys/class/infiniband/{}/ports/1/{}"


def simulated_driver(fake_root: FakeRoot) -> RdmaDriver:
    driver = RdmaDriver()
    driver.devicehost_simulate(root=fake_root.path, node="")
    driver.devicehost_configure(config={}, root=fake_root.path, simulated=True)
    return driver


def test_default_node_has_eight_hcas_over_two_numa_nodes(eight_hca_root: FakeRoot) -> None:
    """Eight physical HCAs, four per NUMA node, both link layers, and two VFs."""
    hcas = discover(eight_hca_root.path)
    pfs = [h for h in hcas if not h.is_vf]
    assert len(pfs) == 8
    assert Counter(h.numa_node for h in pfs) == {0: 4, 1: 4}
    assert Counter(h.link_layers for h in pfs) == {("infiniband",): 6, ("ethernet",): 2}
    assert [h.name for h in hcas if h.is_vf] == ["mlx5_8", "mlx5_9"]


def test_switches_hold_two_hcas_each(eight_hca_root: FakeRoot) -> None:
    """Each PCIe switch (upstream port) has two HCAs below it."""
    switches = Counter(h.pci_path[:3] for h in discover(eight_hca_root.path) if not h.is_vf)
    assert set(switches.values()) == {2}


def test_simulate_hook_builds_the_default_node(fake_root: FakeRoot) -> None:
    """devicehost_simulate + default pools: eight exclusive IB devices, 100 shared slots."""
    driver = simulated_driver(fake_root)
    assert list(health(driver, "rdma/hca")) == IB_HCAS
    assert len(health(driver, "rdma/hca_shared")) == 100


def test_simulate_health_writes_port_state_files(fake_root: FakeRoot) -> None:
    """Unhealthy pulls the cable (DOWN / Polling); healthy plugs it back."""
    driver = simulated_driver(fake_root)
    assert driver.devicehost_simulate_health(
        resource="rdma/hca", device_id=id_of(driver, "mlx5_2"), healthy=False
    )
    assert (
        fake_root.at(PORT.format("mlx5_2", "state")).read_text(),
        fake_root.at(PORT.format("mlx5_2", "phys_state")).read_text(),
    ) == ("1: DOWN\n", "2: Polling\n")
    assert health(driver, "rdma/hca")["mlx5_2"] == "Unhealthy"
    driver.devicehost_simulate_health(
        resource="rdma/hca", device_id=id_of(driver, "mlx5_2"), healthy=True
    )
    assert health(driver, "rdma/hca")["mlx5_2"] == "Healthy"


def test_simulate_health_on_a_slot_downs_the_whole_pool(fake_root: FakeRoot) -> None:
    """A slot turns Unhealthy only with every pool HCA down, so that is what it does."""
    driver = simulated_driver(fake_root)
    driver.devicehost_simulate_health(resource="rdma/hca_shared", device_id="slot-5", healthy=False)
    assert set(health(driver, "rdma/hca_shared").values()) == {"Unhealthy"}
    assert set(health(driver, "rdma/hca").values()) == {"Healthy"}


def test_simulate_health_refuses_unknown_devices_and_real_hardware(fake_root: FakeRoot) -> None:
    """False for an ID the pool lacks, and for a driver not running simulated."""
    driver = simulated_driver(fake_root)
    assert not driver.devicehost_simulate_health(
        resource="rdma/hca", device_id=id_of(driver, "mlx5_6"), healthy=False
    )
    real = configured(fake_root)
    assert not real.devicehost_simulate_health(
        resource="rdma/hca", device_id=id_of(real, "mlx5_0"), healthy=False
    )
    assert health(real, "rdma/hca")["mlx5_0"] == "Healthy"
