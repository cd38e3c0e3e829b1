"""The simulated DCMI behaves like libdcmi.so where the driver can tell."""

from __future__ import annotations

import pytest
from devicehost_ascend.dcmi import (
    ASSERTION_RAISED,
    ASSERTION_RECOVERED,
    DcmiError,
    FaultEvent,
)
from devicehost_ascend.dcmi_sim import SIMULATED_ALARM_CODE, SIMULATED_FAULT_CODE, SimulatedDcmi
from devicehost_ascend.fault_codes import SHIPPED

from devicehost.sysfs import pci_numa_node, read_attr
from devicehost.testing import FakeRoot


def test_cards_chips_and_ids_of_the_310p_preset() -> None:
    """2 cards x 2 chips: logical IDs count across cards, physical IDs as configured."""
    sim = SimulatedDcmi.preset("ascend310px4")
    assert sim.card_ids() == [0, 1]
    assert [sim.chip_count(c) for c in sim.card_ids()] == [2, 2]
    assert sim.logic_id(1, 1) == 3
    assert sim.physical_id(3) == 3
    assert sim.chip_name(1, 0) == "310P3"


def test_bad_addresses_fail_like_dcmi() -> None:
    """An unknown card or chip raises DcmiError with DCMI's invalid-device code."""
    sim = SimulatedDcmi.preset("ascend910x8")
    with pytest.raises(DcmiError, match=r"^dcmi_get_device_health returned -8007$"):
        sim.health(8, 0)
    with pytest.raises(DcmiError, match=r"^dcmi_get_device_phyid_from_logicid returned -8007$"):
        sim.physical_id(9)


def test_fault_and_recovery_change_health_and_push_events() -> None:
    """A fault sets its alarm level (major, 2) and its code, and pushes assertion 1 with
    that code and severity; recovery undoes it and pushes assertion 0 for the code, both
    naming the chip's logical ID."""
    sim = SimulatedDcmi.preset("ascend910x8")
    events: list[FaultEvent] = []
    assert sim.subscribe_faults(events.append)
    sim.inject_fault(4)
    assert (sim.health(4, 0), sim.error_codes(4, 0)) == (2, [SIMULATED_FAULT_CODE])
    sim.recover(4)
    assert (sim.health(4, 0), sim.error_codes(4, 0)) == (0, [])
    assert [(e.logic_id, e.event_id, e.severity, e.assertion) for e in events] == [
        (4, SIMULATED_FAULT_CODE, 2, ASSERTION_RAISED),
        (4, SIMULATED_FAULT_CODE, 0, ASSERTION_RECOVERED),
    ]


def test_simulated_faults_use_codes_of_huaweis_table() -> None:
    """The default fault and alarm are real codes: RestartBusiness and NotHandleFault."""
    assert SHIPPED[SIMULATED_FAULT_CODE] == "RestartBusiness"
    assert SHIPPED[SIMULATED_ALARM_CODE] == "NotHandleFault"


def test_a_dropped_card_answers_not_ready() -> None:
    """After a card drop, health and error codes fail with -8012, as DCMI does."""
    sim = SimulatedDcmi.preset("ascend910x8")
    sim.drop(1)
    with pytest.raises(DcmiError, match="-8012"):
        sim.health(1, 0)
    with pytest.raises(DcmiError, match="-8012"):
        sim.error_codes(1, 0)


def test_one_subscription_per_process() -> None:
    """As DCMI documents, a second subscription is refused."""
    sim = SimulatedDcmi.preset("ascend910x8")
    sim.subscribe_faults(lambda event: None)
    with pytest.raises(DcmiError, match=r"^dcmi_subscribe_fault_event returned -8002$"):
        sim.subscribe_faults(lambda event: None)


def test_tree_has_nodes_and_pci_devices_with_numa(fake_root: FakeRoot) -> None:
    """build_tree writes the chip, vNPU and shared nodes and Huawei PCI devices with NUMA."""
    sim = SimulatedDcmi.preset("ascend910x8-vnpu")
    sim.build_tree(fake_root.path)
    nodes = sorted(p.name for p in fake_root.at("/dev").iterdir())
    assert nodes == sorted(
        [
            *(f"davinci{i}" for i in range(8)),
            "davinci_manager",
            "devmm_svm",
            "hisi_hdc",
            "vdavinci196",
            "vdavinci197",
            "vdavinci212",
            "vdavinci213",
            "vdavinci214",
            "vdavinci215",
        ]
    )
    address = sim.pci_address(5, 0)
    assert pci_numa_node(fake_root.path, address) == 1
    assert read_attr(fake_root.at(f"/sys/bus/pci/devices/{address}/vendor")) == "0x19e5"
    assert read_attr(fake_root.at(f"/sys/bus/pci/devices/{address}/device")) == "0xd801"


def test_remove_tree_takes_away_what_build_tree_made(fake_root: FakeRoot) -> None:
    """Switching presets leaves no chip node or PCI device of the old one behind."""
    sim = SimulatedDcmi.preset("ascend910x8-vnpu")
    sim.build_tree(fake_root.path)
    sim.remove_tree(fake_root.path)
    left = sorted(p.name for p in fake_root.at("/dev").iterdir())
    assert left == ["davinci_manager", "devmm_svm", "hisi_hdc"]
    assert list(fake_root.at("/sys/bus/pci/devices").iterdir()) == []
