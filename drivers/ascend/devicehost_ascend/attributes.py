"""What the driver knows of each NPU beyond its ID and health, for claims to select it by
(DRA ResourceSlices; the device-plugin face ignores it).

From DCMI and Huawei's install files: the chip's name (``dcmi_get_device_chip_info``:
chip type ``Ascend``, chip name ``910B3``), its memory (``dcmi_get_device_memory_info``,
MiB), the HCCS ring the chip sits in (rings of four on the Atlas 800 9000, per Huawei's
scheduler; ``topology.py``), and the driver's ``version.info``. A vNPU shares its chip's
facts but not its memory (a slice of it); without DCMI (the ``/dev`` fallback) nothing
but the driver version is known.
"""

from __future__ import annotations

from pathlib import Path

from devicehost import DeviceAttributes
from devicehost_ascend.inventory import Inventory, NpuDevice
from devicehost_ascend.labels import DRIVER_VERSION_FILE, read_version


class AttributeReader:
    """Each device's attributes from the inventory; the driver version read once."""

    def __init__(self, root: Path, ring_size: int) -> None:
        self.driver_version = read_version(root, DRIVER_VERSION_FILE)[:64]
        self.ring_size = ring_size

    def of(self, device: NpuDevice, found: Inventory) -> DeviceAttributes:
        phys = device.phys_id
        name = found.chip_names.get(phys, "") if phys is not None else ""
        memory = found.memory_mib.get(phys) if phys is not None and not device.virtual else None
        ring = ""
        if self.ring_size and phys is not None and name:
            ring = f"hccs-ring-{phys // self.ring_size}"
        return DeviceAttributes(
            product=f"Ascend {name}"[:64] if name else "",
            chip_type=name[:64],
            interconnect_group=ring,
            driver_version=self.driver_version,
            memory_bytes=memory * 1024 * 1024 if memory else None,
        )
