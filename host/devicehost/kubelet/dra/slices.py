"""ResourceSlices for one driver's pool on one node, built from its device snapshots.

Pure: the same devices give the same documents, so tests and the publisher see exactly
what the API server will. The documents are ``resource.k8s.io/v1`` ResourceSlices as JSON;
the limits are the API's (k8s.io/api v0.37.2 ``resource/v1/types.go``): at most 128
devices per slice (``ResourceSliceMaxDevices``), 64 once any device of the slice has a
taint (``ResourceSliceMaxDevicesWithAdvancedFeatures``). Every slice of a pool carries
the pool's generation and slice count; a pool whose devices changed gets a new
generation, so the scheduler never mixes slices of two versions of it.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from devicehost.kubelet.dra.attributes import DeviceFacts, attributes_and_capacity
from devicehost.kubelet.dra.naming import device_name, pool_name
from devicehost.model import Device

API_VERSION = "resource.k8s.io/v1"
MAX_DEVICES = 128
MAX_DEVICES_WITH_TAINTS = 64
MAX_OBJECT_NAME = 253
#: The taint an Unhealthy device carries in ``taint`` mode (a label name, as the API wants).
UNHEALTHY_TAINT = {"key": "devicehost.io/unhealthy", "value": "true", "effect": "NoSchedule"}


class Unhealthy(enum.StrEnum):
    """What a slice does with an Unhealthy device."""

    #: Left out: no scheduler can allocate it, on any cluster.
    WITHDRAW = "withdraw"
    #: Listed with a NoSchedule taint (needs the DRADeviceTaints feature).
    TAINT = "taint"


@dataclass(frozen=True, kw_only=True, slots=True)
class PoolDevice:
    """One device of the pool: its resource, its snapshot entry, and what is known of it."""

    resource: str
    device: Device
    facts: DeviceFacts


@dataclass(frozen=True, kw_only=True)
class Pool:
    """A driver's pool on one node, as ResourceSlices, with the name of each device."""

    driver: str
    name: str
    generation: int
    slices: list[dict[str, Any]]
    #: DRA device name → (resource, device ID), for reading an allocation back.
    devices: dict[str, tuple[str, str]]
    notes: list[str] = field(default_factory=list)

    def content(self) -> list[list[dict[str, Any]]]:
        """The devices of each slice: what a change of generation is decided on."""
        return [s["spec"]["devices"] for s in self.slices]


def slice_name(node: str, driver: str, index: int) -> str:
    """``<node>-<driver>-<index>``, an object name fixed per slice, so a publisher can apply
    and delete by name; a name over 253 characters is shortened with a hash."""
    name = f"{node}-{driver}-{index}"
    if len(name) <= MAX_OBJECT_NAME:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:16]
    return f"{name[: MAX_OBJECT_NAME - 18].rstrip('.-')}-{digest}-{index}"[-MAX_OBJECT_NAME:]


def _device_document(
    entry: PoolDevice, name: str, unhealthy: Unhealthy
) -> tuple[dict[str, Any] | None, list[str]]:
    healthy = entry.device.healthy
    if not healthy and unhealthy is Unhealthy.WITHDRAW:
        return None, []
    attributes, capacity, notes = attributes_and_capacity(entry.facts, entry.resource)
    document: dict[str, Any] = {"name": name}
    if attributes:
        document["attributes"] = attributes
    if capacity:
        document["capacity"] = capacity
    if not healthy:
        document["taints"] = [dict(UNHEALTHY_TAINT)]
    where = f"resource {entry.resource!r}, device {entry.device.id!r}"
    return document, [f"{where}: {note}" for note in notes]


def _chunks(devices: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    limit = MAX_DEVICES_WITH_TAINTS if any("taints" in d for d in devices) else MAX_DEVICES
    return [devices[i : i + limit] for i in range(0, len(devices), limit)] or [[]]


def build_pool(
    driver: str,
    node: str,
    entries: Iterable[PoolDevice],
    previous: Pool | None = None,
    unhealthy: Unhealthy = Unhealthy.WITHDRAW,
) -> Pool:
    """The pool of DRA driver ``driver`` on ``node``: its slices, sorted by device name.

    The generation is ``previous``'s when its devices are the same, else one more (1 for a
    new pool). A pool with no device is one empty slice, so the scheduler learns the pool
    is empty rather than incomplete. Two devices with one name keep the first (noted).
    """
    pool = pool_name(node)
    names: dict[str, tuple[str, str]] = {}
    documents: list[dict[str, Any]] = []
    notes: list[str] = []
    for entry in entries:
        name = device_name(entry.resource, entry.device.id)
        if name in names:
            first = names[name]
            notes.append(
                f"resource {entry.resource!r}, device {entry.device.id!r} has the DRA name "
                f"{name!r} of device {first[1]!r} of {first[0]!r}; left out"
            )
            continue
        names[name] = (entry.resource, entry.device.id)
        document, device_notes = _device_document(entry, name, unhealthy)
        notes.extend(device_notes)
        if document is not None:
            documents.append(document)
    documents.sort(key=lambda d: str(d["name"]))
    chunks = _chunks(documents)
    if previous is None:
        generation = 1
    elif previous.content() == chunks and previous.name == pool:
        generation = previous.generation
    else:
        generation = previous.generation + 1
    slices = [
        {
            "apiVersion": API_VERSION,
            "kind": "ResourceSlice",
            "metadata": {"name": slice_name(node, driver, index)},
            "spec": {
                "driver": driver,
                "pool": {
                    "name": pool,
                    "generation": generation,
                    "resourceSliceCount": len(chunks),
                },
                "nodeName": node,
                "devices": chunk,
            },
        }
        for index, chunk in enumerate(chunks)
    ]
    return Pool(
        driver=driver, name=pool, generation=generation, slices=slices, devices=names, notes=notes
    )
