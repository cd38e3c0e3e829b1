"""A driver that describes what its devices need in a container, and implements no
``allocate``: the host composes every answer (and, with CDI on, writes the spec).

Config (``drivers.<name>``):
  ids: [device ID, ...]      default dev-0 … dev-3
  devicesFile: PATH          when set, the devices are read from this JSON file instead,
                             re-read on every enumeration and watched for changes:
                             [{"id": ID, "index": N, "healthy": true, "node": PATH}, ...]
                             ("healthy" and "node", device N's node, are optional). The
                             driver may run in a process of its own, so tests change its
                             "hardware" through this file.
Resource ``test.example/declared``:
  resource edits     /dev/declared-ctl, env DECLARED_COMMON=1, /opt/declared/lib mounted
  each device        DECLARED_VISIBLE_DEVICES=<ID> (a joined env), /dev/declared<n>, an
                     annotation of its own; device 0 also names a vendor's CDI device
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from devicehost import (
    Allocation,
    ContainerEdits,
    Device,
    DeviceNode,
    Health,
    Mount,
    ResourceSpec,
    hookimpl,
)

RESOURCE = "test.example/declared"
JOINED = "DECLARED_VISIBLE_DEVICES"
WATCH_PERIOD_SECONDS = 0.05
SHARED = ContainerEdits(
    envs={"DECLARED_COMMON": "1"},
    devices=(DeviceNode(host_path="/dev/declared-ctl"),),
    mounts=(Mount(host_path="/opt/declared/lib", container_path="/usr/lib/declared"),),
)


def declared(index: int, device_id: str, health: Health = Health.HEALTHY, node: str = "") -> Device:
    """Device ``index`` with the edits this driver declares for it."""
    return Device(
        id=device_id,
        health=health,
        numa_nodes=(index % 2,),
        edits=ContainerEdits(
            envs={JOINED: device_id},
            devices=(DeviceNode(host_path=node or f"/dev/declared{index}"),),
            annotations={f"declared.example/device-{index}": "in-use"},
            cdi_devices=("vendor.example/thing=0",) if index == 0 else (),
        ),
    )


def write_devices(path: Path, entries: Sequence[Mapping[str, Any]]) -> None:
    """Replace the devices file at once (a reader never sees half of it)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(list(entries)))
    tmp.replace(path)


class Declaring:
    def __init__(self) -> None:
        self.ids: list[str] = []
        self.file: Path | None = None

    def _read(self) -> str:
        return self.file.read_text() if self.file else ""

    @hookimpl
    def devicehost_configure(self, config: Mapping[str, Any]) -> None:
        self.ids = list(config.get("ids", [f"dev-{i}" for i in range(4)]))
        self.file = Path(config["devicesFile"]) if config.get("devicesFile") else None

    @hookimpl
    def devicehost_resources(self) -> Sequence[ResourceSpec]:
        return [ResourceSpec(name=RESOURCE, edits=SHARED, joined_envs=(JOINED,))]

    @hookimpl
    def devicehost_enumerate(self, resource: str) -> Sequence[Device]:
        if self.file is None:
            return [declared(n, i) for n, i in enumerate(self.ids)]
        return [
            declared(
                e["index"],
                e["id"],
                Health.HEALTHY if e.get("healthy", True) else Health.UNHEALTHY,
                e.get("node", ""),
            )
            for e in json.loads(self._read())
        ]

    @hookimpl
    def devicehost_watch(
        self,
        resource: str,
        notify: Callable[[], None],
        stop: threading.Event,
        enumerated: Callable[[], Sequence[Device]],
    ) -> None:
        seen = self._read()
        # A change before that baseline but after the last enumeration (this thread may
        # start late on a loaded machine): compared with what was enumerated, per the
        # hookspec.
        if list(self.devicehost_enumerate(resource)) != list(enumerated()):
            notify()
        while not stop.wait(WATCH_PERIOD_SECONDS):
            now = self._read()
            if now != seen:
                seen = now
                notify()


class DeclaringWithAllocate(Declaring):
    """Also does work at allocation time, and says so in its answer."""

    @hookimpl
    def devicehost_allocate(self, resource: str, device_ids: Sequence[str]) -> Allocation:
        return Allocation(
            envs={"DECLARED_AT_ALLOCATE": ",".join(device_ids)},
            devices=(DeviceNode(host_path="/dev/declared-session"),),
        )
