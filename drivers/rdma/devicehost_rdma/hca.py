"""What the driver knows about one HCA: plain values read from sysfs, nothing live.

An *HCA* here is one RDMA device of ``/sys/class/infiniband`` (``mlx5_0``): a physical
function, or an SR-IOV virtual function with its own RDMA device. Every value is a
snapshot; discovery builds new ones on each call, so a port going down or an HCA
vanishing shows in the next snapshot and nothing has to be invalidated.

An HCA can also be *away*: in the kernel's exclusive RDMA namespace mode, RDMA CNI moves
the RDMA device into the pod's network namespace, where the host's sysfs no longer shows
it; only its PCI function stays. Such an HCA is known by its PCI function alone: no
name, no ports, no character devices.
"""

from __future__ import annotations

from dataclasses import dataclass

#: ``ports/<n>/state`` "4: ACTIVE": the port is up at the InfiniBand/RoCE level.
PORT_ACTIVE = 4
#: ``ports/<n>/phys_state`` "5: LinkUp": the physical link is trained.
PHYS_LINK_UP = 5

_STATE_NAMES = {"NOP": 0, "DOWN": 1, "INIT": 2, "ARMED": 3, "ACTIVE": 4, "ACTIVE_DEFER": 5}
_PHYS_STATE_NAMES = {
    "SLEEP": 1,
    "POLLING": 2,
    "DISABLED": 3,
    "PORTCONFIGURATIONTRAINING": 4,
    "LINKUP": 5,
    "LINKERRORRECOVERY": 6,
    "PHY TEST": 7,
}


def parse_state(text: str | None, names: dict[str, int] | None = None) -> int | None:
    """``"4: ACTIVE"`` → 4. Kernels write ``<number>: <name>``; a bare name is accepted too,
    because some out-of-tree drivers write only the name."""
    if not text:
        return None
    number, sep, _ = text.partition(":")
    if sep and number.strip().isdigit():
        return int(number)
    return (names or _STATE_NAMES).get(text.strip().upper())


def parse_phys_state(text: str | None) -> int | None:
    """``"5: LinkUp"`` → 5 (see ``parse_state``)."""
    return parse_state(text, _PHYS_STATE_NAMES)


def link_layer_key(text: str) -> str:
    """``InfiniBand`` → ``infiniband``: the form selectors compare against."""
    return text.strip().lower()


@dataclass(frozen=True, kw_only=True, slots=True)
class Port:
    """One port of an HCA (``ports/<n>``), with its state as the kernel shows it."""

    number: int
    state: str = ""
    phys_state: str = ""
    link_layer: str = ""

    @property
    def up(self) -> bool:
        """ACTIVE and LinkUp: traffic can flow."""
        return (
            parse_state(self.state) == PORT_ACTIVE
            and parse_phys_state(self.phys_state) == PHYS_LINK_UP
        )

    def describe(self) -> str:
        return f"port {self.number} {self.state or '?'} / {self.phys_state or '?'}"


@dataclass(frozen=True, kw_only=True, slots=True)
class Hca:
    """One RDMA device and the PCI function behind it.

    ``pci_path`` holds the directory names from ``/sys/devices`` down to the function's
    parent bridge: its PCIe ancestry, which topology-aware allocation groups by.
    ``char_devices`` are file names under ``/dev/infiniband`` (``uverbs0``, ``umad0``, …).
    ``name`` is empty for an away HCA (its RDMA device is in a pod's namespace).
    """

    name: str
    pci_address: str | None = None
    pci_class: str | None = None
    fw_ver: str | None = None
    away: bool = False
    vendor: str | None = None
    device_id: str | None = None
    driver: str | None = None
    numa_node: int | None = None
    pci_path: tuple[str, ...] = ()
    physfn: str | None = None
    netdevs: tuple[str, ...] = ()
    #: a VF's PF's network interfaces (``<fn>/physfn/net``): on the host whatever
    #: namespace the VF itself is in
    pf_netdevs: tuple[str, ...] = ()
    ports: tuple[Port, ...] = ()
    char_devices: tuple[str, ...] = ()

    @property
    def is_vf(self) -> bool:
        """An SR-IOV virtual function: its PCI function has a ``physfn`` link."""
        return self.physfn is not None

    @property
    def key(self) -> str:
        """The HCA's stable identity: its PCI address, which survives renames (a VF
        re-created comes back as ``mlx5_12`` where it was ``mlx5_4``) and moves between
        network namespaces; the RDMA device name only for a device with no PCI function
        (a software device such as rxe)."""
        return self.pci_address or self.name

    @property
    def label(self) -> str:
        """How notes name the HCA: ``mlx5_0 (0000:18:00.0)``."""
        if self.name and self.pci_address:
            return f"{self.name} ({self.pci_address})"
        return self.name or f"{self.pci_address} (in another network namespace)"

    @property
    def link_layers(self) -> tuple[str, ...]:
        """Of its ports; for an away HCA (no ports readable), from the PCI class code."""
        if self.ports:
            return tuple(dict.fromkeys(link_layer_key(p.link_layer) for p in self.ports))
        return class_link_layers(self.pci_class)


#: PCI class codes (base class 02, network controller) of RDMA functions: 0x0207xx is an
#: InfiniBand controller, 0x0200xx an Ethernet controller (PCI Code and ID Assignment
#: Specification; ConnectX ports set to IB report 0x0207 in ``lspci``).
_CLASS_LINK_LAYERS = {"0207": "infiniband", "0200": "ethernet"}


def class_link_layers(pci_class: str | None) -> tuple[str, ...]:
    """``0x020700`` → ``("infiniband",)``; unknown classes give nothing."""
    if not pci_class:
        return ()
    code = pci_class.lower().removeprefix("0x").rjust(6, "0")[:4]
    layer = _CLASS_LINK_LAYERS.get(code)
    return (layer,) if layer else ()
