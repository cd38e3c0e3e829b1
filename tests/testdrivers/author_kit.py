"""Drivers for the driver-author tests: two that simulate a PCI device at the same
address (each must get a tree of its own), and one that is unavailable at configure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from devicehost import ContainerEdits, Device, DriverUnavailable, ResourceSpec, hookimpl
from devicehost.testing import FakeRoot

ADDRESS = "0000:3b:00.0"


class _PciDriver:
    vendor = ""
    resource = ""

    def __init__(self) -> None:
        self.root = Path("/")

    @hookimpl
    def devicehost_simulate(self, root: Path) -> None:
        FakeRoot(root).pci_device(ADDRESS, vendor=self.vendor, device="0x0001", numa_node=0)

    @hookimpl
    def devicehost_configure(self, root: Path) -> None:
        self.root = root

    @hookimpl
    def devicehost_resources(self) -> Sequence[ResourceSpec]:
        return [ResourceSpec(name=self.resource)]

    @hookimpl
    def devicehost_enumerate(self, resource: str) -> Sequence[Device]:
        vendor = (self.root / f"sys/bus/pci/devices/{ADDRESS}/vendor").read_text().strip()
        if vendor != self.vendor:
            return []
        edits = ContainerEdits(envs={"PCI_VENDOR": vendor})
        return [Device(id=ADDRESS.replace(":", "-"), numa_nodes=(0,), edits=edits)]


class PciAlpha(_PciDriver):
    vendor = "0x10de"
    resource = "alpha.example/pci"


class PciBeta(_PciDriver):
    vendor = "0x1002"
    resource = "beta.example/pci"


class Absent:
    @hookimpl
    def devicehost_configure(self, config: Mapping[str, Any]) -> None:
        raise DriverUnavailable("no widget hardware on this node")


#: A machine a third-party distribution publishes (entry-point group devicehost.nodes).
ROBOT_BOX = "Robot box: a stand-in machine a third-party driver publishes"
