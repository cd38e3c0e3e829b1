"""Per resource: the current device snapshot, what changed, and the wake-up for streams.

Used from the event loop only. Every ``update`` that changes anything bumps ``version``
and wakes every open ListAndWatch stream; streams then send the whole new list, as the
kubelet expects.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from devicehost.model import Device, Health

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Diff:
    """What one update changed, for the log line that says so."""

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    unhealthy: tuple[str, ...] = ()
    healthy: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.unhealthy or self.healthy)

    def __str__(self) -> str:
        parts = [
            f"{label} {', '.join(ids)}"
            for label, ids in (
                ("added", self.added),
                ("removed", self.removed),
                ("now Unhealthy", self.unhealthy),
                ("now Healthy", self.healthy),
            )
            if ids
        ]
        return "; ".join(parts)


def diff(old: Mapping[str, Device], new: Mapping[str, Device]) -> Diff:
    """The change from ``old`` to ``new`` (both keyed by device ID), in one pass."""
    added: list[str] = []
    unhealthy: list[str] = []
    healthy: list[str] = []
    for device_id, device in new.items():
        before = old.get(device_id)
        if before is None:
            added.append(device_id)
        elif before.health != device.health:
            (healthy if device.healthy else unhealthy).append(device_id)
    removed = [i for i in old if i not in new] if len(old) + len(added) != len(new) else []
    return Diff(tuple(added), tuple(removed), tuple(unhealthy), tuple(healthy))


def same_topology(old: Mapping[str, Device], new: Mapping[str, Device]) -> bool:
    """True when no device's NUMA nodes changed (health and membership are in ``diff``)."""
    return all(old[i].numa_nodes == d.numa_nodes for i, d in new.items() if i in old)


class ResourceState:
    """The devices of one resource as last enumerated, and a version streams wait on."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.devices: dict[str, Device] = {}
        self.version = 0
        self.enumerated = False
        self.closed = False
        self._changed = asyncio.Event()
        self._observers: list[Callable[[Mapping[str, Device]], None]] = []

    def subscribe(self, observer: Callable[[Mapping[str, Device]], None]) -> None:
        """Call ``observer(devices)`` whenever the snapshot is replaced, before any stream
        or request can see the new one (e.g. to write the CDI spec an Allocate will name)."""
        self._observers.append(observer)

    def update(self, devices: Iterable[Device]) -> Diff:
        """Replace the snapshot; wake streams when anything differs (or on the first call)."""
        new = {d.id: d for d in devices}
        change = diff(self.devices, new)
        first = not self.enumerated
        self.enumerated = True
        listed = change or first or not same_topology(self.devices, new)
        if listed or new != self.devices:
            # Also when only container edits or attributes changed (a device's nodes
            # renumbered, a pool member unplugged): Allocate must compose from them and
            # ResourceSlices describe them, though ListAndWatch has nothing to send.
            self.devices = new
            for observer in self._observers:
                try:
                    observer(new)
                except Exception:  # one observer's bug must not stop the snapshots
                    log.exception("resource %r: a snapshot observer failed", self.name)
        if listed:
            self._bump()
        return change

    def mark_unhealthy(self) -> Diff:
        """Keep every known device but report it Unhealthy (its driver is failing)."""
        return self.update(replace(d, health=Health.UNHEALTHY) for d in self.devices.values())

    def close(self) -> None:
        """End every stream waiting on this resource (shutdown)."""
        self.closed = True
        self._bump()

    def _bump(self) -> None:
        self.version += 1
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_newer(self, version: int) -> None:
        """Return once ``self.version`` is newer than ``version`` or the state is closed."""
        while self.version == version and not self.closed:
            await self._changed.wait()
