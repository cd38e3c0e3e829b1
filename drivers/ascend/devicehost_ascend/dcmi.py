"""The narrow interface between the driver and Huawei's DCMI library.

Only the calls the driver needs, in the driver's own terms. Two implementations ship:
``CtypesDcmi`` (``dcmi_ctypes``) binds ``libdcmi.so`` on a real node, ``SimulatedDcmi``
(``dcmi_sim``) stands in for it in ``devicehost demo`` and the tests. Everything above
this interface runs the same code on both.

A chip is addressed as DCMI addresses it: ``(card, chip)`` where ``chip`` is the index of
the NPU on its card (DCMI's ``device_id``). Failures raise ``DcmiError`` with the call and
DCMI's return code, so an operator can look the code up.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

#: ``dcmi_get_device_health``: 0 is healthy; 1, 2, 3 are minor, major and critical alarms.
HEALTH_OK = 0

#: ``assertion`` of a fault event: the fault cleared, the fault occurred, a one-off notice.
ASSERTION_RECOVERED = 0
ASSERTION_RAISED = 1
ASSERTION_ONE_OFF = 2


class DcmiError(Exception):
    """A DCMI call failed: ``code`` is DCMI's return code (e.g. -8007, invalid device ID),
    or None when the call could not be made or its answer made no sense (``detail``)."""

    def __init__(self, call: str, code: int | None, detail: str = "") -> None:
        self.call, self.code = call, code
        if code is None:
            super().__init__(f"{call}: {detail}")
        else:
            super().__init__(f"{call} returned {code}" + (f" ({detail})" if detail else ""))


@dataclass(frozen=True, kw_only=True, slots=True)
class VirtualDevice:
    """A pre-created vNPU on a chip, as DCMI's vdevice query reports it."""

    vdev_id: int
    #: The template it was created from, e.g. ``vir04`` or ``vir04_3c_ndvpp``; may be empty.
    template: str
    #: AI cores given to it (DCMI reports a float; whole numbers in practice).
    aicore: float


@dataclass(frozen=True, kw_only=True, slots=True)
class FaultEvent:
    """One pushed fault or recovery event (``struct dcmi_dms_fault_event``, abridged)."""

    logic_id: int
    event_id: int
    severity: int
    assertion: int
    name: str = ""


FaultCallback = Callable[[FaultEvent], None]


class Dcmi(Protocol):
    """What the driver asks of DCMI. Every method may raise ``DcmiError``."""

    @property
    def description(self) -> str:
        """Where this library came from, for operator notes."""
        ...

    def card_ids(self) -> list[int]:
        """The NPU cards (``dcmi_get_card_list`` / ``dcmi_get_card_num_list``)."""
        ...

    def chip_count(self, card: int) -> int:
        """NPU chips on ``card`` (``dcmi_get_device_num_in_card``)."""
        ...

    def logic_id(self, card: int, chip: int) -> int:
        """The chip's logical ID (``dcmi_get_device_logic_id``)."""
        ...

    def physical_id(self, logic_id: int) -> int:
        """The chip's physical ID (``dcmi_get_device_phyid_from_logicid``): the N of
        ``/dev/davinciN`` and what Ascend Docker Runtime expects."""
        ...

    def chip_name(self, card: int, chip: int) -> str:
        """``chip_name`` of ``dcmi_get_device_chip_info``, e.g. ``910A`` or ``310P3``."""
        ...

    def pci_address(self, card: int, chip: int) -> str:
        """The chip's PCI address ``dddd:bb:dd.f`` (``dcmi_get_device_pcie_info_v2``)."""
        ...

    def memory_mib(self, card: int, chip: int, *, hbm: bool) -> int:
        """The chip's memory in MiB: its HBM (``dcmi_get_device_hbm_info``, ``hbm``: Ascend
        910 chips) or its DDR (``dcmi_get_device_memory_info_v3``, inference chips)."""
        ...

    def health(self, card: int, chip: int) -> int:
        """``dcmi_get_device_health``: ``HEALTH_OK`` or an alarm level; a dropped card
        raises ``DcmiError`` with code -8012 (not ready)."""
        ...

    def error_codes(self, card: int, chip: int) -> list[int]:
        """The chip's current error codes (``dcmi_get_device_errorcode_v2``)."""
        ...

    def virtual_devices(self, card: int, chip: int) -> list[VirtualDevice]:
        """The chip's pre-created vNPUs (``dcmi_get_device_info``, VDEV_MNG queries);
        empty when the chip is not split or does not support it."""
        ...

    def subscribe_faults(self, callback: FaultCallback) -> bool:
        """Push fault and recovery events of every chip to ``callback``
        (``dcmi_subscribe_fault_event``). False when the library does not offer it.
        DCMI allows one subscription per process, so call this once."""
        ...

    def close(self) -> None:
        """Release what can be released; no call is made afterwards."""
        ...
