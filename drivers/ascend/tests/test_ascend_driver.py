"""The driver's hooks: simulation set-up, simulated faults, shutdown."""

from __future__ import annotations

import pytest
from devicehost_ascend.driver import AscendDriver

from devicehost import DriverUnavailable
from devicehost.testing import FakeRoot

NPU = "huawei.com/Ascend910"


def simulated(fake_root: FakeRoot, **config: object) -> AscendDriver:
    driver = AscendDriver()
    driver.devicehost_simulate(root=fake_root.path, config=config, node="")
    driver.devicehost_configure(config=config, root=fake_root.path, simulated=True)
    return driver


def test_simulate_builds_an_eight_chip_910_node(fake_root: FakeRoot) -> None:
    """The simulate hook alone lays out /dev/davinci0-7 and the shared nodes under root."""
    AscendDriver().devicehost_simulate(root=fake_root.path, config={}, node="")
    for index in range(8):
        assert fake_root.at(f"/dev/davinci{index}").exists()
    for shared in ("davinci_manager", "devmm_svm", "hisi_hdc"):
        assert fake_root.at(f"/dev/{shared}").exists()


def test_configuring_another_preset_rebuilds_the_tree(fake_root: FakeRoot) -> None:
    """simulatedNode: ascend310px4 replaces the default node: four 310P chips, 0-3."""
    driver = simulated(fake_root, simulatedNode="ascend310px4")
    assert [r.name for r in driver.devicehost_resources()] == ["huawei.com/Ascend310P"]
    assert sorted(p.name for p in fake_root.at("/dev").glob("davinci[0-9]*")) == [
        "davinci0",
        "davinci1",
        "davinci2",
        "davinci3",
    ]


def test_simulated_fault_on_a_vnpu_faults_its_parent_chip(fake_root: FakeRoot) -> None:
    """simulate_health on a vNPU faults the chip it lives on, so all its vNPUs go."""
    driver = simulated(fake_root, simulatedNode="ascend910x8-vnpu")
    assert driver.devicehost_simulate_health(
        resource="huawei.com/Ascend910-8c", device_id="Ascend910-8c-196-6", healthy=False
    )
    health = {
        d.id: d.health for d in driver.devicehost_enumerate(resource="huawei.com/Ascend910-8c")
    }
    assert health == {"Ascend910-8c-196-6": "Unhealthy", "Ascend910-8c-197-6": "Unhealthy"}


def test_simulated_health_of_an_unknown_device_is_not_applied(fake_root: FakeRoot) -> None:
    """An ID the resource does not have: False, nothing changes."""
    driver = simulated(fake_root)
    assert (
        driver.devicehost_simulate_health(resource=NPU, device_id="Ascend910-9", healthy=False)
        is False
    )


def test_simulated_health_is_refused_on_real_hardware(fake_root: FakeRoot) -> None:
    """Outside simulation the hook answers None: real chips are not faulted on request."""
    fake_root.char_device("/dev/davinci0")
    driver = AscendDriver()
    driver.devicehost_configure(
        config={"fallbackChipType": "Ascend910"}, root=fake_root.path, simulated=False
    )
    assert (
        driver.devicehost_simulate_health(resource=NPU, device_id="Ascend910-0", healthy=False)
        is None
    )


def test_simulated_node_with_use_dcmi_false_serves_its_dev_nodes(fake_root: FakeRoot) -> None:
    """useDcmi: false under --simulate skips the simulated DCMI too: the simulated node's
    /dev/davinciN are served as fallbackChipType, and simulated faults are not offered."""
    driver = simulated(fake_root, useDcmi=False, fallbackChipType="Ascend910")
    assert [d.id for d in driver.devicehost_enumerate(resource=NPU)] == [
        f"Ascend910-{i}" for i in range(8)
    ]
    assert driver.devicehost_notes()[0].startswith("DCMI not used (useDcmi: false): ")
    assert (
        driver.devicehost_simulate_health(resource=NPU, device_id="Ascend910-0", healthy=False)
        is None
    )


def test_simulated_dcmi_reaching_no_chip_falls_back_to_dev(fake_root: FakeRoot) -> None:
    """When DCMI loads but every chip fails its queries, the driver serves /dev as
    fallbackChipType, and its first note carries DCMI's errors."""
    driver = AscendDriver()
    driver.devicehost_simulate(root=fake_root.path, config={}, node="")
    assert driver.simulation is not None
    for phys_id in range(8):
        driver.simulation.chip_by_phys(phys_id).present = False
    driver.devicehost_configure(
        config={"fallbackChipType": "Ascend910"}, root=fake_root.path, simulated=True
    )
    assert len(driver.devicehost_enumerate(resource=NPU)) == 8
    assert driver.devicehost_notes()[0].startswith(
        "no usable DCMI library (simulated DCMI (ascend910x8) reaches no chip: card 0 chip 0 "
        "skipped: dcmi_get_device_logic_id returned -8008; card 1 chip 0 skipped: "
    )


def test_shutdown_closes_the_library(fake_root: FakeRoot) -> None:
    """Shutdown releases DCMI."""
    driver = simulated(fake_root)
    driver.devicehost_shutdown()
    assert driver.simulation is not None and driver.simulation.closed


def test_hooks_before_configure_say_so() -> None:
    """A hook called before configure fails with a clear message, not an AttributeError."""
    with pytest.raises(RuntimeError, match="not configured yet"):
        AscendDriver().devicehost_enumerate(resource=NPU)


@pytest.mark.parametrize(
    ("node", "resource", "names"),
    [
        ("atlas-800-9000", "huawei.com/Ascend910", {"910A"}),
        ("atlas-800t-a2", "huawei.com/Ascend910", {"910B3"}),
        ("atlas-800-3000", "huawei.com/Ascend310P", {"310P3"}),
    ],
)
def test_each_published_machine_is_built_by_name(
    fake_root: FakeRoot, node: str, resource: str, names: set[str]
) -> None:
    """The simulate hook's node names a published machine: eight chips of its kind."""
    driver = AscendDriver()
    driver.devicehost_simulate(root=fake_root.path, config={}, node=node)
    driver.devicehost_configure(config={}, root=fake_root.path, simulated=True)
    assert [s.name for s in driver.devicehost_resources()] == [resource]
    assert len(driver.devicehost_enumerate(resource=resource)) == 8
    assert set(driver.node.inventory.chip_names.values()) == names


def test_the_inference_server_has_two_chips_per_duo_card(fake_root: FakeRoot) -> None:
    """atlas-800-3000: four Atlas 300I Duo cards of two 310P3 chips, NUMA 0 then 1."""
    driver = AscendDriver()
    driver.devicehost_simulate(root=fake_root.path, config={}, node="atlas-800-3000")
    driver.devicehost_configure(config={}, root=fake_root.path, simulated=True)
    assert driver.simulation is not None
    assert [len(card) for card in driver.simulation.cards] == [2, 2, 2, 2]
    numa = {
        d.id: d.numa_nodes for d in driver.devicehost_enumerate(resource="huawei.com/Ascend310P")
    }
    assert numa["Ascend310P-1"] == (0,) and numa["Ascend310P-6"] == (1,)


def test_a_machine_without_npus_builds_nothing_and_serves_nothing(fake_root: FakeRoot) -> None:
    """node dgx-h100: no tree is built, and configure says plainly there is no NPU here."""
    driver = AscendDriver()
    driver.devicehost_simulate(root=fake_root.path, config={}, node="dgx-h100")
    assert list(fake_root.path.iterdir()) == []
    with pytest.raises(DriverUnavailable, match=r"simulated machine 'dgx-h100' has none"):
        driver.devicehost_configure(config={}, root=fake_root.path, simulated=True)


def test_the_default_node_is_the_configured_preset(fake_root: FakeRoot) -> None:
    """node "" keeps today's default: the simulatedNode preset (an 8-chip 910 server)."""
    driver = simulated(fake_root)
    assert driver.simulation is not None and driver.simulation.label == "ascend910x8"


def test_host_paths_name_what_the_driver_reads_without_configure() -> None:
    """host_paths answers before configure; DCMI's directories are mounted at their real
    path, as libdcmi.so expects; /dev and the PCI sysfs are listed."""
    paths = {p.path: p for p in AscendDriver().devicehost_host_paths()}
    assert paths["/usr/local/dcmi"].at_real_path
    assert paths["/usr/local/Ascend/driver"].at_real_path
    assert {"/dev", "/sys/bus/pci/devices", "/sys/devices"} <= set(paths)
    assert not paths["/dev"].at_real_path
