"""Drivers that misbehave on purpose, for the fault, fuzz and security tests.

Each one builds on ``Scripted`` (see scripted.py) so tests configure devices the same way:

- ``Paced``: ``delay: {hook: seconds}`` slows those hooks, so a kubelet restart lands in
  the middle of a call.
- ``Faulty``: every hook named in ``raise`` raises, watch and shutdown included; tests add
  hooks through the control tree while the host runs.
- ``RaisingEverywhere``: every hook raises, ``configure`` first.
- ``Malformed``: enumerate mixes valid devices with duplicates, bad health strings,
  64-character IDs, IDs with ``/`` or NUL, non-``Device`` values and bad NUMA nodes;
  allocate answers with a dict; preferred_allocation with nonsense.
- ``PathBuilder``: builds device nodes and mounts from the device IDs it is asked for, as
  a careless vendor driver would (``/dev/pathbuilder/<id>``).
- ``Echo``: answers allocate with whatever plain data a test put in ``answer.json``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
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
        delay = self.delays.get(hook, 0.0)
        if delay:
            time.sleep(delay)
        super()._enter(hook, **kwargs)


class Faulty(ScriptedWithPreStart):
    """Raises in any hook listed in ``raise`` (config or control file) — watch and shutdown
    too."""

    def _raises(self, hook: str) -> bool:
        return hook in self.raising or hook in self._control().get("raise", ())

    @hookimpl
    def devicehost_watch(
        self, resource: str, notify: Callable[[], None], stop: threading.Event
    ) -> None:
        with open(self.dir / "calls.jsonl", "a") as log:
            log.write(json.dumps(["devicehost_watch", {"resource": resource}]) + "\n")
        if self._raises("devicehost_watch"):
            raise RuntimeError("scripted watch failure")
        while not stop.wait(0.05):
            if self._raises("devicehost_watch"):
                raise RuntimeError("scripted watch failure")

    @hookimpl
    def devicehost_shutdown(self) -> None:
        super().devicehost_shutdown()
        if self._raises("devicehost_shutdown"):
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
        return [*self._devices().get(resource, []), *MALFORMED_EXTRAS]

    @hookimpl
    def devicehost_allocate(self, resource: str, device_ids: Sequence[str]) -> Any:
        self._enter("devicehost_allocate", resource=resource, device_ids=list(device_ids))
        return {"envs": {"X": "1"}, "devices": ["/etc/shadow"]}

    @hookimpl
    def devicehost_preferred_allocation(
        self, resource: str, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> Any:
        self._enter("devicehost_preferred_allocation", resource=resource, size=size)
        return self._control().get("preference", list(self.preference))


class PathBuilder(Scripted):
    """Turns device IDs straight into paths: ``/dev/pathbuilder/<id>`` and a mount."""

    extra_ids: Sequence[str] = ()

    @hookimpl
    def devicehost_configure(self, config: Mapping[str, Any], root: Path) -> None:
        super().devicehost_configure(config=config, root=root)
        self.extra_ids = list(config.get("ids", ()))

    @hookimpl
    def devicehost_enumerate(self, resource: str) -> Sequence[Any]:
        self._enter("devicehost_enumerate", resource=resource)
        extra = [{"id": i, "health": "Healthy"} for i in self.extra_ids]
        return [*self._devices().get(resource, []), *extra]

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
    """Answers allocate with the plain data a test wrote to ``answer.json`` in its control
    tree, as a careless or hostile driver could: the host must check it all."""

    @hookimpl
    def devicehost_allocate(self, resource: str, device_ids: Sequence[str]) -> Any:
        self._enter("devicehost_allocate", resource=resource, device_ids=list(device_ids))
        try:
            answer = json.loads((self.dir / "answer.json").read_text())
        except FileNotFoundError:
            return {}
        if isinstance(answer, dict) and "look_alike" in answer:
            # An object that merely looks like a DeviceNode or Mount (a vendor SDK's type).
            smuggled = SimpleNamespace(
                host_path="/dev/../etc/shadow",
                container_path="/dev/x",
                permissions="rw",
                read_only=False,
            )
            return {answer["look_alike"]: [smuggled]}
        return answer
