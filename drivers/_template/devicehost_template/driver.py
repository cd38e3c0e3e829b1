"""Widgets: one device per ``/dev/widgetN``, health from ``/sys/class/widget/widgetN/health``.

The smallest complete driver, written to be copied (``devicehost new-driver NAME`` writes
a renamed copy). Every hardware path is read under ``root`` (the host's ``/``), so the same
code runs on a real node, on the fake tree the tests build, and in ``devicehost demo``
(where ``simulate`` builds the tree).

What a container needs is declared with each device (its device node, its name in
``WIDGET_VISIBLE_DEVICES``); the host composes every Allocate answer from those, so this
driver has no ``allocate`` hook. A driver that adds one (for work that must happen at
allocation time) refuses an ID it does not know with
``raise UnknownDevice(resource, device_id)``: ``check_driver`` calls it with an unknown ID
and checks exactly that (devicehost's docs/hooks.md, ``devicehost_allocate``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from devicehost import (
    ContainerEdits,
    Device,
    DeviceAttributes,
    DeviceNode,
    Health,
    HostPath,
    ResourceSpec,
    hookimpl,
)
from devicehost.sysfs import read_attr
from devicehost.testing import FakeRoot

#: The entry-point name in pyproject.toml: how operators and tests name this driver.
NAME = "template"
RESOURCE = "example.com/widget"
VISIBLE = "WIDGET_VISIBLE_DEVICES"
WATCH_PERIOD_SECONDS = 0.1
DEFAULT_COUNT = 4
#: This driver's own simulated machine, for ``--node`` (published through the
#: ``devicehost.nodes`` entry point in pyproject.toml; ``devicehost demo --list-nodes``).
MACHINE = "template-box"
MACHINE_DESCRIPTION = "A widget box: 8 widgets over 2 NUMA nodes, this driver's own machine"
MACHINE_WIDGETS = 8


class _Settings:
    root = Path("/")


settings = _Settings()


def simulated_count(config: Mapping[str, Any]) -> int:
    """``simulatedCount`` from this driver's config section (``drivers.<NAME>``)."""
    count = config.get("simulatedCount", DEFAULT_COUNT)
    if type(count) is not int or not 0 <= count <= 64:
        raise ValueError(f"simulatedCount: expected an integer from 0 to 64, got {count!r}")
    return count


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


def _attributes(root: Path, name: str) -> DeviceAttributes:
    """What else is known of a widget, for claims to select it by (DRA): its product name."""
    product = read_attr(_health_file(root, name).parent / "product")
    return DeviceAttributes(product=(product or "")[:64])


def _numa_nodes(root: Path, name: str) -> tuple[int, ...]:
    try:
        node = int((_health_file(root, name).parent / "numa_node").read_text())
    except (OSError, ValueError):
        return ()
    return (node,) if node >= 0 else ()


@hookimpl
def devicehost_simulate(root: Path, config: Mapping[str, Any], node: str) -> None:
    """Build ``simulatedCount`` widgets (``MACHINE_WIDGETS`` on ``--node MACHINE``), all
    healthy, on NUMA nodes 0 and 1; each ``/dev/widgetN`` a character device where mknod
    is permitted, so a container runtime accepts it (``FakeRoot.char_device``).

    Widgets are on none of the other machines ``--node`` names, so those get none (the
    driver then serves nothing there, as on a real node without them) — unless the
    config sets ``simulatedCount``, which adds that many to any machine (a test cluster
    whose nodes simulate a published machine plus your widgets).
    """
    if node == MACHINE:
        count = MACHINE_WIDGETS
    elif node and "simulatedCount" not in config:
        return
    else:
        try:
            count = simulated_count(config)
        except ValueError:
            count = DEFAULT_COUNT  # configure, called next, reports the bad value as config
    fake = FakeRoot(root)
    for index in range(count):
        fake.char_device(f"/dev/widget{index}")
        health = _health_file(root, f"widget{index}")
        health.parent.mkdir(parents=True, exist_ok=True)
        health.write_text("ok\n")
        (health.parent / "numa_node").write_text(f"{index % 2}\n")
        (health.parent / "product").write_text("Example Widget 2000\n")


@hookimpl
def devicehost_configure(config: Mapping[str, Any], root: Path) -> None:
    unknown = sorted(set(config) - {"simulatedCount"})
    if unknown:
        raise ValueError(f"{unknown[0]}: unknown key; known keys: simulatedCount")
    simulated_count(config)
    settings.root = root


@hookimpl
def devicehost_resources() -> Sequence[ResourceSpec]:
    if not _names(settings.root):
        return []  # no widgets on this node: normal on a mixed fleet
    # Each device contributes its name to VISIBLE; the host joins them with commas.
    return [ResourceSpec(name=RESOURCE, joined_envs=(VISIBLE,))]


@hookimpl
def devicehost_enumerate(resource: str) -> Sequence[Device]:
    root = settings.root
    return [
        Device(
            id=name,
            health=_read_health(root, name),
            numa_nodes=_numa_nodes(root, name),
            edits=ContainerEdits(
                envs={VISIBLE: name}, devices=(DeviceNode(host_path=f"/dev/{name}"),)
            ),
            attributes=_attributes(root, name),
        )
        for name in _names(root)
    ]


@hookimpl
def devicehost_watch(
    resource: str,
    notify: Callable[[], None],
    stop: threading.Event,
    enumerated: Callable[[], Sequence[Device]],
) -> None:
    """Poll health files (cheap), a stand-in for vendor events, and notify whenever they
    differ from what the kubelet was last told (``enumerated()``, the host's copy of this
    driver's last enumerate). Not from this loop's own last look: a fault an enumeration
    caught that cleared before the next look would then never be reported cleared."""
    while not stop.wait(WATCH_PERIOD_SECONDS):
        told = {d.id: d.health for d in enumerated()}
        now = {n: _read_health(settings.root, n) for n in _names(settings.root)}
        if now != told:
            notify()


@hookimpl
def devicehost_labels() -> Mapping[str, str]:
    count = len(_names(settings.root))
    return {"present": "true", "count": str(count)} if count else {}


@hookimpl
def devicehost_host_paths() -> Sequence[HostPath]:
    return [
        HostPath(path="/dev", purpose="the widgetN device nodes"),
        HostPath(path="/sys/class/widget", purpose="each widget's health and NUMA node"),
    ]


@hookimpl
def devicehost_simulate_health(resource: str, device_id: str, healthy: bool) -> bool:
    _health_file(settings.root, device_id).write_text("ok\n" if healthy else "fault\n")
    return True
