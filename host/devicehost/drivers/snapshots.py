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


class Comparison:
    """A new snapshot against the current one, one device at a time (``see``): the scanner
    compares a list of thousands in slices with yields between, instead of in one stall."""

    def __init__(self, old: Mapping[str, Device]) -> None:
        self.old = old
        self.added: list[str] = []
        self.unhealthy: list[str] = []
        self.healthy: list[str] = []
        #: some device's NUMA nodes changed: the kubelet must get the list again
        self.topology_changed = False
        #: some device differs in anything (edits, attributes too): observers must see it
        self.differs = False

    @classmethod
    def whole(cls, old: Mapping[str, Device], new: Mapping[str, Device]) -> Comparison:
        """Every device of ``new`` seen against ``old``, in one go."""
        comparison = cls(old)
        for device in new.values():
            comparison.see(device)
        return comparison

    def see(self, device: Device) -> None:
        before = self.old.get(device.id)
        if before is None:
            self.added.append(device.id)
            self.differs = True
        elif before is not device and before != device:
            self.differs = True
            if before.health != device.health:
                (self.healthy if device.healthy else self.unhealthy).append(device.id)
            if before.numa_nodes != device.numa_nodes:
                self.topology_changed = True

    def diff(self, new: Mapping[str, Device]) -> Diff:
        """What changed, once every device of ``new`` was seen."""
        grown = len(self.old) + len(self.added) != len(new)
        removed = [i for i in self.old if i not in new] if grown else []
        return Diff(tuple(self.added), tuple(removed), tuple(self.unhealthy), tuple(self.healthy))


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
        return self.replace(new, Comparison.whole(self.devices, new))

    def replace(self, new: dict[str, Device], comparison: Comparison) -> Diff:
        """``update`` with the comparison already made (``Comparison.see`` for every device
        of ``new``, against this state's current devices)."""
        if comparison.old is not self.devices:  # replaced while it was being compared
            comparison = Comparison.whole(self.devices, new)
        change = comparison.diff(new)
        first = not self.enumerated
        self.enumerated = True
        listed = change or first or comparison.topology_changed
        if listed or comparison.differs:
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
