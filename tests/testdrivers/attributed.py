"""A driver with two devices: one whose attributes keep the rules, one whose product name
is longer than a ResourceSlice allows (the host keeps the device, without attributes)."""

from __future__ import annotations

from collections.abc import Sequence

from devicehost import Device, DeviceAttributes, ResourceSpec, hookimpl


class Attributed:
    @hookimpl
    def devicehost_resources(self) -> Sequence[ResourceSpec]:
        return [ResourceSpec(name="example.com/attr")]

    @hookimpl
    def devicehost_enumerate(self, resource: str) -> Sequence[Device]:
        return [
            Device(id="good", attributes=DeviceAttributes(product="Widget")),
            Device(id="bad", attributes=DeviceAttributes(product="x" * 65)),
        ]
