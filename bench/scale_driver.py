"""A benchmark driver with thousands of devices in one resource.

Config (``drivers.scale``): ``devices`` (default 4096). Its watch hook stats
``<root>/trigger`` every millisecond and flips the health of ``dev-0`` when the file
changes, so a benchmark in another process can cause a health change and time its arrival.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from devicehost import Allocation, Device, DeviceNode, Health, ResourceSpec, UnknownDevice, hookimpl

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
        return [ResourceSpec(name=RESOURCE)]

    @hookimpl
    def devicehost_enumerate(self, resource: str) -> Sequence[Device]:
        return [
            Device(
                id=f"dev-{i}",
                numa_nodes=(i % 2,),
                health=Health.UNHEALTHY if f"dev-{i}" in self.unhealthy else Health.HEALTHY,
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

    @hookimpl
    def devicehost_allocate(self, resource: str, device_ids: Sequence[str]) -> Allocation:
        for device_id in device_ids:
            if not device_id.startswith("dev-"):
                raise UnknownDevice(resource, device_id)
        return Allocation(
            envs={"SCALE_DEVICES": ",".join(device_ids)},
            devices=tuple(DeviceNode(host_path=f"/dev/scale/{d}") for d in device_ids),
        )
