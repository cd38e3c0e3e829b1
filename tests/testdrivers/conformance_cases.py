"""Drivers for the conformance battery's own tests: one that keeps the allocate contract,
and one for each way of breaking it a first-time author has hit."""

from __future__ import annotations

from collections.abc import Sequence

from devicehost import (
    ContainerEdits,
    Device,
    DriverUnavailable,
    ResourceSpec,
    UnknownDevice,
    hookimpl,
)

RESOURCE = "conformance.example/widget"
IDS = ("w0", "w1")


class Keeping:
    """Refuses an ID it does not know with UnknownDevice(resource, device_id)."""

    @hookimpl
    def devicehost_resources(self) -> Sequence[ResourceSpec]:
        return [ResourceSpec(name=RESOURCE, joined_envs=("WIDGET",))]

    @hookimpl
    def devicehost_enumerate(self, resource: str) -> Sequence[Device]:
        return [Device(id=i, edits=ContainerEdits(envs={"WIDGET": i})) for i in IDS]

    @hookimpl
    def devicehost_allocate(self, resource: str, device_ids: Sequence[str]) -> ContainerEdits:
        for device_id in device_ids:
            if device_id not in IDS:
                raise UnknownDevice(resource, device_id)
        return ContainerEdits(annotations={"widget.example/token": "t"})


class WrongArguments(Keeping):
    """Calls UnknownDevice with one argument: a TypeError, not the refusal."""

    @hookimpl
    def devicehost_allocate(self, resource: str, device_ids: Sequence[str]) -> ContainerEdits:
        for device_id in device_ids:
            if device_id not in IDS:
                raise UnknownDevice(device_id)  # type: ignore[call-arg]
        return ContainerEdits()


class SwappedFields(Keeping):
    """Names the ID as the resource and the resource as the ID."""

    @hookimpl
    def devicehost_allocate(self, resource: str, device_ids: Sequence[str]) -> ContainerEdits:
        for device_id in device_ids:
            if device_id not in IDS:
                raise UnknownDevice(device_id, resource)
        return ContainerEdits()


class Accepting(Keeping):
    """Answers for any ID, known or not."""

    @hookimpl
    def devicehost_allocate(self, resource: str, device_ids: Sequence[str]) -> ContainerEdits:
        return ContainerEdits()


class UnavailableResources(Keeping):
    """Finds at ``resources`` that this node has no widgets."""

    @hookimpl
    def devicehost_resources(self) -> Sequence[ResourceSpec]:
        raise DriverUnavailable("no widget hardware on this node")


class Vanishing(Keeping):
    """w1 is advertised, but gone by the time it is allocated (unplugged since the scan)."""

    @hookimpl
    def devicehost_allocate(self, resource: str, device_ids: Sequence[str]) -> ContainerEdits:
        if "w1" in device_ids:
            raise UnknownDevice(resource, "w1")
        return ContainerEdits()
