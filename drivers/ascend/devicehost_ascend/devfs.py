"""Find NPUs without DCMI: the ``/dev/davinciN`` and ``/dev/vdavinciN`` nodes under root.

The fallback when ``libdcmi.so`` is missing or unusable. The nodes say which chips exist
(N is the physical ID) but not what they are, so the chip family comes from
``fallbackChipType``, NUMA nodes from ``fallbackNumaNodes`` and vNPU sizes from
``fallbackVnpuCores``. Health is the node's presence: a chip whose node vanished is gone.
"""

from __future__ import annotations

import re
from pathlib import Path

from devicehost_ascend.config import AscendConfig
from devicehost_ascend.inventory import Inventory, chip_device, vnpu_device

_CHIP_NODE = re.compile(r"^davinci(\d+)$")
_VNPU_NODE = re.compile(r"^vdavinci(\d+)$")


def _numbered(root: Path, pattern: re.Pattern[str]) -> list[int]:
    try:
        names = [p.name for p in (root / "dev").iterdir()]
    except OSError:
        return []
    return sorted(int(m[1]) for m in map(pattern.match, names) if m)


def chip_nodes(root: Path) -> list[int]:
    """Physical IDs of the ``/dev/davinciN`` nodes under root."""
    return _numbered(root, _CHIP_NODE)


def vnpu_nodes(root: Path) -> list[int]:
    """vNPU IDs of the ``/dev/vdavinciN`` nodes under root."""
    return _numbered(root, _VNPU_NODE)


def _vnpu_cores(config: AscendConfig, vdev_id: int) -> int | None:
    cores = config.fallback_vnpu_cores
    if cores is None or isinstance(cores, int):
        return cores
    return cores.get(vdev_id)


def discover(root: Path, config: AscendConfig) -> Inventory:
    """Devices from the nodes under root, typed ``config.fallback_chip_type``."""
    family = config.fallback_chip_type
    inventory = Inventory()
    for phys_id in chip_nodes(root):
        numa = config.fallback_numa_nodes.get(phys_id)
        inventory.add(chip_device(family, phys_id, None, () if numa is None else (numa,)))
    skipped = []
    for vdev_id in vnpu_nodes(root):
        cores = _vnpu_cores(config, vdev_id)
        if cores is None:
            skipped.append(f"vdavinci{vdev_id}")
            continue
        inventory.add(vnpu_device(family, f"{cores}c", vdev_id, None, None, ()))
    if skipped:
        inventory.notes.append(
            f"vNPU nodes {', '.join(skipped)} are not served: without DCMI "
            "their size is unknown; set fallbackVnpuCores"
        )
    return inventory.sort()
