"""A benchmark driver with thousands of devices in one resource.

It describes each device's container edits (a device node and its part of
``SCALE_DEVICES``) and implements no ``allocate``, as drivers do since the host composes
Allocate answers. Config (``drivers.scale``): ``devices`` (default 4096). Its watch hook stats
``<root>/trigger`` every millisecond and flips the health of ``dev-0`` when the file
changes, so a benchmark in another process can cause a health change and time its arrival.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from devicehost import ContainerEdits, Device, DeviceNode, Health, ResourceSpec, hookimpl

RESOURCE = "bench.example/scale"


class ScaleDriver:
    def __init__(self) -> None:
        self.count = 4096
        self.root = Path("/")
        self.unhealthy: set[str] = set()

    @hookimpl
    def devicehost_configure(self, config: Mapping[str, Any], root: Path) -> None:
        self.count = int(config.get("devices", 4096))
        self.root = root

    @hookimpl
    def devicehost_resources(self) -> Sequence[ResourceSpec]:
        return [ResourceSpec(name=RESOURCE, joined_envs=("SCALE_DEVICES",))]

    @hookimpl
    def devicehost_enumerate(self, resource: str) -> Sequence[Device]:
        return [
            Device(
                id=f"dev-{i}",
                numa_nodes=(i % 2,),
                health=Health.UNHEALTHY if f"dev-{i}" in self.unhealthy else Health.HEALTHY,
                edits=ContainerEdits(
                    envs={"SCALE_DEVICES": f"dev-{i}"},
                    devices=(DeviceNode(host_path=f"/dev/scale/dev-{i}"),),
                ),
            )
            for i in range(self.count)
        ]

    @hookimpl
    def devicehost_watch(
        self, resource: str, notify: Callable[[], None], stop: threading.Event
    ) -> None:
        trigger = self.root / "trigger"
        last = None
        while not stop.wait(0.001):
            try:
                now = os.stat(trigger).st_mtime_ns
            except FileNotFoundError:
                continue
            if now != last:
                if last is not None:
                    self.unhealthy ^= {"dev-0"}
                    notify()
                last = now
