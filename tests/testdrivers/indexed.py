"""A QAT-style driver: each container gets one numbered variable per device, in the order
it asked for them, declared with ``ResourceSpec.indexed_envs`` and no ``allocate`` hook.

Intel's QAT device plugin gives a container ``QAT0``, ``QAT1``, … naming the VFs it got
(cmd/qat_plugin/dpdkdrv/dpdkdrv.go, ``PostAllocate``); every VF also brings its VFIO group's
node and the shared ``/dev/vfio/vfio``.

Resource ``test.example/qat``: four VFs ``vf-0`` … ``vf-3`` at ``0000:3d:01.<n>``, each in
IOMMU group ``10<n>``. ``AllocatingQat`` also answers ``allocate`` with ``QAT_EXTRA``
(config ``extraEnv``: a mapping merged into the answer as given).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from devicehost import Allocation, ContainerEdits, Device, DeviceNode, ResourceSpec, hookimpl

RESOURCE = "test.example/qat"
VFIO = DeviceNode(host_path="/dev/vfio/vfio")


def address(index: int) -> str:
    return f"0000:3d:01.{index}"


class Qat:
    @hookimpl
    def devicehost_resources(self) -> Sequence[ResourceSpec]:
        return [
            ResourceSpec(
                name=RESOURCE, edits=ContainerEdits(devices=(VFIO,)), indexed_envs=("QAT",)
            )
        ]

    @hookimpl
    def devicehost_enumerate(self, resource: str) -> Sequence[Device]:
        return [
            Device(
                id=f"vf-{n}",
                edits=ContainerEdits(
                    envs={"QAT": address(n)},
                    devices=(DeviceNode(host_path=f"/dev/vfio/10{n}"),),
                ),
            )
            for n in range(4)
        ]


class AllocatingQat(Qat):
    def __init__(self) -> None:
        self.extra: dict[str, str] = {}

    @hookimpl
    def devicehost_configure(self, config: Mapping[str, Any]) -> None:
        self.extra = dict(config.get("extraEnv", {}))

    @hookimpl
    def devicehost_allocate(self, resource: str, device_ids: Sequence[str]) -> Allocation:
        return Allocation(envs=self.extra)
