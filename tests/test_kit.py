"""The testing kit itself: what driver authors rely on must behave as documented."""

from __future__ import annotations

import pytest

from devicehost.testing import FakeRoot
from support import SCRIPTED


def test_wait_devices_accepts_an_empty_list(install, run_host, kubelet):
    """A resource registered with no devices can be waited for (an empty list is a list)."""
    install("devicehost-alpha", drivers={"alpha": SCRIPTED})
    run_host(enabled_drivers=("alpha",), drivers={"alpha": {"resources": {"a.example/x": 0}}})
    kubelet.wait_registered("a.example/x")
    assert kubelet.wait_devices("a.example/x", lambda devices: devices == {}) == {}


def test_fake_pci_device_refuses_a_different_device_at_a_taken_address(tmp_path):
    """Two simulated devices at one PCI address would corrupt each other: refused."""
    root = FakeRoot(tmp_path)
    root.pci_device("0000:17:00.0", vendor="0x10de", device="0x20b5", numa_node=0)
    root.pci_device("0000:17:00.0", vendor="0x10de", device="0x20b5", numa_node=0)
    with pytest.raises(ValueError, match="already a 0x10de:0x20b5 device"):
        root.pci_device("0000:17:00.0", vendor="0x15b3", device="0x1017")


def test_fake_pci_device_layout(tmp_path):
    """A PCI function has its attributes, driver link and bus link, all relative links."""
    root = FakeRoot(tmp_path)
    rel = root.pci_device(
        "0000:3b:00.0", vendor="0x15b3", device="0x1017", numa_node=1, driver="mlx5_core"
    )
    device = root.at("/sys/bus/pci/devices/0000:3b:00.0")
    assert device.resolve() == root.at(rel).resolve()
    assert (device / "numa_node").read_text() == "1\n"
    assert (device / "driver").resolve().name == "mlx5_core"
    assert not (device / "driver").readlink().is_absolute()
