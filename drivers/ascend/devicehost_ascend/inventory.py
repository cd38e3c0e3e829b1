"""What NPUs this node has, as schedulable devices grouped by resource, found through DCMI.

A whole chip is ``huawei.com/<family>`` with ID ``<family>-<physical ID>`` (the field's
convention, e.g. ``Ascend910-3``). A pre-created vNPU is its own resource,
``huawei.com/<family>-<cores>c`` with ID ``<family>-<cores>c-<vNPU ID>-<physical ID>``;
a chip split into vNPUs is served only through them, so no core is handed out twice.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from devicehost.sysfs import pci_numa_node
from devicehost_ascend.dcmi import Dcmi, DcmiError, VirtualDevice

log = logging.getLogger(__name__)

DOMAIN = "huawei.com"

# chip_name prefixes, most specific first: 310P3 is a 310P, 910A / 910B3 are 910s.
_FAMILY_PREFIXES = (
    ("310P", "Ascend310P"),
    ("310B", "Ascend310B"),
    ("310", "Ascend310"),
    ("910", "Ascend910"),
)
_TEMPLATE = re.compile(r"^vir(\d+)(?:_(\d+)c)?(?:_([a-z0-9]+))?$")


def chip_family(chip_name: str) -> str | None:
    """``910A`` → ``Ascend910``, ``310P3`` → ``Ascend310P``; None for a chip we don't know."""
    name = chip_name.strip().upper().removeprefix("ASCEND")
    return next((family for prefix, family in _FAMILY_PREFIXES if name.startswith(prefix)), None)


def vnpu_kind(template: str, aicore: float) -> str:
    """The resource suffix of a vNPU: ``vir04`` → ``4c``, ``vir04_3c_ndvpp`` →
    ``4c.3cpu.ndvpp``; from the AI-core count when the template name is unknown."""
    match = _TEMPLATE.match(template.strip().lower())
    if match is None:
        return f"{round(aicore)}c"
    parts = [f"{int(match[1])}c"]
    if match[2]:
        parts.append(f"{int(match[2])}cpu")
    if match[3]:
        parts.append(match[3])
    return ".".join(parts)


@dataclass(frozen=True, kw_only=True, slots=True)
class ChipRef:
    """How DCMI addresses a chip: its card and its index on that card."""

    card: int
    chip: int


@dataclass(frozen=True, kw_only=True, slots=True)
class NpuDevice:
    """One schedulable unit: a whole chip or a vNPU."""

    id: str
    resource: str
    family: str
    #: What ``ASCEND_VISIBLE_DEVICES`` carries: the physical ID, or the vNPU ID.
    visible_id: int
    host_node: str
    container_node: str
    virtual: bool
    #: The chip's physical ID (the parent's, for a vNPU); None when unknown.
    phys_id: int | None
    #: How DCMI reaches the chip (the parent, for a vNPU); None without DCMI.
    chip: ChipRef | None
    numa_nodes: tuple[int, ...] = ()


@dataclass
class Inventory:
    """Devices per resource name, in a stable order, and notes on what was left out."""

    devices: dict[str, list[NpuDevice]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: Physical ID → DCMI chip name (``910A``, ``910B3``, ``310P3``) of every chip found,
    #: split ones included; empty without DCMI.
    chip_names: dict[int, str] = field(default_factory=dict)
    #: Physical ID → the chip's memory in MiB, where DCMI reports it.
    memory_mib: dict[int, int] = field(default_factory=dict)

    def add(self, device: NpuDevice) -> None:
        self.devices.setdefault(device.resource, []).append(device)

    def find(self, resource: str, device_id: str) -> NpuDevice | None:
        return next((d for d in self.devices.get(resource, ()) if d.id == device_id), None)

    def all(self) -> list[NpuDevice]:
        return [d for devices in self.devices.values() for d in devices]

    def sort(self) -> Inventory:
        for devices in self.devices.values():
            devices.sort(key=lambda d: (d.visible_id, d.id))
        self.devices = dict(sorted(self.devices.items()))
        return self


def chip_device(
    family: str, phys_id: int, chip: ChipRef | None, numa_nodes: tuple[int, ...]
) -> NpuDevice:
    node = f"/dev/davinci{phys_id}"
    return NpuDevice(
        id=f"{family}-{phys_id}",
        resource=f"{DOMAIN}/{family}",
        family=family,
        visible_id=phys_id,
        host_node=node,
        container_node=node,
        virtual=False,
        phys_id=phys_id,
        chip=chip,
        numa_nodes=numa_nodes,
    )


def vnpu_device(
    family: str,
    kind: str,
    vdev_id: int,
    phys_id: int | None,
    chip: ChipRef | None,
    numa_nodes: tuple[int, ...],
) -> NpuDevice:
    """A vNPU: its host node ``/dev/vdavinciN`` is ``/dev/davinciN`` in the container."""
    suffix = f"-{phys_id}" if phys_id is not None else ""
    return NpuDevice(
        id=f"{family}-{kind}-{vdev_id}{suffix}",
        resource=f"{DOMAIN}/{family}-{kind}",
        family=family,
        visible_id=vdev_id,
        host_node=f"/dev/vdavinci{vdev_id}",
        container_node=f"/dev/davinci{vdev_id}",
        virtual=True,
        phys_id=phys_id,
        chip=chip,
        numa_nodes=numa_nodes,
    )


def _numa_nodes(dcmi: Dcmi, ref: ChipRef, root: Path) -> tuple[int, ...]:
    try:
        address = dcmi.pci_address(ref.card, ref.chip)
    except DcmiError as exc:
        log.warning("card %d chip %d: no PCI address, so no NUMA node: %s", ref.card, ref.chip, exc)
        return ()
    node = pci_numa_node(root, address)
    return () if node is None else (node,)


def _memory(dcmi: Dcmi, ref: ChipRef, family: str) -> int:
    try:
        return dcmi.memory_mib(ref.card, ref.chip, hbm=family == "Ascend910")
    except DcmiError as exc:  # labels only: a missing figure costs nothing else
        log.debug("card %d chip %d: no memory size: %s", ref.card, ref.chip, exc)
        return 0


def _virtual_devices(dcmi: Dcmi, ref: ChipRef) -> list[VirtualDevice]:
    try:
        return dcmi.virtual_devices(ref.card, ref.chip)
    except DcmiError as exc:  # chips without virtualisation answer "not supported"
        log.debug("card %d chip %d: no vNPU information: %s", ref.card, ref.chip, exc)
        return []


def _chip_refs(dcmi: Dcmi, inventory: Inventory) -> Iterable[ChipRef]:
    for card in dcmi.card_ids():
        try:
            count = dcmi.chip_count(card)
        except DcmiError as exc:
            inventory.notes.append(f"card {card} skipped: {exc}")
            continue
        for chip in range(count):
            yield ChipRef(card=card, chip=chip)


def discover(dcmi: Dcmi, root: Path) -> Inventory:
    """Every chip and vNPU DCMI reports, with NUMA nodes from the chips' PCI devices."""
    inventory = Inventory()
    for ref in _chip_refs(dcmi, inventory):
        where = f"card {ref.card} chip {ref.chip}"
        try:
            phys_id = dcmi.physical_id(dcmi.logic_id(ref.card, ref.chip))
            name = dcmi.chip_name(ref.card, ref.chip)
        except DcmiError as exc:
            inventory.notes.append(f"{where} skipped: {exc}")
            continue
        family = chip_family(name)
        if family is None:
            inventory.notes.append(
                f"{where} skipped: chip name {name!r} is not a known Ascend chip"
            )
            continue
        inventory.chip_names[phys_id] = name
        memory = _memory(dcmi, ref, family)
        if memory:
            inventory.memory_mib[phys_id] = memory
        numa = _numa_nodes(dcmi, ref, root)
        vnpus = _virtual_devices(dcmi, ref)
        if not vnpus:
            inventory.add(chip_device(family, phys_id, ref, numa))
            continue
        kinds = []
        for vnpu in vnpus:
            kind = vnpu_kind(vnpu.template, vnpu.aicore)
            kinds.append(kind)
            inventory.add(vnpu_device(family, kind, vnpu.vdev_id, phys_id, ref, numa))
        inventory.notes.append(
            f"{family}-{phys_id} is split into vNPUs ({', '.join(kinds)}); "
            "it is served only through them"
        )
    return inventory.sort()
