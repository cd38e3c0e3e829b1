"""The sysfs readers drivers share (``devicehost.sysfs``): a vanished or odd file is None,
never an exception — hardware disappears while it is read."""

from __future__ import annotations

from devicehost.sysfs import normalise_pci_address, pci_numa_node, pci_path, read_attr, read_int


def test_an_attribute_is_its_stripped_text(tmp_path):
    (tmp_path / "state").write_text("4: ACTIVE\n")
    assert read_attr(tmp_path / "state") == "4: ACTIVE"
    assert read_attr(str(tmp_path / "state")) == "4: ACTIVE"  # a string path too


def test_an_attribute_longer_than_one_read_is_read_whole(tmp_path):
    (tmp_path / "long").write_text("x" * 10_000 + "\n")
    assert read_attr(tmp_path / "long") == "x" * 10_000


def test_what_cannot_be_read_as_text_is_none(tmp_path):
    (tmp_path / "binary").write_bytes(b"\xff\xfe\x00")
    assert read_attr(tmp_path / "missing") is None
    assert read_attr(tmp_path) is None  # a directory
    assert read_attr(tmp_path / "binary") is None


def test_integers_in_either_base_and_garbage_as_none(tmp_path):
    (tmp_path / "numa_node").write_text("1\n")
    (tmp_path / "vendor").write_text("0x15b3\n")
    (tmp_path / "junk").write_text("n/a\n")
    assert read_int(tmp_path / "numa_node") == 1
    assert read_int(tmp_path / "vendor", 16) == 0x15B3
    assert read_int(tmp_path / "junk") is None
    assert read_int(tmp_path / "missing") is None


def test_pci_functions_are_found_in_either_address_spelling(tmp_path):
    function = tmp_path / "sys/devices/pci0000:00/0000:00:01.0/0000:3b:00.0"
    function.mkdir(parents=True)
    (function / "numa_node").write_text("-1\n")
    links = tmp_path / "sys/bus/pci/devices"
    links.mkdir(parents=True)
    (links / "0000:3b:00.0").symlink_to("../../../devices/pci0000:00/0000:00:01.0/0000:3b:00.0")
    assert normalise_pci_address("00000000:3B:00.0") == "0000:3b:00.0"
    assert pci_path(tmp_path, "00000000:3B:00.0") == function.resolve()
    assert pci_numa_node(tmp_path, "0000:3b:00.0") is None  # -1: unknown
    assert pci_path(tmp_path, "0000:3c:00.0") is None
