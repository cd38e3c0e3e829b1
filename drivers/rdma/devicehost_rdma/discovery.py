"""Read the node's HCAs from sysfs under ``root``: the driver's only view of the hardware.

Layout read (every path under ``root``)::

    /sys/class/infiniband/<ibdev>/device      → the PCI function (vendor, device, driver,
                                                 numa_node, net/<ifname>, physfn for a VF)
    /sys/class/infiniband/<ibdev>/ports/<n>/  state, phys_state, link_layer
    /sys/class/infiniband_verbs/uverbsN/ibdev → which HCA /dev/infiniband/uverbsN serves
    /sys/class/infiniband_mad/{umadN,issmN}/ibdev (one each per port)
    /sys/class/misc/rdma_cm                   → /dev/infiniband/rdma_cm exists (rdma_ucm)
    /sys/module/ib_core/parameters/netns_mode → Y shared, N exclusive
    /sys/bus/auxiliary/devices/<drv>.rdma.<n> → a PCI function with RDMA enabled, even
                                                 while its RDMA device is in a pod's netns
    /sys/bus/pci/devices/<PF>/virtfnN         → its VFs, RDMA functions as the PF is when
                                                 bound to its driver (kernels without
                                                 the auxiliary bus)

``<ibdev>/device`` is the PCI function itself for mlx5, but the auxiliary device below it
for drivers on the auxiliary bus (irdma: ``0000:2f:00.0/ice.roce.0/infiniband/<ibdev>``);
either way the HCA's PCI function is the nearest PCI-addressed directory.

RDMA needs no vendor library: sysfs is the whole interface, so the "simulated library" is
a fake tree (``simulated.py``) and the same code runs on both. Anything can vanish while
it is read (a hot-unplug, a driver reload): readers return what they found, never raise.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devicehost import natural_key
from devicehost.sysfs import pci_path, read_attr, read_int
from devicehost_rdma.hca import Hca, Port

INFINIBAND_CLASS = "sys/class/infiniband"
VERBS_CLASS = "sys/class/infiniband_verbs"
MAD_CLASS = "sys/class/infiniband_mad"
RDMA_CM_CLASS = "sys/class/misc/rdma_cm"
NETNS_MODE = "sys/module/ib_core/parameters/netns_mode"
AUXILIARY_DEVICES = "sys/bus/auxiliary/devices"
PCI_DEVICES = "sys/bus/pci/devices"
DEV_DIR = "/dev/infiniband"
RDMA_CM = "rdma_cm"

_PCI_ADDRESS = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_CHAR_DEVICE_ORDER = ("uverbs", "umad", "issm")
#: Auxiliary devices through which a NIC driver hands its PCI function to an RDMA driver:
#: mlx5_core creates ``mlx5_core.rdma.<n>`` (bound to ``mlx5_ib.rdma``), ice creates
#: ``ice.roce.<n>`` / ``ice.iwarp.<n>`` (bound to ``irdma``) — the names the kernel's
#: auxiliary bus gives them (``<module>.<suffix>.<id>``).
_RDMA_AUX_DEVICE = re.compile(r"^[a-z0-9_]+\.(rdma|roce|iwarp)\.\d+$")


def _entries(directory: Path) -> list[Path]:
    try:
        return sorted(directory.iterdir(), key=lambda p: natural_key(p.name))
    except OSError:
        return []


def _link_name(path: Path) -> str | None:
    """The last part of a sysfs link's target (``driver`` → ``mlx5_core``), or None.

    For links to a sibling tree (``driver``, ``physfn``) the link text is enough, and much
    cheaper than resolving it; discovery runs on every enumeration and allocation.
    """
    try:
        return os.path.basename(os.readlink(path))
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
    try:
        return sorted(os.listdir(os.path.join(root, INFINIBAND_CLASS)), key=natural_key)
    except OSError:
        return []


def _char_device_key(name: str) -> tuple[int, tuple[object, ...]]:
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
        ports.append(
            Port(
                number=int(entry.name),
                state=read_attr(entry / "state") or "",
                phys_state=read_attr(entry / "phys_state") or "",
                link_layer=read_attr(entry / "link_layer") or "",
            )
        )
    return tuple(ports)


def _ancestry(devices_dir: Path, function_dir: Path) -> tuple[str, ...]:
    """Directory names from /sys/devices down to the parent bridge of ``function_dir``."""
    try:
        return function_dir.relative_to(devices_dir).parts[:-1]
    except ValueError:
        return ()


def _pci_function(device: Path) -> str | None:
    """The PCI address of the function a resolved ``device`` directory is, or sits on."""
    for candidate in (device, device.parent):
        if _PCI_ADDRESS.match(candidate.name):
            return candidate.name
    return None


def _function_fields(root: Path, address: str, devices_dir: Path) -> dict[str, Any] | None:
    """What the PCI function at ``address`` says about itself, or None when it is gone."""
    function_dir = pci_path(root, address)
    if function_dir is None:
        return None
    numa = read_int(function_dir / "numa_node")
    return {
        "pci_address": address,
        "pci_class": read_attr(function_dir / "class"),
        "vendor": hex_id(read_attr(function_dir / "vendor")),
        "device_id": hex_id(read_attr(function_dir / "device")),
        "driver": _link_name(function_dir / "driver"),
        "numa_node": numa if numa is not None and numa >= 0 else None,
        "pci_path": _ancestry(devices_dir, function_dir),
        "physfn": _link_name(function_dir / "physfn"),
        "netdevs": tuple(p.name for p in _entries(function_dir / "net")),
        "pf_netdevs": tuple(p.name for p in _entries(function_dir / "physfn" / "net")),
    }


def read_hca(
    root: Path, name: str, char_devices: dict[str, list[str]], devices_dir: Path | None = None
) -> Hca:
    """One HCA as sysfs shows it now; PCI fields stay None for a non-PCI device (rxe).

    ``devices_dir``: ``<root>/sys/devices`` resolved (passed in to resolve it once).
    """
    ibdir = root / INFINIBAND_CLASS / name
    common: dict[str, Any] = {
        "name": name,
        "fw_ver": read_attr(ibdir / "fw_ver"),
        "ports": _ports(ibdir),
        "char_devices": tuple(char_devices.get(name, ())),
    }
    try:
        address = _pci_function((ibdir / "device").resolve(strict=True))
    except OSError:
        address = None
    devices_dir = devices_dir or (root / "sys/devices").resolve()
    fields = _function_fields(root, address, devices_dir) if address else None
    return Hca(**common, **(fields or {}))


def rdma_functions(root: Path) -> list[str]:
    """PCI addresses of functions whose NIC driver has handed RDMA to a bound RDMA
    driver (an auxiliary ``*.rdma.<n>`` device with a ``driver`` link), whether or not
    their RDMA device is visible in this network namespace.

    This is the sysfs face of what the SR-IOV network device plugin checks through
    devlink's ``enable_rdma`` parameter for the same case (a device assigned to a pod in
    exclusive mode, pkg/devices/rdma.go in k8snetworkplumbingwg/sriov-network-device-plugin).
    """
    found = []
    for entry in _entries(root / AUXILIARY_DEVICES):
        if not _RDMA_AUX_DEVICE.match(entry.name) or not (entry / "driver").exists():
            continue
        try:
            address = _pci_function(entry.resolve(strict=True).parent)
        except OSError:
            continue
        if address:
            found.append(address)
    return list(dict.fromkeys(found))


def vf_functions(root: Path, hcas: Collection[Hca]) -> list[str]:
    """PCI addresses of the SR-IOV VFs (``virtfn*`` links) of each physical function in
    ``hcas`` that are bound to the same NIC driver as that PF: RDMA functions as their PF
    is, whether or not their RDMA device is visible in this namespace.

    The kernel's auxiliary RDMA device (``rdma_functions``) says the same where it exists;
    a kernel without the auxiliary bus (before 5.11, where mlx5_ib binds the PCI function
    itself) shows nothing of a VF whose RDMA device and netdev went into a pod but its
    PCI function, which never leaves the host. Listing from PCI, as the SR-IOV network
    device plugin does, keeps such a VF (in use, not gone) for every selector.
    """
    found = []
    for hca in hcas:
        if hca.physfn or not hca.pci_address or not hca.driver:
            continue
        function_dir = pci_path(root, hca.pci_address)
        if function_dir is None:
            continue
        for link in _entries(function_dir):
            if not link.name.startswith("virtfn"):
                continue
            address = _link_name(link)
            if address and _PCI_ADDRESS.match(address):
                vf_dir = pci_path(root, address)
                if vf_dir is not None and _link_name(vf_dir / "driver") == hca.driver:
                    found.append(address)
    return found


def discover(
    root: Path, only: Collection[str] | None = None, *, include_away: bool = False
) -> list[Hca]:
    """Every HCA on the node now, in natural order of name (away HCAs last, by address).

    ``only``: HCA names and/or PCI addresses to read (others are skipped, which keeps a
    lookup cheap on a large node). ``include_away``: also the PCI functions whose RDMA
    device is in another network namespace (see ``rdma_functions``): pass it only in the
    kernel's exclusive namespace mode, where that is the reason a device is not seen.
    """
    names = ibdev_names(root)
    char_devices = char_device_map(root) if names else {}
    devices_dir = (root / "sys/devices").resolve()
    hcas = [read_hca(root, name, char_devices, devices_dir) for name in names]
    if include_away:
        seen = {hca.pci_address for hca in hcas}
        for address in [*rdma_functions(root), *vf_functions(root, list(hcas))]:
            if address in seen:
                continue
            seen.add(address)
            fields = _function_fields(root, address, devices_dir)
            if fields is not None:
                hcas.append(Hca(name="", away=True, **fields))
    if only is not None:
        hcas = [hca for hca in hcas if hca.name in only or hca.key in only]
    return hcas


@dataclass(frozen=True, slots=True)
class DevNodes:
    """Which ``/dev/infiniband`` nodes can be handed to a container.

    When ``<root>/dev/infiniband`` is visible, only nodes that exist there: a container
    given a missing node fails to start, so leaving it out is the lesser harm (and a
    start-up note says so). When it is not visible (the host's /dev not mounted), every
    node sysfs names is trusted.
    """

    visible: frozenset[str] | None
    rdma_cm_loaded: bool

    def present(self, name: str) -> bool:
        return self.visible is None or name in self.visible

    @property
    def rdma_cm(self) -> bool:
        """True when the shared rdma_cm node exists and can be given."""
        return self.rdma_cm_loaded and self.present(RDMA_CM)


def dev_nodes(root: Path) -> DevNodes:
    """What ``/dev/infiniband`` under ``root`` holds now."""
    try:
        visible: frozenset[str] | None = frozenset(os.listdir(root / DEV_DIR.lstrip("/")))
    except OSError:
        visible = None
    loaded = (root / RDMA_CM_CLASS).exists() or (visible is not None and RDMA_CM in visible)
    return DevNodes(visible=visible, rdma_cm_loaded=loaded)


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
