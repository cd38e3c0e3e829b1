"""A simulated DCMI library, and the fake ``/dev`` and sysfs tree that goes with it.

It answers the ``Dcmi`` interface the way ``libdcmi.so`` does (cards, chips per card,
logical and physical IDs, chip names, PCI addresses, health and error codes, vNPUs, one
fault subscription per process), and it can be told what real hardware would do: a chip
faults (health 3 plus an error code, and a pushed event) or recovers. ``devicehost demo``,
``devicehost run --simulate`` and the tests use it; the driver above the interface cannot
tell it from the real library.

Published machines (the host's ``--node``), each modelled on the document named beside it
in ``published_cards``: ``atlas-800-9000``, ``atlas-800t-a2``, ``atlas-800-3000``.

Presets (``simulatedNode``, used when the host names no machine):

- ``ascend910x8``: an 8-chip Ascend 910 training server as 8 cards x 1 chip, physical IDs
  0-7, NUMA node 0 for 0-3 and 1 for 4-7 (two HCCS rings).
- ``ascend910x8-vnpu``: the same, with chip 6 split into 2 x ``vir08`` and chip 7 into
  4 x ``vir04`` vNPUs (IDs ``100 + 16 x physical ID + n``).
- ``ascend310px4``: 2 Ascend 310P cards x 2 chips, NUMA 0 for card 0 and 1 for card 1.
- ``mixed``: 4 Ascend 910 cards (IDs 0-3, NUMA 0) and 2 Ascend 310P cards x 2 chips
  (IDs 4-7, NUMA 1).

Faults use real codes of Huawei's fault table (``fault_table``), each with the DCMI health
level and event severity its class goes with; which code means what on the chip is in
Huawei's fault-code manual, not here: the simulation copies only the codes' classes.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from devicehost.testing.fakeroot import FakeRoot
from devicehost_ascend.dcmi import (
    ASSERTION_RAISED,
    ASSERTION_RECOVERED,
    HEALTH_OK,
    DcmiError,
    FaultCallback,
    FaultEvent,
    VirtualDevice,
)

HUAWEI_PCI_VENDOR = "0x19e5"
# PCI device IDs as the kernel's pci.ids lists Huawei's Ascend parts (910: d801, 910B:
# d802, 310P: d500, 310: d100).
PCI_DEVICE_IDS = {"910B": "0xd802", "910": "0xd801", "310P": "0xd500", "310": "0xd100"}
#: A simulated fault's default: a real code the shipped table classes RestartBusiness
#: (the chip is taken out), raised as a major alarm.
SIMULATED_FAULT_CODE = 0x80E01801
#: A real code the shipped table classes NotHandleFault: an alarm that keeps the chip.
SIMULATED_ALARM_CODE = 0x80E21007
#: DCMI health levels and event severities (0 ok/suggestion, 1 minor, 2 major, 3 critical).
MINOR, MAJOR, CRITICAL = 1, 2, 3
SHARED_NODES = ("/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc")
DRIVER_DIRS = (
    "/usr/local/Ascend/driver/lib64",
    "/usr/local/Ascend/driver/include",
    "/usr/local/dcmi",
)
DRIVER_FILES = {
    "/usr/local/bin/npu-smi": "#!/bin/sh\necho simulated npu-smi\n",
    "/etc/ascend_install.info": (
        "UserName=HwHiAiUser\nUserGroup=HwHiAiUser\n"
        "Driver_Install_Type=full\nDriver_Install_Path_Param=/usr/local/Ascend\n"
    ),
}
#: The driver and firmware packages' version files (``Version=`` lines, as installed).
DRIVER_VERSION_FILE = "/usr/local/Ascend/driver/version.info"
FIRMWARE_VERSION_FILE = "/usr/local/Ascend/firmware/version.info"
SIMULATED_DRIVER_VERSION = "24.1.rc2"
SIMULATED_FIRMWARE_VERSION = "7.5.0.1.129"

#: The card-drop code the reference plugin records for a not-ready chip.
CARD_DROP_EVENT = 0x40F84E00

ERR_OPER_NOT_PERMITTED = -8002
ERR_INVALID_DEVICE_ID = -8007
ERR_DEVICE_NOT_EXIST = -8008
ERR_DEVICE_NOT_READY = -8012
ERR_NOT_SUPPORT = -8255


@dataclass(kw_only=True)
class SimChip:
    """One simulated NPU chip and its current state."""

    phys_id: int
    name: str
    pci_address: str
    numa_node: int
    vnpus: list[VirtualDevice] = field(default_factory=list)
    #: False: the chip is unknown to DCMI; every per-chip DCMI call fails (-8008).
    present: bool = True
    #: True: the card dropped off the bus: health and error codes answer -8012 (not ready).
    dropped: bool = False
    memory_mib: int = 32768
    health: int = HEALTH_OK
    errors: list[int] = field(default_factory=list)
    #: False: the chip answers "not supported" to vNPU queries (no virtualisation).
    virtualisation: bool = True

    @property
    def pci_device_id(self) -> str:
        name = self.name.upper()
        if re.match(r"^910B\d", name):
            return PCI_DEVICE_IDS["910B"]
        key = next((k for k in ("310P", "910", "310") if name.startswith(k)), "910")
        return PCI_DEVICE_IDS[key]


def _pci(slot: int) -> tuple[str, int]:
    """Address and NUMA node of chip slot ``slot``: 0-3 on the first socket, 4-7 on the
    second."""
    socket = slot // 4
    return f"0000:{0x80 * socket + 1 + slot % 4:02x}:00.0", socket


def _root_bus(numa_node: int) -> str:
    return f"pci0000:{0x80 * numa_node:02x}"


def _chip(
    phys_id: int,
    name: str,
    slot: int,
    vnpus: Sequence[VirtualDevice] = (),
    memory_mib: int = 32768,
) -> SimChip:
    address, numa = _pci(slot)
    return SimChip(
        phys_id=phys_id,
        name=name,
        pci_address=address,
        numa_node=numa,
        vnpus=list(vnpus),
        memory_mib=memory_mib,
    )


#: The published machines this simulation builds (``devicehost run --simulate --node``).
PUBLISHED_NODES = ("atlas-800-9000", "atlas-800t-a2", "atlas-800-3000")


def published_cards(node: str) -> list[list[SimChip]] | None:
    """The cards of the published machine ``node``; None for a machine without Ascend NPUs.

    Where a source does not publish a detail, the choice is named as an assumption.
    """
    if node == "atlas-800-9000":
        # Atlas 800 training server (model 9000): eight Ascend 910 on two NPU boards of
        # four, npu-smi IDs 0-3 and 4-7 (Huawei, "Atlas 800 Training Server (Model 9000)
        # User Guide", EDOC1100141951, "NPU Board Components"), each board one HCCS ring
        # (Ascend ascend-for-volcano, docs/design/affinity910-design.md). 32 GB HBM per
        # chip. Each chip is its own DCMI card. Assumption (not in those documents): board
        # 1 hangs off NUMA node 0 and board 2 off NUMA node 1.
        return [[_chip(i, "910A", i)] for i in range(8)]
    if node == "atlas-800t-a2":
        # Atlas 800T A2: eight Ascend 910B (chip name 910B3, 64 GB HBM) in one HCCS full
        # mesh: Huawei's scheduler serves it with one 8-chip pool and no rings
        # (mind-cluster component/ascend-for-volcano, internal/npu/ascend910/ascend910b/
        # module910bx8, before its merge into the 910B base). Assumption: chips 0-3 on
        # NUMA node 0, 4-7 on node 1.
        return [[_chip(i, "910B3", i, memory_mib=65536)] for i in range(8)]
    if node == "atlas-800-3000":
        # Atlas 800 inference server (model 3000) with Atlas 300I Duo cards: at most four
        # cards, two Ascend 310P (310P3) processors each (Huawei MindCluster scheduling
        # guide, "Inference Server (with Atlas 300I Duo Inference Cards)"); 96 GB per card,
        # 48 GB per chip. DCMI lists each card with its two chips. Assumption: cards 0-1
        # on NUMA node 0 (the first socket), cards 2-3 on NUMA node 1.
        return [
            [
                _chip(2 * card, "310P3", 2 * card, memory_mib=49152),
                _chip(2 * card + 1, "310P3", 2 * card + 1, memory_mib=49152),
            ]
            for card in range(4)
        ]
    return None


def _vnpus(phys_id: int, template: str, cores: int, count: int) -> list[VirtualDevice]:
    return [
        VirtualDevice(vdev_id=100 + 16 * phys_id + n, template=template, aicore=float(cores))
        for n in range(count)
    ]


def preset_cards(name: str) -> list[list[SimChip]]:
    """The cards of preset ``name`` (see the module docstring)."""
    if name == "ascend910x8":
        return [[_chip(i, "910A", i)] for i in range(8)]
    if name == "ascend910x8-vnpu":
        cards = preset_cards("ascend910x8")
        cards[6][0].vnpus = _vnpus(6, "vir08", 8, 2)
        cards[7][0].vnpus = _vnpus(7, "vir04", 4, 4)
        return cards
    if name == "ascend310px4":
        return [
            [_chip(0, "310P3", 0, memory_mib=24576), _chip(1, "310P3", 1, memory_mib=24576)],
            [_chip(2, "310P3", 4, memory_mib=24576), _chip(3, "310P3", 5, memory_mib=24576)],
        ]
    if name == "mixed":
        return [[_chip(i, "910A", i)] for i in range(4)] + [
            [_chip(4, "310P3", 4), _chip(5, "310P3", 5)],
            [_chip(6, "310P3", 6), _chip(7, "310P3", 7)],
        ]
    raise ValueError(f"unknown simulated node {name!r}")


class SimulatedDcmi:
    """The ``Dcmi`` interface over simulated chips, plus the hardware's side of faults."""

    def __init__(
        self,
        cards: Sequence[Sequence[SimChip]],
        *,
        fault_events: bool = True,
        label: str = "custom",
    ) -> None:
        self.cards = [list(card) for card in cards]
        self.fault_events = fault_events
        #: Non-zero: listing cards fails with this code, as when the library loads but the
        #: NPU driver below it is not running.
        self.card_list_error = 0
        self.label = label
        self._chips = [chip for card in self.cards for chip in card]  # index = logical ID
        self._callback: FaultCallback | None = None
        self._lock = threading.Lock()
        self.closed = False

    @classmethod
    def preset(cls, name: str) -> SimulatedDcmi:
        return cls(preset_cards(name), label=name)

    @classmethod
    def published(cls, node: str) -> SimulatedDcmi | None:
        """The published machine ``node``, or None when it has no Ascend NPU."""
        cards = published_cards(node)
        return None if cards is None else cls(cards, label=node)

    @property
    def description(self) -> str:
        return f"simulated DCMI ({self.label})"

    # -- the Dcmi interface --------------------------------------------------------------

    def _at(self, call: str, card: int, chip: int) -> SimChip:
        if not 0 <= card < len(self.cards) or not 0 <= chip < len(self.cards[card]):
            raise DcmiError(call, ERR_INVALID_DEVICE_ID)
        found = self.cards[card][chip]
        if not found.present:
            raise DcmiError(call, ERR_DEVICE_NOT_EXIST)
        return found

    def card_ids(self) -> list[int]:
        if self.card_list_error:
            raise DcmiError("dcmi_get_card_list", self.card_list_error)
        return list(range(len(self.cards)))

    def chip_count(self, card: int) -> int:
        if not 0 <= card < len(self.cards):
            raise DcmiError("dcmi_get_device_num_in_card", ERR_INVALID_DEVICE_ID)
        return len(self.cards[card])

    def logic_id(self, card: int, chip: int) -> int:
        return self._chips.index(self._at("dcmi_get_device_logic_id", card, chip))

    def physical_id(self, logic_id: int) -> int:
        if not 0 <= logic_id < len(self._chips):
            raise DcmiError("dcmi_get_device_phyid_from_logicid", ERR_INVALID_DEVICE_ID)
        return self._chips[logic_id].phys_id

    def chip_name(self, card: int, chip: int) -> str:
        return self._at("dcmi_get_device_chip_info", card, chip).name

    def pci_address(self, card: int, chip: int) -> str:
        return self._at("dcmi_get_device_pcie_info_v2", card, chip).pci_address

    def memory_mib(self, card: int, chip: int, *, hbm: bool) -> int:
        call = "dcmi_get_device_hbm_info" if hbm else "dcmi_get_device_memory_info_v3"
        return self._at(call, card, chip).memory_mib

    def health(self, card: int, chip: int) -> int:
        with self._lock:
            found = self._at("dcmi_get_device_health", card, chip)
            if found.dropped:
                raise DcmiError("dcmi_get_device_health", ERR_DEVICE_NOT_READY)
            return found.health

    def error_codes(self, card: int, chip: int) -> list[int]:
        with self._lock:
            found = self._at("dcmi_get_device_errorcode_v2", card, chip)
            if found.dropped:
                raise DcmiError("dcmi_get_device_errorcode_v2", ERR_DEVICE_NOT_READY)
            return list(found.errors)

    def virtual_devices(self, card: int, chip: int) -> list[VirtualDevice]:
        found = self._at("dcmi_get_device_info", card, chip)
        if not found.virtualisation:
            raise DcmiError("dcmi_get_device_info", ERR_NOT_SUPPORT)
        return list(found.vnpus)

    def subscribe_faults(self, callback: FaultCallback) -> bool:
        if not self.fault_events:
            return False
        with self._lock:
            if self._callback is not None:  # as DCMI: once per process
                raise DcmiError("dcmi_subscribe_fault_event", ERR_OPER_NOT_PERMITTED)
            self._callback = callback
        return True

    def close(self) -> None:
        self.closed = True

    # -- what the hardware does ------------------------------------------------------------

    def chip_by_phys(self, phys_id: int) -> SimChip:
        found = next((c for c in self._chips if c.phys_id == phys_id), None)
        if found is None:
            raise KeyError(f"no simulated chip with physical ID {phys_id}")
        return found

    def _push(self, chip: SimChip, code: int, severity: int, assertion: int, name: str) -> None:
        callback = self._callback
        if callback is not None:  # called outside the lock, as DCMI's own thread would
            callback(
                FaultEvent(
                    logic_id=self._chips.index(chip),
                    event_id=code,
                    severity=severity,
                    assertion=assertion,
                    name=name,
                )
            )

    def inject_fault(
        self,
        phys_id: int,
        code: int = SIMULATED_FAULT_CODE,
        severity: int = MAJOR,
        *,
        event: bool = True,
    ) -> None:
        """The chip raises ``code``: DCMI's health shows the alarm level (the most severe
        current one), the code is listed, and an event with ``severity`` is pushed (unless
        ``event`` is false: a code only polling sees)."""
        chip = self.chip_by_phys(phys_id)
        with self._lock:
            chip.health = max(chip.health, severity)
            if code not in chip.errors:
                chip.errors.append(code)
        if event:
            self._push(chip, code, severity, ASSERTION_RAISED, "simulated fault")

    def raise_alarm(self, phys_id: int, health: int = MINOR) -> None:
        """DCMI's health shows an alarm level with no fault code behind it."""
        chip = self.chip_by_phys(phys_id)
        with self._lock:
            chip.health = max(chip.health, health)

    def drop(self, phys_id: int) -> None:
        """The card drops off the bus: DCMI answers -8012 (not ready) for it."""
        chip = self.chip_by_phys(phys_id)
        with self._lock:
            chip.dropped = True
        self._push(chip, CARD_DROP_EVENT, CRITICAL, ASSERTION_RAISED, "simulated card drop")

    def recover(self, phys_id: int) -> None:
        """Every fault clears (e.g. after a reset): health 0, no codes, a recovery event
        for each code that was raised."""
        chip = self.chip_by_phys(phys_id)
        with self._lock:
            cleared = list(chip.errors) or [SIMULATED_FAULT_CODE]
            if chip.dropped:
                cleared.append(CARD_DROP_EVENT)
            chip.health, chip.errors = HEALTH_OK, []
            chip.present, chip.dropped = True, False
        for code in cleared:
            self._push(chip, code, HEALTH_OK, ASSERTION_RECOVERED, "simulated recovery")

    # -- the tree the driver reads -----------------------------------------------------------

    def build_tree(self, root: Path) -> None:
        """``/dev/davinciN``, ``/dev/vdavinciN``, the shared nodes, the chips' PCI devices
        (with NUMA nodes) and the driver files that get mounted, under ``root``."""
        fake = FakeRoot(root)
        for chip in self._chips:
            fake.char_device(f"/dev/davinci{chip.phys_id}")
            for vnpu in chip.vnpus:
                fake.char_device(f"/dev/vdavinci{vnpu.vdev_id}")
            fake.pci_device(
                chip.pci_address,
                vendor=HUAWEI_PCI_VENDOR,
                device=chip.pci_device_id,
                numa_node=chip.numa_node,
                device_class="0x120000",
                bus=_root_bus(chip.numa_node),
            )
        for node in SHARED_NODES:
            fake.char_device(node)
        for directory in DRIVER_DIRS:
            fake.mkdir(directory)
        for path, text in DRIVER_FILES.items():
            fake.write(path, text)
        fake.write(DRIVER_VERSION_FILE, f"Version={SIMULATED_DRIVER_VERSION}\n")
        fake.write(FIRMWARE_VERSION_FILE, f"Version={SIMULATED_FIRMWARE_VERSION}\n")

    def remove_tree(self, root: Path) -> None:
        """Undo ``build_tree`` for this node's chips (before building another preset)."""
        fake = FakeRoot(root)
        for chip in self._chips:
            fake.remove(f"/dev/davinci{chip.phys_id}")
            for vnpu in chip.vnpus:
                fake.remove(f"/dev/vdavinci{vnpu.vdev_id}")
            fake.remove(f"/sys/bus/pci/devices/{chip.pci_address}")
            fake.remove(f"/sys/devices/{_root_bus(chip.numa_node)}/{chip.pci_address}")
