"""What the driver knows of each GPU or MIG device beyond its ID and health, for claims to
select it by (DRA ResourceSlices; the device-plugin face ignores it).

The facts are NVML's, as NVIDIA's own DRA driver publishes them (``productName`` from
``nvmlDeviceGetName``, capacity ``memory`` from ``nvmlDeviceGetMemoryInfo``, the PCI bus
ID and PCIe root of the GPU, the driver version): every MIG device of a GPU shares its
GPU's PCI facts and names its profile; a MIG device's own memory is left unknown here
(the profile's name rounds it).
"""

from __future__ import annotations

from pathlib import Path

from devicehost import DeviceAttributes
from devicehost.sysfs import normalise_pci_address, pcie_root
from devicehost_nvidia.inventory import Unit


class AttributeCache:
    """Each unit's attributes, read once per GPU: the PCIe root is a sysfs link to resolve,
    and nothing here changes while the GPU is there."""

    def __init__(self, root: Path, driver_version: str) -> None:
        self.root = root
        self.driver_version = driver_version[:64]
        self._roots: dict[str, str] = {}

    def of(self, unit: Unit) -> DeviceAttributes:
        gpu, mig = unit.gpu, unit.mig
        address = normalise_pci_address(gpu.bus_id)
        if address not in self._roots:
            self._roots[address] = pcie_root(self.root, address) or ""
        return DeviceAttributes(
            product=gpu.name[:64],
            mig_profile="" if mig is None else str(mig.profile)[:64],
            driver_version=self.driver_version,
            pci_address=address,
            pcie_root=self._roots[address],
            memory_bytes=gpu.memory_bytes if mig is None and gpu.memory_bytes > 0 else None,
        )
