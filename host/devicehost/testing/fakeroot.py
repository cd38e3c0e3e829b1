"""Build fake sysfs and /dev trees under a directory that stands in for the host's ``/``.

Drivers read every hardware path under their ``root``; tests and ``devicehost demo`` give
them a ``FakeRoot`` instead of ``/``. Links are relative, as in real sysfs, so a tree
moved or mounted elsewhere still resolves.
"""

from __future__ import annotations

import os
from pathlib import Path


class FakeRoot:
    """A directory laid out like the parts of ``/`` that drivers read."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)

    def __fspath__(self) -> str:
        return str(self.path)

    def __truediv__(self, rel: str) -> Path:
        return self.at(rel)

    def at(self, rel: str) -> Path:
        """The real path of ``rel`` (``/sys/...`` or ``sys/...``) inside the fake root."""
        return self.path / rel.lstrip("/")

    def write(self, rel: str, text: str = "") -> Path:
        """Write a file (a sysfs attribute ends with a newline, as the kernel writes it)."""
        target = self.at(rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text if text.endswith("\n") or not text else text + "\n")
        return target

    def mkdir(self, rel: str) -> Path:
        target = self.at(rel)
        target.mkdir(parents=True, exist_ok=True)
        return target

    def symlink(self, rel: str, target: str) -> Path:
        """Link ``rel`` to ``target`` (both root-relative), with a relative link text."""
        link = self.at(rel)
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(os.path.relpath(self.at(target), link.parent))
        return link

    def char_device(self, rel: str) -> Path:
        """A stand-in for a device node: an empty file (no mknod, so no root needed)."""
        target = self.at(rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.touch()
        return target

    def remove(self, rel: str) -> None:
        """Remove a file, link or whole subtree (a device unplugged)."""
        target = self.at(rel)
        if target.is_symlink() or target.is_file():
            target.unlink()
        elif target.is_dir():
            for child in sorted(target.rglob("*"), key=lambda p: len(p.parts), reverse=True):
                child.unlink() if child.is_symlink() or not child.is_dir() else child.rmdir()
            target.rmdir()

    def pci_device(
        self,
        address: str,
        *,
        vendor: str,
        device: str,
        numa_node: int = -1,
        driver: str | None = None,
        device_class: str = "0x030000",
        bus: str = "pci0000:00",
    ) -> str:
        """A PCI function: ``/sys/devices/<bus>/<address>`` with its attributes and the
        ``/sys/bus/pci/devices/<address>`` link. Returns the device's root-relative path."""
        rel = f"/sys/devices/{bus}/{address}"
        existing = self.at(f"/sys/bus/pci/devices/{address}")
        if existing.exists():
            ids = [(existing / name).read_text().strip() for name in ("vendor", "device")]
            if ids != [vendor, device]:
                raise ValueError(
                    f"PCI address {address} is already a {ids[0]}:{ids[1]} device "
                    f"in this fake root; choose another address"
                )
        self.write(f"{rel}/vendor", vendor)
        self.write(f"{rel}/device", device)
        self.write(f"{rel}/class", device_class)
        self.write(f"{rel}/numa_node", str(numa_node))
        if driver:
            self.mkdir(f"/sys/bus/pci/drivers/{driver}")
            self.symlink(f"{rel}/driver", f"/sys/bus/pci/drivers/{driver}")
        self.symlink(f"/sys/bus/pci/devices/{address}", rel)
        return rel
