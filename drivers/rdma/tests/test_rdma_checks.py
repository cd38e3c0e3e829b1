"""Start-up checks: notes for the namespace mode and for missing character devices."""

from __future__ import annotations

import pytest
from devicehost_rdma.simulated import SimulatedNode, two_port_hca
from rdma_helpers import configured, exclusive_pool, shared_pool

from devicehost import DriverUnavailable
from devicehost.testing import FakeRoot

NETNS = "/sys/module/ib_core/parameters/netns_mode"


def test_exclusive_netns_mode_makes_shared_pools_unusable(fake_root: FakeRoot) -> None:
    """netns_mode N with a shared pool: a note names the pool and the fix."""
    two_port_hca(fake_root)
    fake_root.write(NETNS, "N")
    driver = configured(fake_root, {"pools": [shared_pool("rdma/hca_shared")]})
    assert driver.devicehost_notes() == [
        "RDMA namespace mode is exclusive (/sys/module/ib_core/parameters/netns_mode is N): "
        "shared pools rdma/hca_shared are unusable, because each RDMA device is visible in "
        "one network namespace only and pods run in their own, so their slots are advertised "
        "Unhealthy; run `rdma system set netns shared` or load ib_core with netns_mode=1"
    ]


def test_exclusive_netns_mode_is_fine_without_shared_pools(fake_root: FakeRoot) -> None:
    """Exclusive pools work in exclusive mode (an HCA per pod): no note."""
    two_port_hca(fake_root)
    fake_root.write(NETNS, "0")
    driver = configured(fake_root, {"pools": [exclusive_pool()]})
    assert driver.devicehost_notes() == []


def test_shared_netns_mode_gives_no_note(fake_root: FakeRoot) -> None:
    """netns_mode Y (the default) with a shared pool: nothing to report."""
    two_port_hca(fake_root)
    driver = configured(fake_root, {"pools": [shared_pool()]})
    assert driver.devicehost_notes() == []


def test_missing_dev_nodes_are_named(fake_root: FakeRoot) -> None:
    """Char devices sysfs promises but /dev lacks are listed in one note."""
    two_port_hca(fake_root)
    fake_root.remove("/dev/infiniband/uverbs1")
    fake_root.remove("/dev/infiniband/rdma_cm")
    driver = configured(fake_root, {"pools": [exclusive_pool()]})
    [note] = driver.devicehost_notes()
    assert note.startswith(
        "character devices missing under /dev/infiniband: uverbs1, rdma_cm; containers get "
        "their HCAs without them"
    )


def test_hca_without_uverbs_is_named(fake_root: FakeRoot) -> None:
    """An HCA with no uverbs device (ib_uverbs not loaded) gets a note naming it."""
    node = SimulatedNode(fake_root)
    node.hca("0000:05:00.0")
    node.hca("0000:06:00.0", char_devices=False)
    driver = configured(fake_root, {"pools": [exclusive_pool()]})
    assert driver.devicehost_notes() == [
        "no uverbs device for mlx5_1 in /sys/class/infiniband_verbs: containers given them "
        "cannot use verbs; load ib_uverbs"
    ]


def test_absent_rdma_cm_is_noted(fake_root: FakeRoot) -> None:
    """No rdma_cm at all (rdma_ucm not loaded): a note says connections will fail."""
    SimulatedNode(fake_root, rdma_cm=False).hca("0000:05:00.0")
    driver = configured(fake_root, {"pools": [exclusive_pool()]})
    assert driver.devicehost_notes() == [
        "/dev/infiniband/rdma_cm is absent (rdma_ucm not loaded): containers get no RDMA "
        "connection manager, so librdmacm connections fail; load rdma_ucm"
    ]


def test_node_without_hcas_makes_the_driver_unavailable(fake_root: FakeRoot) -> None:
    """No /sys/class/infiniband entries: DriverUnavailable, saying why."""
    with pytest.raises(DriverUnavailable, match="no RDMA devices under /sys/class/infiniband"):
        configured(fake_root)
