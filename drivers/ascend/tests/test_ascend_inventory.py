"""Chips and vNPUs found through DCMI (the simulated library over a fake tree)."""

from __future__ import annotations

import pytest
from ascend_helpers import chip, open_simulated
from devicehost_ascend.config import parse_config
from devicehost_ascend.dcmi import VirtualDevice
from devicehost_ascend.dcmi_sim import SimulatedDcmi
from devicehost_ascend.inventory import chip_family, vnpu_kind
from devicehost_ascend.node import AscendNode, open_node

from devicehost import DriverUnavailable
from devicehost.testing import FakeRoot


def ids_and_numa(node: AscendNode, resource: str) -> list[tuple[str, tuple[int, ...]]]:
    return [(d.id, d.numa_nodes) for d in node.enumerate(resource)]


def test_ascend910_server_is_eight_chips_on_two_numa_nodes(fake_root: FakeRoot) -> None:
    """An 8-chip 910 server: one resource, IDs by physical ID, NUMA 0 for 0-3, 1 for 4-7."""
    node = open_simulated(fake_root, SimulatedDcmi.preset("ascend910x8"))
    assert node.resources == ("huawei.com/Ascend910",)
    assert ids_and_numa(node, "huawei.com/Ascend910") == [
        (f"Ascend910-{i}", (0,) if i < 4 else (1,)) for i in range(8)
    ]


def test_ascend310p_cards_with_two_chips_each(fake_root: FakeRoot) -> None:
    """Two 310P cards of two chips each: four Ascend310P devices, NUMA from their PCI slots."""
    node = open_simulated(fake_root, SimulatedDcmi.preset("ascend310px4"))
    assert node.resources == ("huawei.com/Ascend310P",)
    assert ids_and_numa(node, "huawei.com/Ascend310P") == [
        ("Ascend310P-0", (0,)),
        ("Ascend310P-1", (0,)),
        ("Ascend310P-2", (1,)),
        ("Ascend310P-3", (1,)),
    ]


def test_mixed_node_serves_one_resource_per_chip_family(fake_root: FakeRoot) -> None:
    """A node with 910 and 310P chips advertises each family as its own resource."""
    node = open_simulated(fake_root, SimulatedDcmi.preset("mixed"))
    assert node.resources == ("huawei.com/Ascend310P", "huawei.com/Ascend910")
    assert [d.id for d in node.enumerate("huawei.com/Ascend910")] == [
        "Ascend910-0",
        "Ascend910-1",
        "Ascend910-2",
        "Ascend910-3",
    ]
    assert [d.id for d in node.enumerate("huawei.com/Ascend310P")] == [
        "Ascend310P-4",
        "Ascend310P-5",
        "Ascend310P-6",
        "Ascend310P-7",
    ]


def test_device_ids_use_physical_not_logical_ids(fake_root: FakeRoot) -> None:
    """Where DCMI's logical order differs from the physical IDs, IDs follow the physical."""
    sim = SimulatedDcmi([[chip(5)], [chip(2)]])  # logical 0 is physical 5
    node = open_simulated(fake_root, sim)
    assert [d.id for d in node.enumerate("huawei.com/Ascend910")] == ["Ascend910-2", "Ascend910-5"]


@pytest.mark.parametrize(
    ("name", "family"),
    [
        ("910A", "Ascend910"),
        ("910B3", "Ascend910"),
        ("910ProB", "Ascend910"),
        ("310P3", "Ascend310P"),
        ("310", "Ascend310"),
        ("310B1", "Ascend310B"),
        ("Ascend910", "Ascend910"),
        ("710", None),
        ("", None),
    ],
)
def test_chip_name_decides_the_family(name: str, family: str | None) -> None:
    """DCMI's chip_name maps to the resource family; unknown chips map to nothing."""
    assert chip_family(name) == family


def test_unknown_chip_is_skipped_with_a_note(fake_root: FakeRoot) -> None:
    """A chip whose name is not an Ascend family is left out and the notes say why."""
    node = open_simulated(fake_root, SimulatedDcmi([[chip(0)], [chip(1, name="X100")]]))
    assert [d.id for d in node.enumerate("huawei.com/Ascend910")] == ["Ascend910-0"]
    assert "card 1 chip 0 skipped: chip name 'X100' is not a known Ascend chip" in node.notes


def test_chip_dcmi_cannot_read_at_start_is_skipped_with_a_note(fake_root: FakeRoot) -> None:
    """A chip that fails DCMI at start-up is left out, and the note carries DCMI's code."""
    node = open_simulated(fake_root, SimulatedDcmi([[chip(0)], [chip(1, present=False)]]))
    assert [d.id for d in node.enumerate("huawei.com/Ascend910")] == ["Ascend910-0"]
    assert "card 1 chip 0 skipped: dcmi_get_device_logic_id returned -8008" in node.notes


def test_dcmi_without_chips_or_dev_nodes_is_unavailable(fake_root: FakeRoot) -> None:
    """DCMI lists no chip and there is no /dev/davinciN: unavailable, not an empty driver,
    and the reason names the keys that choose the /dev fallback."""
    with pytest.raises(DriverUnavailable) as caught:
        open_simulated(fake_root, SimulatedDcmi([]), fallbackChipType="Ascend910")
    assert str(caught.value) == (
        "no Ascend NPU here: no usable DCMI library (simulated DCMI (custom) reaches no chip: "
        "it lists no card with a chip), and no /dev/davinciN to fall back to "
        "(fallbackChipType, useDcmi: false)"
    )


def test_dcmi_listing_no_card_falls_back_to_dev(fake_root: FakeRoot) -> None:
    """DCMI loads but lists no card while /dev/davinciN exist: they are served as
    fallbackChipType, the note says why, and the library is closed."""
    for index in range(2):
        fake_root.char_device(f"/dev/davinci{index}")
    sim = SimulatedDcmi([])
    node = open_simulated(fake_root, sim, fallbackChipType="Ascend310P")
    assert [d.id for d in node.enumerate("huawei.com/Ascend310P")] == [
        "Ascend310P-0",
        "Ascend310P-1",
    ]
    assert node.notes[0].startswith(
        "no usable DCMI library (simulated DCMI (custom) reaches no chip: it lists no card "
        "with a chip): serving /dev/davinciN as Ascend310P (fallbackChipType)"
    )
    assert sim.closed and node.dcmi is None


def test_dcmi_reaching_no_chip_without_a_chip_type_names_both_keys(
    fake_root: FakeRoot,
) -> None:
    """Every chip fails DCMI and fallbackChipType is unset: unavailable, with DCMI's errors
    and a reason naming fallbackChipType and useDcmi."""
    sim = SimulatedDcmi([[chip(0, present=False)], [chip(1, present=False)]])
    with pytest.raises(DriverUnavailable) as caught:
        open_simulated(fake_root, sim)
    assert str(caught.value) == (
        "found 2 /dev/davinciN nodes but no usable DCMI library (simulated DCMI (custom) "
        "reaches no chip: card 0 chip 0 skipped: dcmi_get_device_logic_id returned -8008; "
        "card 1 chip 0 skipped: dcmi_get_device_logic_id returned -8008); without DCMI the "
        "chip type is unknown: set fallbackChipType (e.g. Ascend910) to serve them; with "
        "useDcmi: false as well, DCMI is not even loaded (for a pod that cannot reach the "
        "chips through it, such as an unprivileged one)"
    )


@pytest.mark.parametrize(
    ("template", "aicore", "kind"),
    [
        ("vir04", 4.0, "4c"),
        ("vir02", 2.0, "2c"),
        ("vir16", 16.0, "16c"),
        ("vir04_3c", 4.0, "4c.3cpu"),
        ("vir04_3c_ndvpp", 4.0, "4c.3cpu.ndvpp"),
        ("", 8.0, "8c"),
        ("custom", 2.0, "2c"),
    ],
)
def test_vnpu_kind_from_template_or_core_count(template: str, aicore: float, kind: str) -> None:
    """A vNPU's resource suffix comes from its template name, else from its AI cores."""
    assert vnpu_kind(template, aicore) == kind


def test_split_chip_is_served_only_through_its_vnpus(fake_root: FakeRoot) -> None:
    """Chips 6 and 7 split into vNPUs leave Ascend910 and appear as -8c and -4c resources."""
    node = open_simulated(fake_root, SimulatedDcmi.preset("ascend910x8-vnpu"))
    assert node.resources == (
        "huawei.com/Ascend910",
        "huawei.com/Ascend910-4c",
        "huawei.com/Ascend910-8c",
    )
    assert [d.id for d in node.enumerate("huawei.com/Ascend910")] == [
        f"Ascend910-{i}" for i in range(6)
    ]
    assert [d.id for d in node.enumerate("huawei.com/Ascend910-8c")] == [
        "Ascend910-8c-196-6",
        "Ascend910-8c-197-6",
    ]
    assert [d.id for d in node.enumerate("huawei.com/Ascend910-4c")] == [
        f"Ascend910-4c-{v}-7" for v in (212, 213, 214, 215)
    ]
    assert (
        "Ascend910-7 is split into vNPUs (4c, 4c, 4c, 4c); it is served only through them"
        in node.notes
    )


def test_ascend310p_vnpus_take_their_names_from_templates(fake_root: FakeRoot) -> None:
    """310P vNPUs of two templates become two resources named after the templates."""
    vnpus = [
        VirtualDevice(vdev_id=100, template="vir02", aicore=2.0),
        VirtualDevice(vdev_id=101, template="vir04_3c", aicore=4.0),
    ]
    sim = SimulatedDcmi([[chip(0, name="310P3", vnpus=vnpus), chip(1, name="310P3")]])
    node = open_simulated(fake_root, sim)
    assert node.resources == (
        "huawei.com/Ascend310P",
        "huawei.com/Ascend310P-2c",
        "huawei.com/Ascend310P-4c.3cpu",
    )
    assert [d.id for d in node.enumerate("huawei.com/Ascend310P-4c.3cpu")] == [
        "Ascend310P-4c.3cpu-101-0"
    ]


def test_chip_without_virtualisation_is_served_whole(fake_root: FakeRoot) -> None:
    """A chip that answers 'not supported' to vNPU queries is simply a whole chip."""
    node = open_simulated(fake_root, SimulatedDcmi([[chip(0, virtualisation=False)]]))
    assert [d.id for d in node.enumerate("huawei.com/Ascend910")] == ["Ascend910-0"]


def test_chip_without_pci_device_in_sysfs_has_no_numa_node(fake_root: FakeRoot) -> None:
    """NUMA comes from the chip's PCI device in sysfs; without it, none is claimed."""
    sim = SimulatedDcmi.preset("ascend910x8")
    sim.build_tree(fake_root.path)
    fake_root.remove("/sys/bus/pci/devices/0000:83:00.0")  # chip 6
    node = open_node(parse_config({}), fake_root.path, sim)
    assert dict(ids_and_numa(node, "huawei.com/Ascend910"))["Ascend910-6"] == ()


def test_dcmi_that_cannot_list_cards_falls_back_to_dev(fake_root: FakeRoot) -> None:
    """DCMI loads but cannot list cards (NPU driver down): the /dev fallback is taken, and
    the note carries DCMI's error."""
    sim = SimulatedDcmi.preset("ascend910x8")
    sim.card_list_error = -8005
    node = open_simulated(fake_root, sim, fallbackChipType="Ascend910")
    assert len(node.enumerate("huawei.com/Ascend910")) == 8
    assert node.notes[0].startswith(
        "no usable DCMI library (simulated DCMI (ascend910x8): "
        "dcmi_get_card_list returned -8005): serving /dev/davinciN"
    )
    assert sim.closed
