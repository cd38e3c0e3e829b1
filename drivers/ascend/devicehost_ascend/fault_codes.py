"""Which DCMI fault codes take a chip out of service, judged as Huawei's own plugin judges them.

The reference is the Ascend device plugin in github.com/Ascend/mind-cluster
(``component/ascend-device-plugin``):

- ``pkg/common/fault_code.go`` (``GetFaultTypeByCode``): every code belongs to a fault class
  through the shipped table ``build/faultCode.json`` (transcribed in ``fault_table``); a
  code the table does not list is judged by the severity DCMI reported with its fault event
  (``getFaultTypeBySeverity``): at most minor (1) is ``NotHandleFault``, anything more
  serious — or a code whose severity was never reported — is ``SeparateNPU``.
- ``pkg/device/ascendcommon.go`` (``isHealthy``): a chip whose faults are ``NotHandleFault``
  or ``SubHealthFault`` stays Healthy; every other class makes it Unhealthy. (The plugin
  keeps a chip that is in use Healthy for ``PreSeparateNPU`` and, with grace tolerance on,
  ``FreeRestartNPU``; this driver cannot see which chips are in use, so those classes
  are Unhealthy here, which only keeps new pods off the chip.)
- A card that dropped off the bus answers ``dcmi_get_device_health`` with -8012 (device
  not ready); the reference adds the card-drop code ``0x40F84E00`` (a ``RestartNPU`` code)
  for it (``ascend-common/devmanager/dcmi/dcmi.go``, ``DcGetDeviceAllErrorCode``).

One deliberate difference: the reference picks the class of a set of codes by asking, class
by class from most serious down, whether *any* code is in that class, and only falls back to
severity when none is listed, so an unknown critical code next to a listed harmless one is
ignored. Here every code is classed on its own and the most serious class wins.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from devicehost_ascend.fault_table import SHIPPED_FAULT_CODES

#: The classes, least serious first (the order of ``getMostSeriousFaultType``).
CLASSES = (
    "NotHandleFault",
    "SubHealthFault",
    "RestartRequest",
    "RestartBusiness",
    "FreeRestartNPU",
    "RestartNPU",
    "PreSeparateNPU",
    "SeparateNPU",
)
#: Classes that leave a chip Healthy (``isHealthy``).
HEALTHY_CLASSES = frozenset({"NotHandleFault", "SubHealthFault"})
#: ``faultCode.json`` list name → class.
_LISTS = {
    "NotHandleFaultCodes": "NotHandleFault",
    "SubHealthFaultCodes": "SubHealthFault",
    "RestartRequestCodes": "RestartRequest",
    "RestartBusinessCodes": "RestartBusiness",
    "FreeRestartNPUCodes": "FreeRestartNPU",
    "RestartNPUCodes": "RestartNPU",
    "PreSeparateNPUCodes": "PreSeparateNPU",
    "SeparateNPUCodes": "SeparateNPU",
}
#: DCMI severities (``FaultSeverity*`` in the plugin's ``pkg/common/constants.go``).
SEVERITY_MINOR = 1
#: The code the reference gives a card that dropped off the bus.
CARD_DROP_CODE = 0x40F84E00
#: ``dcmi_get_device_health``'s return code for a chip that is not ready (dropped).
DEVICE_NOT_READY = -8012


def _rank(fault_class: str) -> int:
    return CLASSES.index(fault_class)


def _shipped() -> dict[int, str]:
    table: dict[int, str] = {}
    for list_name, codes in SHIPPED_FAULT_CODES.items():
        fault_class = _LISTS[list_name]
        for text in codes:
            code = int(text, 16)
            # One code is shipped in two lists (0xA2301001); the plugin's first match, in
            # order of seriousness, is the more serious one.
            if code not in table or _rank(fault_class) > _rank(table[code]):
                table[code] = fault_class
    return table


SHIPPED: Mapping[int, str] = _shipped()


@dataclass(frozen=True, slots=True)
class Verdict:
    """The class of a chip's codes, and why, code by code."""

    fault_class: str
    reasons: tuple[str, ...]

    @property
    def healthy(self) -> bool:
        return self.fault_class in HEALTHY_CLASSES


class FaultTable:
    """The shipped table with the operator's additions (``faultCodes``,
    ``ignoredErrorCodes``), which take precedence."""

    def __init__(self, overrides: Mapping[int, str] | None = None) -> None:
        self._table = {**SHIPPED, **(overrides or {})}
        self._overridden = frozenset(overrides or ())

    def class_of(self, code: int, severity: int | None) -> tuple[str, str]:
        """The class of ``code`` and where it came from (table, config or severity)."""
        known = self._table.get(code)
        if known is not None:
            source = "config" if code in self._overridden else "table"
            return known, source
        if severity is None:
            return "SeparateNPU", "not in the table, severity unknown"
        if severity <= SEVERITY_MINOR:
            return "NotHandleFault", f"not in the table, severity {severity}"
        return "SeparateNPU", f"not in the table, severity {severity}"

    def judge(self, codes: Iterable[int], severities: Mapping[int, int]) -> Verdict:
        """The most serious class among ``codes`` (``NotHandleFault`` for none)."""
        worst, reasons = "NotHandleFault", []
        for code in sorted(set(codes)):
            fault_class, source = self.class_of(code, severities.get(code))
            reasons.append(f"0x{code:08X} {fault_class} ({source})")
            if _rank(fault_class) > _rank(worst):
                worst = fault_class
        return Verdict(worst, tuple(reasons))
