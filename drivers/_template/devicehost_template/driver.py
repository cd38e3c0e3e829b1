"""Widgets: one device per ``/dev/widgetN``, health from ``/sys/class/widget/widgetN/health``.

The smallest complete driver, written to be copied. Every hardware path is read under
``root`` (the host's ``/``), so the same code runs on a real node, on the fake tree the
tests build, and in ``devicehost demo`` (``simulate`` builds the tree).
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
    ResourceSpec,
    UnknownDevice,
    hookimpl,
)

RESOURCE = "example.com/widget"
WATCH_PERIOD_SECONDS = 0.1


class _Settings:
    root = Path("/")
    count = 4


settings = _Settings()


def _health_file(root: Path, name: str) -> Path:
    return root / "sys/class/widget" / name / "health"


def _names(root: Path) -> list[str]:
    return sorted(
        (p.name for p in (root / "dev").glob("widget[0-9]*")),
        key=lambda n: int(n.removeprefix("widget")),
    )


def _read_health(root: Path, name: str) -> Health:
    try:
        ok = _health_file(root, name).read_text().strip() == "ok"
    except OSError:
        ok = False
    return Health.HEALTHY if ok else Health.UNHEALTHY


@hookimpl
def devicehost_simulate(root: Path) -> None:
    """Build a node with ``count`` widgets, all healthy, on NUMA nodes 0 and 1."""
    for index in range(settings.count):
        (root / "dev").mkdir(parents=True, exist_ok=True)
        (root / "dev" / f"widget{index}").touch()
        health = _health_file(root, f"widget{index}")
        health.parent.mkdir(parents=True, exist_ok=True)
        health.write_text("ok\n")
        (health.parent / "numa_node").write_text(f"{index % 2}\n")


@hookimpl
def devicehost_configure(config: Mapping[str, Any], root: Path) -> None:
    count = config.get("simulatedCount", 4)
    if not isinstance(count, int) or count < 0:
        raise ValueError(f"simulatedCount: expected a non-negative integer, got {count!r}")
    settings.root, settings.count = root, count


@hookimpl
def devicehost_resources() -> Sequence[ResourceSpec]:
    return [ResourceSpec(name=RESOURCE)] if _names(settings.root) else []


@hookimpl
def devicehost_enumerate(resource: str) -> Sequence[Device]:
    devices = []
    for name in _names(settings.root):
        numa = _health_file(settings.root, name).parent / "numa_node"
        nodes = (int(numa.read_text()),) if numa.exists() else ()
        devices.append(Device(id=name, health=_read_health(settings.root, name), numa_nodes=nodes))
    return devices


@hookimpl
def devicehost_watch(resource: str, notify: Callable[[], None], stop: threading.Event) -> None:
    """Poll health files (cheap) and notify on any change: a stand-in for vendor events."""
    seen = {n: _read_health(settings.root, n) for n in _names(settings.root)}
    while not stop.wait(WATCH_PERIOD_SECONDS):
        now = {n: _read_health(settings.root, n) for n in _names(settings.root)}
        if now != seen:
            seen = now
            notify()


@hookimpl
def devicehost_allocate(resource: str, device_ids: Sequence[str]) -> Allocation:
    known = set(_names(settings.root))
    for device_id in device_ids:
        if device_id not in known:
            raise UnknownDevice(resource, device_id)
    return Allocation(
        envs={"WIDGET_VISIBLE_DEVICES": ",".join(device_ids)},
        devices=tuple(DeviceNode(host_path=f"/dev/{d}") for d in device_ids),
    )


@hookimpl
def devicehost_simulate_health(resource: str, device_id: str, healthy: bool) -> bool:
    _health_file(settings.root, device_id).write_text("ok\n" if healthy else "fault\n")
    return True
