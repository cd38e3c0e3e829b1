"""A driver whose devices and misbehaviour a test sets through its config section.

Config (``drivers.<name>``):
  resources: {resource name: device count}       devices ``<prefix>-0`` …, NUMA node i % 2
  raise: [hook, ...]                             these hooks raise RuntimeError("scripted failure")
  hang: [hook, ...]                              these hooks block until shutdown
  preStart: true                                 implement devicehost_pre_start
  prefix: "dev"
Tests reach the instance through the host (``resource.driver.plugin``) to change health or
devices, which ``watch`` reports at once with ``notify()``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from devicehost import (
    Allocation,
    Device,
    DeviceNode,
    Health,
    Mount,
    ResourceSpec,
    UnknownDevice,
    hookimpl,
)


class Scripted:
    def __init__(self) -> None:
        self.devices: dict[str, dict[str, Device]] = {}
        self.raising: set[str] = set()
        self.hanging: set[str] = set()
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.released = threading.Event()
        self._notify: dict[str, Callable[[], None]] = {}
        self.root: Path | None = None

    def _enter(self, hook: str, **kwargs: Any) -> None:
        self.calls.append((hook, kwargs))
        if hook in self.hanging:
            self.released.wait()
        if hook in self.raising:
            raise RuntimeError("scripted failure")

    # -- what tests call -----------------------------------------------------------------

    def set_health(self, resource: str, device_id: str, healthy: bool) -> None:
        old = self.devices[resource][device_id]
        health = Health.HEALTHY if healthy else Health.UNHEALTHY
        self.devices[resource][device_id] = Device(
            id=old.id, health=health, numa_nodes=old.numa_nodes
        )
        self.changed(resource)

    def set_devices(self, resource: str, devices: Sequence[Device]) -> None:
        self.devices[resource] = {d.id: d for d in devices}
        self.changed(resource)

    def changed(self, resource: str) -> None:
        if resource in self._notify:
            self._notify[resource]()

    # -- hooks -----------------------------------------------------------------------------

    @hookimpl
    def devicehost_configure(self, config: Mapping[str, Any], root: Path) -> None:
        self.root = root
        prefix = config.get("prefix", "dev")
        for name, count in dict(config.get("resources", {})).items():
            if not isinstance(count, int):
                raise ValueError(f"resources.{name}: expected a device count, got {count!r}")
            self.devices[name] = {
                f"{prefix}-{i}": Device(id=f"{prefix}-{i}", numa_nodes=(i % 2,))
                for i in range(count)
            }
        self.raising = set(config.get("raise", ()))
        self.hanging = set(config.get("hang", ()))
        self._enter("devicehost_configure", config=config)

    @hookimpl
    def devicehost_resources(self) -> Sequence[ResourceSpec]:
        self._enter("devicehost_resources")
        return [ResourceSpec(name=name) for name in self.devices]

    @hookimpl
    def devicehost_notes(self) -> Sequence[str]:
        return [f"scripted with {sum(map(len, self.devices.values()))} devices"]

    @hookimpl
    def devicehost_enumerate(self, resource: str) -> Sequence[Device]:
        self._enter("devicehost_enumerate", resource=resource)
        return list(self.devices[resource].values())

    @hookimpl
    def devicehost_watch(
        self, resource: str, notify: Callable[[], None], stop: threading.Event
    ) -> None:
        self._notify[resource] = notify
        stop.wait()

    @hookimpl
    def devicehost_allocate(self, resource: str, device_ids: Sequence[str]) -> Allocation:
        self._enter("devicehost_allocate", resource=resource, device_ids=list(device_ids))
        for device_id in device_ids:
            if device_id not in self.devices.get(resource, {}):
                raise UnknownDevice(resource, device_id)
        return Allocation(
            envs={"SCRIPTED_DEVICES": ",".join(device_ids)},
            devices=tuple(DeviceNode(host_path=f"/dev/scripted/{d}") for d in device_ids),
            mounts=(Mount(host_path="/opt/scripted/lib", container_path="/usr/lib/scripted"),),
        )

    @hookimpl
    def devicehost_simulate_health(self, resource: str, device_id: str, healthy: bool) -> bool:
        self.set_health(resource, device_id, healthy)
        return True

    @hookimpl
    def devicehost_shutdown(self) -> None:
        self.calls.append(("devicehost_shutdown", {}))
        self.released.set()


class ScriptedWithPreStart(Scripted):
    """The scripted driver plus pre_start and preferred_allocation hooks."""

    @hookimpl
    def devicehost_pre_start(self, resource: str, device_ids: Sequence[str]) -> None:
        self._enter("devicehost_pre_start", resource=resource, device_ids=list(device_ids))

    @hookimpl
    def devicehost_preferred_allocation(
        self, resource: str, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> Sequence[str] | None:
        self._enter("devicehost_preferred_allocation", resource=resource, size=size)
        rest = [d for d in reversed(available) if d not in must_include]
        return list(must_include) + rest[: size - len(must_include)]


class Simulating(Scripted):
    """Builds its 'hardware' under the root, as a vendor driver does under --simulate."""

    @hookimpl
    def devicehost_simulate(self, root: Path) -> None:
        (root / "dev").mkdir(parents=True, exist_ok=True)
        (root / "dev" / "simulated0").touch()
        self.calls.append(("devicehost_simulate", {"root": root}))

    @hookimpl
    def devicehost_configure(
        self,
        config: Mapping[str, Any],
        root: Path,  # type: ignore[override]
        simulated: bool,
    ) -> None:
        count = 2 if simulated and (root / "dev" / "simulated0").exists() else 0
        super().devicehost_configure(config={"resources": {"test.example/sim": count}}, root=root)


class Misbehaving(Scripted):
    """Answers allocate with a dict and preferred_allocation with too many devices."""

    @hookimpl
    def devicehost_allocate(self, resource: str, device_ids: Sequence[str]) -> Any:
        return {"envs": {"X": "1"}}

    @hookimpl
    def devicehost_preferred_allocation(self, available: Sequence[str], size: int) -> Any:
        return list(available)[: size + 1]


class BrokenSimulation(Scripted):
    """Its simulated hardware cannot be built."""

    @hookimpl
    def devicehost_simulate(self, root: Path) -> None:
        raise OSError("cannot build the simulated node")
