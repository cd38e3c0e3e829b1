"""Notice port state changes quickly: poll the few sysfs files that decide health.

The kernel sends no event a driver can wait on through sysfs for port state, and these
files cost microseconds to read, so the watch hook polls them every
``pollIntervalSeconds`` (default 1 s) and calls ``notify()`` when anything moved: a port's
state or physical state, an HCA added or removed. The host then re-enumerates at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from devicehost.sysfs import read_attr
from devicehost_rdma.discovery import INFINIBAND_CLASS, ibdev_names

Signature = tuple[tuple[str, ...], ...]


def port_signature(root: Path) -> Signature:
    """Every HCA and the state of each of its ports, as one comparable value."""
    rows: list[tuple[str, ...]] = []
    for name in ibdev_names(root):
        ports = root / INFINIBAND_CLASS / name / "ports"
        try:
            numbers = sorted(p.name for p in ports.iterdir())
        except OSError:
            numbers = []
        rows.append((name,))
        for number in numbers:
            rows.append((name, number, read_attr(ports / number / "state") or "",
                         read_attr(ports / number / "phys_state") or ""))
    return tuple(rows)


def watch_ports(root: Path, interval: float, notify: Callable[[], None],
                stop: threading.Event) -> None:
    """Block until ``stop`` is set, calling ``notify()`` after each change seen.

    It also notifies once right after taking its first reading, so a change between the
    host's last enumeration and that reading is not missed until the next scan.
    """
    seen = port_signature(root)
    notify()
    while not stop.wait(interval):
        now = port_signature(root)
        if now != seen:
            seen = now
            notify()
