"""The watch hook: port state changes reach notify() within a poll, and it stops."""

from __future__ import annotations

import threading

from devicehost_rdma.simulated import set_link, two_port_hca
from devicehost_rdma.watch import port_signature
from rdma_helpers import configured, exclusive_pool

from devicehost.testing import FakeRoot


class _Watch:
    """The driver's watch hook running in a thread, as the host runs it."""

    def __init__(self, fake_root: FakeRoot) -> None:
        self.driver = configured(
            fake_root, {"pools": [exclusive_pool()], "pollIntervalSeconds": 0.05}
        )
        self.stop = threading.Event()
        self.changed = threading.Event()
        self.thread = threading.Thread(
            target=self.driver.devicehost_watch,
            kwargs={"resource": "rdma/hca", "notify": self.changed.set, "stop": self.stop},
        )

    def __enter__(self) -> _Watch:
        """Enumerate (as the host does before starting watches), then start the watch."""
        self.driver.devicehost_enumerate(resource="rdma/hca")
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(5)


def test_port_signature_changes_with_port_state_only(fake_root: FakeRoot) -> None:
    """Re-reading an unchanged tree gives the same signature; a port going down does not."""
    two_port_hca(fake_root)
    before = port_signature(fake_root.path)
    assert port_signature(fake_root.path) == before
    set_link(fake_root.path, "mlx5_1", up=False)
    assert port_signature(fake_root.path) != before


def test_link_down_notifies(fake_root: FakeRoot) -> None:
    """A port going down makes the watch call notify()."""
    two_port_hca(fake_root)
    with _Watch(fake_root) as watch:
        set_link(fake_root.path, "mlx5_0", up=False)
        assert watch.changed.wait(5)


def test_link_up_notifies(fake_root: FakeRoot) -> None:
    """A port coming back up makes the watch call notify() again."""
    two_port_hca(fake_root)
    set_link(fake_root.path, "mlx5_0", up=False)
    with _Watch(fake_root) as watch:
        set_link(fake_root.path, "mlx5_0", up=True)
        assert watch.changed.wait(5)


def test_removed_hca_notifies(fake_root: FakeRoot) -> None:
    """An HCA vanishing from /sys/class/infiniband makes the watch call notify()."""
    two_port_hca(fake_root)
    with _Watch(fake_root) as watch:
        fake_root.remove("/sys/class/infiniband/mlx5_1")
        assert watch.changed.wait(5)


def test_change_seen_by_an_enumeration_and_reverted_is_still_reported(fake_root: FakeRoot) -> None:
    """Down then up between two polls, with the host enumerating the down state in
    between: the watch still notifies, because it compares with that enumeration."""
    two_port_hca(fake_root)
    watch = _Watch(fake_root)
    watch.driver.devicehost_enumerate(resource="rdma/hca")
    set_link(fake_root.path, "mlx5_0", up=False)
    watch.driver.devicehost_enumerate(resource="rdma/hca")  # the host saw it down
    set_link(fake_root.path, "mlx5_0", up=True)
    watch.thread.start()
    try:
        assert watch.changed.wait(5)
    finally:
        watch.stop.set()
        watch.thread.join(5)


def test_watch_returns_when_stopped(fake_root: FakeRoot) -> None:
    """Setting stop ends the watch loop (the host's shutdown relies on it)."""
    two_port_hca(fake_root)
    watch = _Watch(fake_root)
    with watch:
        pass
    assert not watch.thread.is_alive()
