"""A benchmark driver that sends the largest data the host accepts, as often as it can.

One resource, ``bench.example/flood``, of 10 000 devices (the default devices-per-resource
limit), each with edits of its own (so the host cannot share them between devices): one
enumeration answer is ~4.0 MB, just under the channel's 4 MiB message limit (a device's
plain form grew with ``Device.attributes``: the pad was 250 characters, over the limit
since, and the bench waited for a list that never came). While the file
``<root>/flood`` exists, its watch hook notifies every 10 ms, so the host re-enumerates and
re-checks the whole list back to back; ``<root>/flood-scans`` counts the enumerations.
Config (``drivers.flood``): ``devices``, ``pad``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from devicehost import ContainerEdits, Device, ResourceSpec, hookimpl

RESOURCE = "bench.example/flood"


class FloodDriver:
    def __init__(self) -> None:
        self.count = 10_000
        self.pad = 90
        self.root = Path("/")
        self.scans = 0

    @hookimpl
    def devicehost_configure(self, config: Mapping[str, Any], root: Path) -> None:
        self.count = int(config.get("devices", self.count))
        self.pad = int(config.get("pad", self.pad))
        self.root = root

    @hookimpl
    def devicehost_resources(self) -> Sequence[ResourceSpec]:
        return [ResourceSpec(name=RESOURCE)]

    @hookimpl
    def devicehost_enumerate(self, resource: str) -> Sequence[Device]:
        self.scans += 1
        (self.root / "flood-scans").write_text(str(self.scans))  # for the bench to read
        mark = f"{self.scans % 10}"  # every scan differs from the last: a full update
        return [
            Device(
                id=f"f-{i}",
                edits=ContainerEdits(envs={"FLOOD": f"{i}-{mark}".ljust(self.pad, "x")}),
            )
            for i in range(self.count)
        ]

    @hookimpl
    def devicehost_watch(
        self, resource: str, notify: Callable[[], None], stop: threading.Event
    ) -> None:
        flood = self.root / "flood"
        while not stop.wait(0.01):
            if flood.exists():
                notify()
