"""Without a usable DCMI: /dev/davinciN under root, typed by config, and said so in notes.

These go through the driver's real library loading (``load_dcmi``), which finds no usable
``libdcmi.so`` in the fake tree, or, with ``useDcmi: false``, skip it.
"""

from __future__ import annotations

import _ctypes
import shutil
from typing import Any

import pytest
from devicehost_ascend.driver import AscendDriver

from devicehost import DriverUnavailable, Health
from devicehost.testing import FakeRoot


def configured(fake_root: FakeRoot, **config: Any) -> AscendDriver:
    driver = AscendDriver()
    driver.devicehost_configure(config=config, root=fake_root.path, simulated=False)
    return driver


def dev_tree(fake_root: FakeRoot, chips: range = range(4), vnpus: tuple[int, ...] = ()) -> None:
    for index in chips:
        fake_root.char_device(f"/dev/davinci{index}")
    for vdev in vnpus:
        fake_root.char_device(f"/dev/vdavinci{vdev}")
    fake_root.char_device("/dev/davinci_manager")


def test_chips_are_served_from_dev_with_the_configured_type(fake_root: FakeRoot) -> None:
    """No DCMI: each /dev/davinciN is a Healthy chip of fallbackChipType, ID by its N."""
    dev_tree(fake_root)
    driver = configured(fake_root, fallbackChipType="Ascend310P")
    assert [r.name for r in driver.devicehost_resources()] == ["huawei.com/Ascend310P"]
    devices = driver.devicehost_enumerate(resource="huawei.com/Ascend310P")
    assert [(d.id, d.health, d.numa_nodes) for d in devices] == [
        (f"Ascend310P-{i}", Health.HEALTHY, ()) for i in range(4)
    ]


def test_the_fallback_is_explained_in_the_notes(fake_root: FakeRoot) -> None:
    """The operator reads that DCMI was not found, where it was looked for, and the cost."""
    dev_tree(fake_root)
    notes = configured(fake_root, fallbackChipType="Ascend910").devicehost_notes()
    assert notes[0] == (
        "no usable DCMI library (no libdcmi.so at /usr/local/dcmi/libdcmi.so, "
        "/usr/local/Ascend/driver/lib64/driver/libdcmi.so, /usr/local/Ascend/driver/lib64/"
        "libdcmi.so, /usr/local/Ascend/driver/lib64/common/libdcmi.so under "
        f"{fake_root.path}): serving /dev/davinciN as Ascend910 (fallbackChipType); health is "
        "only the nodes' presence; no NUMA information (set fallbackNumaNodes)"
    )


def test_numa_nodes_come_from_config_in_fallback_mode(fake_root: FakeRoot) -> None:
    """fallbackNumaNodes gives each physical ID its NUMA node; unlisted chips get none."""
    dev_tree(fake_root, range(6))
    driver = configured(
        fake_root, fallbackChipType="Ascend910", fallbackNumaNodes={0: "0-1", 1: [2, 3]}
    )
    devices = driver.devicehost_enumerate(resource="huawei.com/Ascend910")
    assert [d.numa_nodes for d in devices] == [(0,), (0,), (1,), (1,), (), ()]


def test_without_a_chip_type_the_driver_is_unavailable(fake_root: FakeRoot) -> None:
    """/dev/davinciN but neither DCMI nor fallbackChipType: unavailable, saying what to set."""
    dev_tree(fake_root)
    with pytest.raises(
        DriverUnavailable,
        match=r"found 4 /dev/davinciN nodes but no usable DCMI"
        r" .*set fallbackChipType \(e\.g\. Ascend910\) to serve them",
    ):
        configured(fake_root)


def test_node_without_npus_is_unavailable(fake_root: FakeRoot) -> None:
    """No DCMI and no /dev/davinciN: this node simply has no Ascend NPU."""
    with pytest.raises(
        DriverUnavailable,
        match=r"^no Ascend NPU here: no usable DCMI library \(no libdcmi.so at .*\), and "
        r"no /dev/davinciN$",
    ):
        configured(fake_root, fallbackChipType="Ascend910")


def test_a_file_that_is_not_a_library_is_reported(fake_root: FakeRoot) -> None:
    """A broken libdcmi.so is named with the loader's error, and the fallback still runs."""
    dev_tree(fake_root)
    fake_root.write("/usr/local/dcmi/libdcmi.so", "not an ELF file")
    notes = configured(fake_root, fallbackChipType="Ascend910").devicehost_notes()
    assert f"{fake_root.path}/usr/local/dcmi/libdcmi.so cannot be loaded: " in notes[0]


def test_a_library_without_dcmi_symbols_is_reported(fake_root: FakeRoot) -> None:
    """A real shared object lacking DCMI's entry points is refused by symbol name."""
    dev_tree(fake_root)
    fake_root.mkdir("/opt/lib")
    shutil.copy(_ctypes.__file__, fake_root.at("/opt/lib/libdcmi.so"))
    driver = configured(fake_root, fallbackChipType="Ascend910", dcmiLibrary="/opt/lib/libdcmi.so")
    assert (
        f"{fake_root.path}/opt/lib/libdcmi.so cannot be loaded: DCMI symbols missing: "
        "dcmi_init, dcmi_get_device_num_in_card, "
    ) in driver.devicehost_notes()[0]


def test_vnpu_nodes_are_served_with_configured_cores(fake_root: FakeRoot) -> None:
    """/dev/vdavinciN become <type>-<cores>c devices when fallbackVnpuCores sizes them."""
    dev_tree(fake_root, range(2), vnpus=(100, 101, 102))
    driver = configured(
        fake_root, fallbackChipType="Ascend310P", fallbackVnpuCores={100: 2, 101: 2, 102: 4}
    )
    assert [r.name for r in driver.devicehost_resources()] == [
        "huawei.com/Ascend310P",
        "huawei.com/Ascend310P-2c",
        "huawei.com/Ascend310P-4c",
    ]
    assert [d.id for d in driver.devicehost_enumerate(resource="huawei.com/Ascend310P-2c")] == [
        "Ascend310P-2c-100",
        "Ascend310P-2c-101",
    ]
    (vnpu,) = driver.devicehost_enumerate(resource="huawei.com/Ascend310P-4c")
    assert vnpu.edits.envs == {"ASCEND_VISIBLE_DEVICES": "102", "ASCEND_RUNTIME_OPTIONS": "VIRTUAL"}


def test_unsized_vnpu_nodes_are_left_out_with_a_note(fake_root: FakeRoot) -> None:
    """Without fallbackVnpuCores a vNPU's size is unknown: not served, and the note says so."""
    dev_tree(fake_root, range(1), vnpus=(100,))
    driver = configured(fake_root, fallbackChipType="Ascend910")
    assert [r.name for r in driver.devicehost_resources()] == ["huawei.com/Ascend910"]
    assert (
        "vNPU nodes vdavinci100 are not served: without DCMI their size is unknown; set "
        "fallbackVnpuCores"
    ) in driver.devicehost_notes()


def test_a_removed_node_is_gone_at_the_next_enumeration(fake_root: FakeRoot) -> None:
    """In fallback mode /dev is read again each time: a vanished chip is no longer listed."""
    dev_tree(fake_root)
    driver = configured(fake_root, fallbackChipType="Ascend910")
    fake_root.remove("/dev/davinci2")
    assert [d.id for d in driver.devicehost_enumerate(resource="huawei.com/Ascend910")] == [
        "Ascend910-0",
        "Ascend910-1",
        "Ascend910-3",
    ]


def test_use_dcmi_false_serves_dev_without_trying_a_library(fake_root: FakeRoot) -> None:
    """useDcmi: false never loads DCMI: a libdcmi.so at the usual path is not even tried,
    and the /dev nodes are served as fallbackChipType, the note saying DCMI is not used."""
    dev_tree(fake_root)
    fake_root.write("/usr/local/dcmi/libdcmi.so", "not an ELF file")
    driver = configured(fake_root, useDcmi=False, fallbackChipType="Ascend910")
    assert [d.id for d in driver.devicehost_enumerate(resource="huawei.com/Ascend910")] == [
        f"Ascend910-{i}" for i in range(4)
    ]
    assert driver.devicehost_notes()[0] == (
        "DCMI not used (useDcmi: false): serving /dev/davinciN as Ascend910 "
        "(fallbackChipType); health is only the nodes' presence; no NUMA information "
        "(set fallbackNumaNodes)"
    )


def test_use_dcmi_false_without_dev_nodes_is_unavailable(fake_root: FakeRoot) -> None:
    """useDcmi: false on a node without /dev/davinciN: no NPU here, and the reason says
    DCMI was not used."""
    with pytest.raises(
        DriverUnavailable,
        match=r"^no Ascend NPU here: DCMI not used \(useDcmi: false\), and no /dev/davinciN$",
    ):
        configured(fake_root, useDcmi=False, fallbackChipType="Ascend910")
