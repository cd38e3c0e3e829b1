"""Notice port state changes quickly: poll the few sysfs files that decide health.

The kernel offers no event a driver can wait on for port state, and these files cost
microseconds to read, so the watch hook polls them every ``pollIntervalSeconds``
(default 1 s). It compares what it reads with what the resource's *last enumeration*
saw, not with its own previous reading: a link that went down and came back between two
polls, while the host happened to enumerate in between, would otherwise leave the
kubelet with a stale Unhealthy until the next full scan. The resources' watches poll in
step, so one reading serves them all (an idle node's CPU goes mostly to these polls).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from devicehost.sysfs import read_attr
from devicehost_rdma.discovery import INFINIBAND_CLASS, NETNS_MODE, ibdev_names

Signature = tuple[tuple[str, ...], ...]


def port_signature(root: Path) -> Signature:
    """Every HCA and the state of each of its ports, and the namespace mode (it decides
    shared slots' health), as one comparable value. An HCA moving into a pod's namespace
    leaves the list of names, so it shows here too."""
    join = os.path.join  # string paths: every second, pathlib's joins cost as much as the reads
    rows: list[tuple[str, ...]] = [("netns_mode", read_attr(join(root, NETNS_MODE)) or "")]
    for name in ibdev_names(root):
        ports = join(root, INFINIBAND_CLASS, name, "ports")
        try:
            numbers = sorted(os.listdir(ports))
        except OSError:
            numbers = []
        rows.append((name,))
        for number in numbers:
            rows.append(
                (
                    name,
                    number,
                    read_attr(join(ports, number, "state")) or "",
                    read_attr(join(ports, number, "phys_state")) or "",
                )
            )
    return tuple(rows)


class PortWatch:
    """Per resource, the port signature its last enumeration was based on."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._lock = threading.Lock()
        self._enumerated: dict[str, Signature] = {}
        self._latest: tuple[float, Signature] | None = None

    def enumerating(self, resource: str) -> None:
        """Record the ports as an enumeration of ``resource`` starts.

        Read *before* the enumeration reads sysfs: a change landing in between then shows
        as a difference, costing one extra enumeration instead of a missed change.
        """
        signature = port_signature(self.root)
        with self._lock:
            self._enumerated[resource] = signature

    def stale(self, resource: str, max_age: float = 0.0) -> bool:
        """True when the ports differ from what ``resource`` was last enumerated from; a
        reading taken less than ``max_age`` seconds ago (by another resource's poll) is
        reused."""
        now = self._current(max_age)
        with self._lock:
            return self._enumerated.get(resource) != now

    def _current(self, max_age: float) -> Signature:
        taken = time.monotonic()
        with self._lock:
            latest = self._latest
        if latest is not None and taken - latest[0] < max_age:
            return latest[1]
        signature = port_signature(self.root)
        with self._lock:
            self._latest = (taken, signature)
        return signature

    def run(
        self, resource: str, interval: float, notify: Callable[[], None], stop: threading.Event
    ) -> None:
        """Block until ``stop`` is set; each poll that finds ``resource`` stale calls
        ``notify()`` (again at the next poll, until the host has re-enumerated)."""
        while True:
            if self.stale(resource, max_age=interval / 2):
                notify()
            if stop.wait(interval):
                return
