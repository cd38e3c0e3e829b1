"""Rebuild a driver's plain-data answers into the host's own frozen types, checking each.

Everything a worker sends is untrusted. The host never uses a driver's objects: it builds
its own ``Device``/``ResourceSpec``/``ContainerEdits`` from the plain data with its own
constructors, so a subclass that overrides a check, an unhashable ID or a path with ``..``
cannot reach the kubelet. A bad device is dropped (with its reason); a bad list as a whole
is a ``DriverError`` naming the driver and hook.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from devicehost.edits.policy import edits_problem
from devicehost.edits.simulated_paths import edits_on_node
from devicehost.errors import DriverError
from devicehost.model import (
    MAX_DEVICE_ID_LENGTH,
    NO_ATTRIBUTES,
    ContainerEdits,
    Device,
    DeviceAttributes,
    DeviceNode,
    Health,
    HostPath,
    Mount,
    ResourceSpec,
    device_id_problem,
)
from devicehost.system.sockets import MAX_SOCKET_PATH_BYTES

#: Linux supports at most 1024 NUMA nodes (CONFIG_NODES_SHIFT ≤ 10).
MAX_NUMA_NODE = 1023
MAX_NOTE_LENGTH = 500
_HEALTH = {h.value: h for h in Health}


class Invalid(ValueError):
    """One value a driver returned cannot be used; the message says why."""


def _mapping(data: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise Invalid(f"{what} is {type(data).__name__}, expected an object")
    return data


def _strings(data: Any, what: str) -> dict[str, str]:
    data = _mapping(data, what)
    for key, value in data.items():
        if not isinstance(value, str):
            raise Invalid(f"{what} {key!r} has value {value!r}, expected a string")
    return dict(data)


def _list(data: Any, what: str) -> list[Any]:
    if not isinstance(data, list):
        raise Invalid(f"{what} is {type(data).__name__}, expected a list")
    return data


def edits_from_plain(data: Any, allowed: Collection[str] = ()) -> ContainerEdits:
    """Container edits from ``{"envs", "mounts", "devices", "annotations", "cdi_devices"}``,
    checked against the container-edit policy (``edit_policy``; ``allowed``: the exceptions
    the operator allows this driver)."""
    if data is None:
        return ContainerEdits()
    edits = _edits_from_plain(data)
    problem = edits_problem(edits, allowed)
    if problem:
        raise Invalid(problem)
    return edits


def allocation_from_plain(
    data: Any, allowed: Collection[str] = (), tree: Path | None = None
) -> ContainerEdits:
    """An ``allocate`` answer as the host uses it, whichever face asked: rebuilt and checked
    like any driver answer (``edits_from_plain``; ``Invalid``), its host paths moved into
    the driver's simulated ``tree`` when there is one (``edits.simulated_paths``)."""
    edits = edits_from_plain(data, allowed)
    return edits if tree is None else edits_on_node(edits, tree)


def _edits_from_plain(data: Any) -> ContainerEdits:
    data = _mapping(data, "edits")
    try:
        mounts = tuple(
            Mount(
                container_path=m["container_path"],
                host_path=m["host_path"],
                read_only=bool(m.get("read_only", True)),
            )
            for m in (_mapping(m, "mount") for m in _list(data.get("mounts", []), "mounts"))
        )
        nodes = tuple(
            DeviceNode(
                host_path=d["host_path"],
                container_path=d.get("container_path", ""),
                permissions=d.get("permissions", "rw"),
            )
            for d in (_mapping(d, "device") for d in _list(data.get("devices", []), "devices"))
        )
        return ContainerEdits(
            envs=_strings(data.get("envs", {}), "env"),
            annotations=_strings(data.get("annotations", {}), "annotation"),
            mounts=mounts,
            devices=nodes,
            cdi_devices=tuple(_list(data.get("cdi_devices", []), "cdi_devices")),
        )
    except KeyError as exc:
        raise Invalid(f"a mount or device node has no {exc.args[0]!r}") from None
    except (TypeError, ValueError) as exc:
        raise Invalid(str(exc)) from None


def device_from_plain(
    data: Any,
    known_edits: dict[str, ContainerEdits] | None = None,
    allowed: Collection[str] = (),
    left_out: list[str] | None = None,
) -> Device:
    """One device, or ``Invalid`` saying why it cannot be sent to the kubelet.

    ``known_edits``: edits already built in this snapshot, by their text: devices of a
    shared pool all carry the same edits (an RDMA node's 100 slots: 3.6 → 1 ms a scan).
    Attributes the API would refuse do not cost the device: it is kept without them, and
    why goes to ``left_out``."""
    data = _mapping(data, "device")
    device_id = data.get("id")
    problem = device_id_problem(device_id)
    if problem:
        raise Invalid(problem)
    assert isinstance(device_id, str)
    health = _HEALTH.get(data.get("health"))
    if health is None:
        raise Invalid(
            f"device {device_id!r} has health {data.get('health')!r}; expected Healthy or Unhealthy"
        )
    numa = data.get("numa_nodes", [])
    if not isinstance(numa, list) or not all(
        type(n) is int and 0 <= n <= MAX_NUMA_NODE for n in numa
    ):
        raise Invalid(
            f"device {device_id!r} has NUMA nodes {numa!r:.80}; expected integers from 0 to "
            f"{MAX_NUMA_NODE}"
        )
    known = {} if known_edits is None else known_edits
    plain = data.get("edits")
    edits = known.get(key := repr(plain))
    if edits is None:
        try:
            edits = known[key] = edits_from_plain(plain, allowed)
        except Invalid as exc:
            raise Invalid(f"device {device_id!r}: {exc}") from None
    attributes = NO_ATTRIBUTES
    if data.get("attributes") is not None:
        try:
            attributes = attributes_from_plain(data["attributes"])
        except Invalid as exc:
            if left_out is not None:
                left_out.append(f"device {device_id!r}: {exc}")
    return Device(
        id=device_id, health=health, numa_nodes=tuple(numa), edits=edits, attributes=attributes
    )


_ATTRIBUTE_NAMES = frozenset(f.name for f in dataclasses.fields(DeviceAttributes))


def attributes_from_plain(data: Any) -> DeviceAttributes:
    """A device's attributes, or ``Invalid`` saying which one cannot be published."""
    data = _mapping(data, "attributes")
    unknown = sorted(str(k) for k in data if k not in _ATTRIBUTE_NAMES)
    if unknown:
        raise Invalid(f"unknown attribute {unknown[0][:64]!r}")
    try:
        attributes = DeviceAttributes(**data)
    except TypeError as exc:
        raise Invalid(str(exc)) from None
    problem = attributes.problem()
    if problem:
        raise Invalid(problem)
    return NO_ATTRIBUTES if attributes == NO_ATTRIBUTES else attributes


def devices_from_plain(
    driver: str, data: Any, allowed: Collection[str] = ()
) -> tuple[list[Device], list[str]]:
    """The valid, unique devices of an enumeration, and the problem of each one dropped or
    kept without its attributes."""
    if not isinstance(data, list):
        raise DriverError(
            driver,
            "devicehost_enumerate",
            f"returned {type(data).__name__}, expected a list of Device",
        )
    enumeration = Enumeration(allowed)
    enumeration.add(data)
    return list(enumeration.kept.values()), enumeration.problems + enumeration.left_out


class Enumeration:
    """The devices of one enumeration, checked a slice at a time (``add``): the scanner
    yields to the event loop between slices, so a large list never stalls other RPCs."""

    def __init__(self, allowed: Collection[str] = ()) -> None:
        self.allowed = allowed
        self.kept: dict[str, Device] = {}
        #: why each device dropped was
        self.problems: list[str] = []
        #: why each device kept without its attributes was
        self.left_out: list[str] = []
        self._known_edits: dict[str, ContainerEdits] = {}

    def add(self, items: list[Any]) -> None:
        for item in items:
            self.add_one(item)

    def add_one(self, item: Any) -> None:
        try:
            device = device_from_plain(item, self._known_edits, self.allowed, self.left_out)
        except Invalid as exc:
            self.problems.append(str(exc))
            return
        if device.id in self.kept:
            self.problems.append(f"device ID {device.id!r} appears more than once")
            return
        self.kept[device.id] = device


def spec_from_plain(data: Any, plugin_dir: Path, allowed: Collection[str] = ()) -> ResourceSpec:
    """One resource, checked for its name and for a socket path the kernel can bind."""
    data = _mapping(data, "resource")
    name = data.get("name")
    if not isinstance(name, str):
        raise Invalid(f"resource name {name!r} is not a string")
    try:
        spec = ResourceSpec(
            name=name,
            edits=edits_from_plain(data.get("edits"), allowed),
            joined_envs=tuple(_list(data.get("joined_envs", []), "joined_envs")),
            indexed_envs=tuple(_list(data.get("indexed_envs", []), "indexed_envs")),
        )
    except ValueError as exc:
        raise Invalid(str(exc)) from None
    if not all(isinstance(e, str) for e in spec.joined_envs):
        raise Invalid(f"resource {name!r}: joined_envs must be env variable names")
    socket_path = plugin_dir / spec.socket_name
    if len(os.fsencode(socket_path)) > MAX_SOCKET_PATH_BYTES:
        raise Invalid(socket_path_problem(name, socket_path))
    return spec


def socket_path_problem(resource: str, socket_path: Path) -> str:
    """What to say when ``<plugin dir>/<socket file>`` is over the unix socket limit."""
    return (
        f"resource {resource!r}: its socket path {socket_path} is "
        f"{len(os.fsencode(socket_path))} bytes, over the {MAX_SOCKET_PATH_BYTES}-byte limit "
        "of a unix socket path; use a shorter pluginDir or resource name"
    )


def notes_from_plain(data: Any) -> list[str]:
    if data is None:
        return []
    return [str(n)[:MAX_NOTE_LENGTH] for n in _list(data, "notes")]


def host_paths_from_plain(data: Any) -> list[HostPath]:
    if data is None:
        return []
    paths = []
    for item in _list(data, "host paths"):
        item = _mapping(item, "host path")
        try:
            paths.append(
                HostPath(
                    path=item.get("path"),  # type: ignore[arg-type]
                    purpose=str(item.get("purpose", "")),
                    at_real_path=bool(item.get("at_real_path", False)),
                )
            )
        except ValueError as exc:
            raise Invalid(str(exc)) from None
    return paths


def choice_from_plain(data: Any) -> list[str] | None:
    """A preferred allocation: a list of IDs, or None for "use the host's default"."""
    if data is None:
        return None
    items = _list(data, "preferred allocation")
    if not all(isinstance(i, str) and len(i) <= MAX_DEVICE_ID_LENGTH for i in items):
        raise Invalid(f"preferred allocation {items!r:.120} is not a list of device IDs")
    return items


def resources_from_plain(
    driver: str, data: Any, plugin_dir: Path, allowed: Collection[str] = ()
) -> tuple[list[ResourceSpec], list[str]]:
    """The driver's valid resources, and the problem of each one refused."""
    if data is None:
        return [], []
    if not isinstance(data, list):
        raise DriverError(
            driver,
            "devicehost_resources",
            f"returned {type(data).__name__}, expected a list of ResourceSpec",
        )
    specs: list[ResourceSpec] = []
    problems: list[str] = []
    for item in data:
        try:
            specs.append(spec_from_plain(item, plugin_dir, allowed))
        except Invalid as exc:
            problems.append(str(exc))
    return specs, problems
