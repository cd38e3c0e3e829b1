"""Drivers that misbehave on purpose, for the fault, fuzz and security tests.

Each one builds on ``Scripted`` (see scripted.py) so tests configure devices the same way:

- ``Paced``: ``delay: {hook: seconds}`` slows those hooks, so a kubelet restart lands in
  the middle of a call.
- ``Faulty``: every hook named in ``raise`` raises, watch and shutdown included; tests add
  hooks to ``raising`` while the host runs.
- ``RaisingEverywhere``: every hook raises, ``configure`` first.
- ``Malformed``: enumerate mixes valid devices with duplicates, bad health strings,
  64-character IDs, IDs with ``/`` or NUL, non-``Device`` values and bad NUMA nodes;
  allocate answers with a dict; preferred_allocation with nonsense.
- ``PathBuilder``: builds device nodes and mounts from the device IDs it is asked for, as
  a careless vendor driver would (``/dev/pathbuilder/<id>``).
- ``Echo``: answers allocate with whatever paths or items a test put in ``answer``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from devicehost import Allocation, Device, DeviceNode, Mount, hookimpl
from testdrivers.scripted import Scripted, ScriptedWithPreStart


class Paced(Scripted):
    """The scripted driver with a configurable delay per hook (``delay: {hook: s}``)."""

    delays: Mapping[str, float] = {}

    @hookimpl
    def devicehost_configure(self, config: Mapping[str, Any], root: Path) -> None:
        self.delays = dict(config.get("delay", {}))
        super().devicehost_configure(config=config, root=root)

    def _enter(self, hook: str, **kwargs: Any) -> None:
        if len(self.calls) > 1000:  # long loops: keep the record bounded
            del self.calls[:500]
        delay = self.delays.get(hook, 0.0)
        if delay:
            time.sleep(delay)
        super()._enter(hook, **kwargs)


class Faulty(ScriptedWithPreStart):
    """Raises in any hook listed in ``raising`` — watch and shutdown too."""

    watch_calls = 0

    @hookimpl
    def devicehost_watch(
        self, resource: str, notify: Callable[[], None], stop: threading.Event
    ) -> None:
        self.watch_calls += 1
        self._notify[resource] = notify
        if "devicehost_watch" in self.raising:
            raise RuntimeError("scripted watch failure")
        while not stop.wait(0.05):
            if "devicehost_watch" in self.raising:
                raise RuntimeError("scripted watch failure")

    @hookimpl
    def devicehost_shutdown(self) -> None:
        super().devicehost_shutdown()
        if "devicehost_shutdown" in self.raising:
            raise RuntimeError("scripted shutdown failure")


class RaisingEverywhere:
    """Every hook raises RuntimeError, starting with configure."""

    @hookimpl
    def devicehost_configure(self, config: Mapping[str, Any]) -> None:
        raise RuntimeError("raising everywhere: configure")

    @hookimpl
    def devicehost_resources(self) -> Sequence[Any]:
        raise RuntimeError("raising everywhere: resources")

    @hookimpl
    def devicehost_notes(self) -> Sequence[str]:
        raise RuntimeError("raising everywhere: notes")

    @hookimpl
    def devicehost_enumerate(self, resource: str) -> Sequence[Device]:
        raise RuntimeError("raising everywhere: enumerate")

    @hookimpl
    def devicehost_watch(self, resource: str) -> None:
        raise RuntimeError("raising everywhere: watch")

    @hookimpl
    def devicehost_allocate(self, resource: str, device_ids: Sequence[str]) -> Allocation:
        raise RuntimeError("raising everywhere: allocate")

    @hookimpl
    def devicehost_preferred_allocation(self, resource: str) -> Sequence[str]:
        raise RuntimeError("raising everywhere: preferred_allocation")

    @hookimpl
    def devicehost_pre_start(self, resource: str) -> None:
        raise RuntimeError("raising everywhere: pre_start")

    @hookimpl
    def devicehost_shutdown(self) -> None:
        raise RuntimeError("raising everywhere: shutdown")


#: What ``Malformed`` reports besides its valid devices; every one must be dropped.
MALFORMED_EXTRAS: tuple[Any, ...] = (
    Device(id="mal-0"),  # a duplicate of a valid ID
    Device(id="bad-health", health="Broken"),  # type: ignore[arg-type]
    Device(id="lower-health", health="healthy"),  # type: ignore[arg-type]
    Device(id="x" * 64),
    Device(id="slash/id"),
    Device(id="nul\x00id"),
    Device(id=""),
    Device(id="tab\tid"),
    Device(id="neg-numa", numa_nodes=(-1,)),
    Device(id="bool-numa", numa_nodes=(True,)),
    {"id": "a-dict"},
    "a-string",
    None,
)


class Malformed(ScriptedWithPreStart):
    """Valid devices ``mal-<i>`` plus every kind of invalid one; malformed answers."""

    preference: Any = ("no-such-device", "no-such-device")  # the wrong IDs, repeated

    @hookimpl
    def devicehost_configure(self, config: Mapping[str, Any], root: Path) -> None:
        super().devicehost_configure(config={"prefix": "mal", **config}, root=root)

    @hookimpl
    def devicehost_enumerate(self, resource: str) -> Sequence[Any]:
        self._enter("devicehost_enumerate", resource=resource)
        return [*self.devices[resource].values(), *MALFORMED_EXTRAS]

    @hookimpl
    def devicehost_allocate(self, resource: str, device_ids: Sequence[str]) -> Any:
        self._enter("devicehost_allocate", resource=resource, device_ids=list(device_ids))
        return {"envs": {"X": "1"}, "devices": ["/etc/shadow"]}

    @hookimpl
    def devicehost_preferred_allocation(
        self, resource: str, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> Any:
        self._enter("devicehost_preferred_allocation", resource=resource, size=size)
        return self.preference


class PathBuilder(Scripted):
    """Turns device IDs straight into paths: ``/dev/pathbuilder/<id>`` and a mount."""

    extra_ids: Sequence[str] = ()

    @hookimpl
    def devicehost_configure(self, config: Mapping[str, Any], root: Path) -> None:
        super().devicehost_configure(config=config, root=root)
        self.extra_ids = list(config.get("ids", ()))
        for name in self.devices:
            for device_id in self.extra_ids:
                self.devices[name][device_id] = Device(id=device_id)

    @hookimpl
    def devicehost_allocate(self, resource: str, device_ids: Sequence[str]) -> Allocation:
        self._enter("devicehost_allocate", resource=resource, device_ids=list(device_ids))
        return Allocation(
            devices=tuple(DeviceNode(host_path=f"/dev/pathbuilder/{d}") for d in device_ids),
            mounts=tuple(
                Mount(host_path=f"/var/lib/pathbuilder/{d}", container_path=f"/data/{d}")
                for d in device_ids
            ),
        )


class Echo(Scripted):
    """Answers allocate with what the test put in ``answer``: a callable that builds the
    Allocation (so model validation happens inside the driver, as it would for real)."""

    answer: Callable[[], Any] = staticmethod(lambda: Allocation())

    @hookimpl
    def devicehost_allocate(self, resource: str, device_ids: Sequence[str]) -> Any:
        self._enter("devicehost_allocate", resource=resource, device_ids=list(device_ids))
        return self.answer()
