"""A driver that describes what its devices need in a container, and implements no
``allocate``: the host composes every answer (and, with CDI on, writes the spec).

Config (``drivers.<name>``):
  ids: [device ID, ...]      default dev-0 … dev-3
Resource ``test.example/declared``:
  resource edits     /dev/declared-ctl, env DECLARED_COMMON=1, /opt/declared/lib mounted
  each device        DECLARED_VISIBLE_DEVICES=<ID> (a joined env), /dev/declared<n>, an
                     annotation of its own; device 0 also names a vendor's CDI device
Tests change devices through the instance (``resource.driver.plugin.set_devices``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
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
SHARED = ContainerEdits(
    envs={"DECLARED_COMMON": "1"},
    devices=(DeviceNode(host_path="/dev/declared-ctl"),),
    mounts=(Mount(host_path="/opt/declared/lib", container_path="/usr/lib/declared"),),
)


def declared(index: int, device_id: str, health: Health = Health.HEALTHY) -> Device:
    """Device ``index`` with the edits this driver declares for it."""
    return Device(
        id=device_id,
        health=health,
        numa_nodes=(index % 2,),
        edits=ContainerEdits(
            envs={JOINED: device_id},
            devices=(DeviceNode(host_path=f"/dev/declared{index}"),),
            annotations={f"declared.example/device-{index}": "in-use"},
            cdi_devices=("vendor.example/thing=0",) if index == 0 else (),
        ),
    )


class Declaring:
    def __init__(self) -> None:
        self.devices: dict[str, Device] = {}
        self._notify: Callable[[], None] | None = None

    def set_devices(self, devices: Sequence[Device]) -> None:
        self.devices = {d.id: d for d in devices}
        if self._notify:
            self._notify()

    @hookimpl
    def devicehost_configure(self, config: Mapping[str, Any]) -> None:
        ids = list(config.get("ids", [f"dev-{i}" for i in range(4)]))
        self.devices = {i: declared(n, i) for n, i in enumerate(ids)}

    @hookimpl
    def devicehost_resources(self) -> Sequence[ResourceSpec]:
        return [ResourceSpec(name=RESOURCE, edits=SHARED, joined_envs=(JOINED,))]

    @hookimpl
    def devicehost_enumerate(self, resource: str) -> Sequence[Device]:
        return list(self.devices.values())

    @hookimpl
    def devicehost_watch(
        self, resource: str, notify: Callable[[], None], stop: threading.Event
    ) -> None:
        self._notify = notify
        stop.wait()


class DeclaringWithAllocate(Declaring):
    """Also does work at allocation time, and says so in its answer."""

    @hookimpl
    def devicehost_allocate(self, resource: str, device_ids: Sequence[str]) -> Allocation:
        return Allocation(
            envs={"DECLARED_AT_ALLOCATE": ",".join(device_ids)},
            devices=(DeviceNode(host_path="/dev/declared-session"),),
        )
