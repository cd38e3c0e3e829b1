"""Read the node's HCAs from sysfs under ``root``: the driver's only view of the hardware.

Layout read (every path under ``root``)::

    /sys/class/infiniband/<ibdev>/device      → the PCI function (vendor, device, driver,
                                                 numa_node, net/<ifname>, physfn for a VF)
    /sys/class/infiniband/<ibdev>/ports/<n>/  state, phys_state, link_layer
    /sys/class/infiniband_verbs/uverbsN/ibdev → which HCA /dev/infiniband/uverbsN serves
    /sys/class/infiniband_mad/{umadN,issmN}/ibdev (one each per port)
    /sys/class/misc/rdma_cm                   → /dev/infiniband/rdma_cm exists (rdma_ucm)
    /sys/module/ib_core/parameters/netns_mode → Y shared, N exclusive

RDMA needs no vendor library: sysfs is the whole interface, so the "simulated library" is
a fake tree (``simulated.py``) and the same code runs on both. Anything can vanish while
it is read (a hot-unplug, a driver reload): readers return what they found, never raise.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from devicehost.sysfs import pci_numa_node, pci_path, read_attr
from devicehost_rdma.hca import Hca, Port
from devicehost_rdma.naming import natural_key

INFINIBAND_CLASS = "sys/class/infiniband"
VERBS_CLASS = "sys/class/infiniband_verbs"
MAD_CLASS = "sys/class/infiniband_mad"
RDMA_CM_CLASS = "sys/class/misc/rdma_cm"
NETNS_MODE = "sys/module/ib_core/parameters/netns_mode"
DEV_DIR = "/dev/infiniband"
RDMA_CM = "rdma_cm"

_PCI_ADDRESS = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_CHAR_DEVICE_ORDER = ("uverbs", "umad", "issm")


def _entries(directory: Path) -> list[Path]:
    try:
        return sorted(directory.iterdir(), key=lambda p: natural_key(p.name))
    except OSError:
        return []


def _link_name(path: Path) -> str | None:
    """The name of the directory a sysfs link points to (``driver`` → ``mlx5_core``)."""
    try:
        return path.resolve(strict=True).name if path.is_symlink() else None
    except OSError:
        return None


def hex_id(text: str | None) -> str | None:
    """``0x15B3`` or ``15b3`` → ``15b3``: one spelling for vendor and device IDs."""
    if not text:
        return None
    value = text.strip().lower().removeprefix("0x")
    return value.rjust(4, "0") if value and all(c in "0123456789abcdef" for c in value) else None


def ibdev_names(root: Path) -> list[str]:
    """The RDMA devices the kernel lists, in natural order (``mlx5_2`` before ``mlx5_10``)."""
    return [p.name for p in _entries(root / INFINIBAND_CLASS)]


def _char_device_key(name: str) -> tuple[int, tuple[tuple[int, int | str], ...]]:
    prefix = name.rstrip("0123456789")
    rank = _CHAR_DEVICE_ORDER.index(prefix) if prefix in _CHAR_DEVICE_ORDER else 99
    return rank, natural_key(name)


def char_device_map(root: Path) -> dict[str, list[str]]:
    """HCA name → its character devices under /dev/infiniband: uverbs, then umad, then
    issm (one of each per port).

    Entries without an ``ibdev`` attribute (the classes' ``abi_version`` files) are
    skipped.
    """
    found: dict[str, list[str]] = {}
    for cls in (VERBS_CLASS, MAD_CLASS):
        for entry in _entries(root / cls):
            ibdev = read_attr(entry / "ibdev")
            if ibdev:
                found.setdefault(ibdev, []).append(entry.name)
    return {ibdev: sorted(names, key=_char_device_key) for ibdev, names in found.items()}


def _ports(ibdir: Path) -> tuple[Port, ...]:
    ports = []
    for entry in _entries(ibdir / "ports"):
        if not entry.name.isdigit():
            continue
        ports.append(Port(number=int(entry.name),
                          state=read_attr(entry / "state") or "",
                          phys_state=read_attr(entry / "phys_state") or "",
                          link_layer=read_attr(entry / "link_layer") or ""))
    return tuple(ports)


def _ancestry(root: Path, device_dir: Path) -> tuple[str, ...]:
    """Directory names from /sys/devices to the parent bridge of ``device_dir``."""
    try:
        rel = device_dir.relative_to((root / "sys/devices").resolve())
    except ValueError:
        return ()
    return rel.parts[:-1]


def read_hca(root: Path, name: str, char_devices: dict[str, list[str]]) -> Hca:
    """One HCA as sysfs shows it now; PCI fields stay None for a non-PCI device (rxe)."""
    ibdir = root / INFINIBAND_CLASS / name
    try:
        function_dir: Path | None = (ibdir / "device").resolve(strict=True)
    except OSError:
        function_dir = None
    address = function_dir.name if function_dir else None
    if function_dir is None or address is None or not _PCI_ADDRESS.match(address):
        return Hca(name=name, ports=_ports(ibdir),
                   char_devices=tuple(char_devices.get(name, ())))
    resolved = pci_path(root, address) or function_dir
    numa = pci_numa_node(root, address)
    if numa is None:
        text = read_attr(function_dir / "numa_node")
        numa = int(text) if text and text.isdigit() else None
    return Hca(
        name=name,
        pci_address=address,
        vendor=hex_id(read_attr(function_dir / "vendor")),
        device_id=hex_id(read_attr(function_dir / "device")),
        driver=_link_name(function_dir / "driver"),
        numa_node=numa,
        pci_path=_ancestry(root, resolved),
        physfn=_link_name(function_dir / "physfn"),
        netdevs=tuple(p.name for p in _entries(function_dir / "net")),
        ports=_ports(ibdir),
        char_devices=tuple(char_devices.get(name, ())),
    )


def discover(root: Path) -> list[Hca]:
    """Every HCA on the node now, in natural name order."""
    char_devices = char_device_map(root)
    return [read_hca(root, name, char_devices) for name in ibdev_names(root)]


def rdma_cm_present(root: Path) -> bool:
    """True when the shared ``/dev/infiniband/rdma_cm`` exists (``rdma_ucm`` loaded)."""
    return (root / RDMA_CM_CLASS).exists() or (root / DEV_DIR.lstrip("/") / RDMA_CM).exists()


def netns_mode(root: Path) -> str | None:
    """The kernel's RDMA namespace mode: ``shared``, ``exclusive``, or None when unknown.

    Kernels before 5.2 have no such parameter and behave as shared.
    """
    value = read_attr(root / NETNS_MODE)
    if value is None:
        return None
    if value.upper() in ("Y", "1"):
        return "shared"
    if value.upper() in ("N", "0"):
        return "exclusive"
    return None


def dev_node_exists(root: Path, name: str) -> bool:
    """True when ``/dev/infiniband/<name>`` exists under ``root``."""
    return os.path.lexists(root / DEV_DIR.lstrip("/") / name)
