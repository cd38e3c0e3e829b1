"""The driver's hooks: simulation set-up, simulated faults, shutdown."""

from __future__ import annotations

import pytest
from devicehost_ascend.driver import AscendDriver

from devicehost.testing import FakeRoot

NPU = "huawei.com/Ascend910"


def simulated(fake_root: FakeRoot, **config: object) -> AscendDriver:
    driver = AscendDriver()
    driver.devicehost_simulate(root=fake_root.path)
    driver.devicehost_configure(config=config, root=fake_root.path, simulated=True)
    return driver


def test_simulate_builds_an_eight_chip_910_node(fake_root: FakeRoot) -> None:
    """The simulate hook alone lays out /dev/davinci0-7 and the shared nodes under root."""
    AscendDriver().devicehost_simulate(root=fake_root.path)
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


def test_simulated_cdi_spec_is_written_under_the_simulated_root(fake_root: FakeRoot) -> None:
    """--simulate with useCdi writes the spec for the host's /var/run/cdi (the default
    cdiDir) inside the scratch root."""
    simulated(fake_root, useAscendRuntime=False, useCdi=True)
    assert fake_root.at("/var/run/cdi/devicehost-huawei.com-npu.json").is_file()


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
    driver.devicehost_simulate(root=fake_root.path)
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
