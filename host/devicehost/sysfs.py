"""Small sysfs readers for drivers: part of devicehost's public API (``__all__``).

``read_attr`` and ``read_int`` take the full path of one attribute (already joined to the
driver's ``root``); ``pci_numa_node``, ``pci_path`` and ``pcie_root`` take the host's
``/`` as ``root`` and a PCI address in either spelling, so they work on a fake tree.
Missing or unreadable attributes give ``None``: hardware vanishes, and a reader must not
crash.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = [
    "normalise_pci_address",
    "pci_numa_node",
    "pci_path",
    "pcie_root",
    "read_attr",
    "read_int",
]

StrPath = str | os.PathLike[str]


def read_attr(path: StrPath) -> str | None:
    """The stripped text of a sysfs attribute, or None when absent or unreadable.

    Read with bare system calls: watches poll these files every second, and
    ``Path.read_text`` (a buffered text stream per file) cost 2.5 times as much
    (docs/performance.md)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        chunks = []
        while chunk := os.read(fd, 4096):
            chunks.append(chunk)
        return b"".join(chunks).decode().strip()
    except (OSError, UnicodeDecodeError):
        return None
    finally:
        os.close(fd)


def read_int(path: StrPath, base: int = 10) -> int | None:
    """An integer attribute (``base=16`` for ``0x15b3``-style IDs), or None."""
    text = read_attr(path)
    if text is None:
        return None
    try:
        return int(text, base)
    except ValueError:
        return None


def normalise_pci_address(address: str) -> str:
    """``00000000:3B:00.0`` (NVML style) → ``0000:3b:00.0`` (sysfs style)."""
    domain, _, rest = address.lower().rpartition(":")
    domain, _, bus = domain.rpartition(":") if domain.count(":") else ("", "", domain)
    domain = (domain or "0")[-4:].rjust(4, "0")
    return f"{domain}:{bus}:{rest}"


def pci_numa_node(root: Path, address: str) -> int | None:
    """The NUMA node of a PCI function, or None when unknown (-1 in sysfs, or absent)."""
    node = read_int(root / "sys/bus/pci/devices" / normalise_pci_address(address) / "numa_node")
    return node if node is not None and node >= 0 else None


def pci_path(root: Path, address: str) -> Path | None:
    """The resolved ``/sys/devices/...`` directory of a PCI function (it shows the PCIe
    switches above the device as parent directories), or None when absent."""
    link = root / "sys/bus/pci/devices" / normalise_pci_address(address)
    try:
        return link.resolve(strict=True)
    except OSError:
        return None


def pcie_root(root: Path, address: str) -> str | None:
    """The PCIe root complex a PCI function sits under, ``pci<domain>:<bus>`` (the first
    directory under ``/sys/devices`` its ``/sys/bus/pci/devices`` link resolves to, as
    k8s.io/dynamic-resource-allocation's ``deviceattribute`` reads it); None when unknown."""
    address = normalise_pci_address(address)
    resolved = pci_path(root, address)
    if resolved is None or resolved.name != address:
        return None
    try:
        parts = resolved.relative_to((root / "sys/devices").resolve()).parts
    except ValueError:
        return None
    return parts[0] if parts and parts[0].startswith("pci") else None
