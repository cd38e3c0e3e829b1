"""A driver whose devices and misbehaviour a test sets through its config and a control tree.

Config (``drivers.<name>``):
  resources: {resource name: device count}       devices ``<prefix>-0`` …, NUMA node i % 2
  raise: [hook, ...]                             these hooks raise RuntimeError("scripted failure")
  hang: [hook, ...]                              these hooks block until shutdown or release
  preStart: true                                 implement devicehost_pre_start
  zombies: n                                     fork n children at configure, never reaped
  prefix: "dev"

The driver runs in its own worker process, so tests reach it the way hardware would be
reached: through files under ``<root>/scripted/<driver name>/`` (``tests/support.py``'s
``ScriptedControl`` writes them). ``devices.json`` is the "hardware" (read by every
enumerate; the watch notices each change at once), ``control.json`` adds hooks that raise or
hang while the host runs, and ``calls.jsonl`` records every hook call.
"""

from __future__ import annotations

import json
import os
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

WATCH_POLL_SECONDS = 0.005


def control_dir(root: Path, driver: str) -> Path:
    return Path(root) / "scripted" / driver


def write_json(path: Path, value: Any) -> None:
    """Replace ``path`` atomically: a reader never sees half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    tmp.write_text(json.dumps(value))
    os.replace(tmp, path)


def _identity(path: Path) -> tuple[int, int, int]:
    """What tells one write of ``path`` from the next: the inode too, since each write is a
    new file renamed over it, and two writes within one tick of the kernel's coarse clock
    have the same mtime (a health flip and its flip back were missed so, under load)."""
    stat = path.stat()
    return (stat.st_ino, stat.st_mtime_ns, stat.st_size)


def device_from(data: Mapping[str, Any]) -> Device:
    return Device(
        id=data["id"],
        health=Health(data.get("health", "Healthy")),
        numa_nodes=tuple(data.get("numa_nodes", ())),
    )


class Scripted:
    def __init__(self) -> None:
        self.raising: set[str] = set()
        self.hanging: set[str] = set()
        self.released = threading.Event()
        self.dir = Path("/nonexistent")
        self.name = os.environ.get("DEVICEHOST_DRIVER_NAME", "scripted")

    # -- the control tree ----------------------------------------------------------------

    def _devices(self) -> dict[str, list[Any]]:
        try:
            return dict(json.loads((self.dir / "devices.json").read_text()))
        except FileNotFoundError:
            return {}

    def _control(self) -> dict[str, Any]:
        try:
            return dict(json.loads((self.dir / "control.json").read_text()))
        except (FileNotFoundError, json.JSONDecodeError):
            return {}

    def _enter(self, hook: str, **kwargs: Any) -> None:
        with open(self.dir / "calls.jsonl", "a") as log:
            log.write(json.dumps([hook, kwargs], default=str) + "\n")
        control = self._control()
        if hook in self.hanging or hook in control.get("hang", ()):
            while not self.released.wait(0.02):
                if self._control().get("released"):
                    break
        if hook in self.raising or hook in control.get("raise", ()):
            raise RuntimeError("scripted failure")

    # -- hooks -----------------------------------------------------------------------------

    @hookimpl
    def devicehost_configure(self, config: Mapping[str, Any], root: Path) -> None:
        self.dir = control_dir(root, self.name)
        self.dir.mkdir(parents=True, exist_ok=True)
        prefix = config.get("prefix", "dev")
        devices: dict[str, list[dict[str, Any]]] = {}
        for name, count in dict(config.get("resources", {})).items():
            if not isinstance(count, int):
                raise ValueError(f"resources.{name}: expected a device count, got {count!r}")
            devices[name] = [
                {"id": f"{prefix}-{i}", "health": "Healthy", "numa_nodes": [i % 2]}
                for i in range(count)
            ]
        if not (self.dir / "devices.json").exists():  # a restarted worker keeps the state
            write_json(self.dir / "devices.json", devices)
        self.raising = set(config.get("raise", ()))
        self.hanging = set(config.get("hang", ()))
        for _ in range(int(config.get("zombies", 0))):  # a driver that forgets its children
            if os.fork() == 0:
                os._exit(0)
        self._enter("devicehost_configure", config=dict(config))

    @hookimpl
    def devicehost_resources(self) -> Sequence[ResourceSpec]:
        self._enter("devicehost_resources")
        return [ResourceSpec(name=name) for name in self._devices()]

    @hookimpl
    def devicehost_notes(self) -> Sequence[str]:
        return [f"scripted with {sum(map(len, self._devices().values()))} devices"]

    @hookimpl
    def devicehost_enumerate(self, resource: str) -> Sequence[Any]:
        self._enter("devicehost_enumerate", resource=resource)
        return list(self._devices().get(resource, []))

    @hookimpl
    def devicehost_watch(
        self,
        resource: str,
        notify: Callable[[], None],
        stop: threading.Event,
        enumerated: Callable[[], Sequence[Any]],
    ) -> None:
        path = self.dir / "devices.json"
        seen = _identity(path)
        # A write after the host's last enumeration but before that baseline is compared
        # with what was enumerated (the hookspec's advice): a test's first health flip,
        # made while this thread was still starting on a loaded machine, was missed so.
        if self._devices().get(resource, []) != list(enumerated()):
            notify()
        while not stop.wait(WATCH_POLL_SECONDS):
            now = _identity(path)
            if now != seen:
                seen = now
                notify()

    @hookimpl
    def devicehost_allocate(self, resource: str, device_ids: Sequence[str]) -> Allocation:
        self._enter("devicehost_allocate", resource=resource, device_ids=list(device_ids))
        known = {d["id"] for d in self._devices().get(resource, [])}
        for device_id in device_ids:
            if device_id not in known:
                raise UnknownDevice(resource, device_id)
        return Allocation(
            envs={"SCRIPTED_DEVICES": ",".join(device_ids)},
            devices=tuple(DeviceNode(host_path=f"/dev/scripted/{d}") for d in device_ids),
            mounts=(Mount(host_path="/opt/scripted/lib", container_path="/usr/lib/scripted"),),
        )

    @hookimpl
    def devicehost_simulate_health(self, resource: str, device_id: str, healthy: bool) -> bool:
        devices = self._devices()
        for device in devices.get(resource, []):
            if device["id"] == device_id:
                device["health"] = "Healthy" if healthy else "Unhealthy"
        write_json(self.dir / "devices.json", devices)
        return True

    @hookimpl
    def devicehost_shutdown(self) -> None:
        self._enter("devicehost_shutdown")
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


class Composed(Scripted):
    """Declares its edits with the devices and the resource; no allocate hook at all."""

    devicehost_allocate = None  # type: ignore[assignment]

    @hookimpl
    def devicehost_resources(self) -> Sequence[ResourceSpec]:
        self._enter("devicehost_resources")
        return [
            ResourceSpec(
                name=name,
                edits=Allocation(devices=(DeviceNode(host_path="/dev/scripted/ctl"),)),
                joined_envs=("SCRIPTED_DEVICES",),
            )
            for name in self._devices()
        ]

    @hookimpl
    def devicehost_enumerate(self, resource: str) -> Sequence[Any]:
        self._enter("devicehost_enumerate", resource=resource)
        return [
            Device(
                id=d.id,
                health=d.health,
                numa_nodes=d.numa_nodes,
                edits=Allocation(
                    envs={"SCRIPTED_DEVICES": d.id},
                    devices=(DeviceNode(host_path=f"/dev/scripted/{d.id}"),),
                ),
            )
            for d in map(device_from, self._devices().get(resource, []))
        ]


class Simulating(Scripted):
    """Builds its 'hardware' under the root, as a vendor driver does under --simulate."""

    @hookimpl
    def devicehost_simulate(self, root: Path) -> None:
        (root / "dev").mkdir(parents=True, exist_ok=True)
        (root / "dev" / "simulated0").touch()
        control_dir(root, self.name).mkdir(parents=True, exist_ok=True)
        with open(control_dir(root, self.name) / "calls.jsonl", "a") as log:
            log.write(json.dumps(["devicehost_simulate", {"root": str(root)}]) + "\n")

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
        return {"envs": {"X": 1}}

    @hookimpl
    def devicehost_preferred_allocation(self, available: Sequence[str], size: int) -> Any:
        return list(available)[: size + 1]


class BrokenSimulation(Scripted):
    """Its simulated hardware cannot be built."""

    @hookimpl
    def devicehost_simulate(self, root: Path) -> None:
        raise OSError("cannot build the simulated node")


class ChangesBeforeItsWatch(Scripted):
    """Hardware that changes between the host's first scan and the start of ``watch``: the
    first enumeration finds one device, every later one two. Its watch never notifies, as
    a watch that takes its own baseline after the change would not."""

    scans = 0

    @hookimpl
    def devicehost_enumerate(self, resource: str) -> Sequence[Any]:
        self.scans += 1
        devices = list(self._devices().get(resource, []))
        return devices[:1] if self.scans == 1 else devices

    @hookimpl
    def devicehost_watch(
        self, resource: str, notify: Callable[[], None], stop: threading.Event
    ) -> None:
        stop.wait()


class WithoutWatch(Scripted):
    """The scripted driver without a watch hook: the host learns of changes by scanning."""

    devicehost_watch = None  # type: ignore[assignment]
