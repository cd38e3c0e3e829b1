"""Chip health from DCMI, read fresh every time, so a repaired chip is Healthy again.

A chip's health is the class of its current fault codes (``fault_codes``: Huawei's shipped
table, the operator's ``faultCodes`` and ``ignoredErrorCodes``, and for unlisted codes the
severity DCMI pushed with them). DCMI's health value on its own is an alarm level, not a
fault: the reference plugin never takes a chip out on it, and neither does this driver,
except for the one value that means the card is gone (-8012, not ready). A chip DCMI
cannot read at all is Unhealthy. Fault events pushed by DCMI only wake the watch loops and
record each code's severity: the codes themselves are always re-read, never remembered.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from devicehost import Health
from devicehost_ascend.dcmi import HEALTH_OK, Dcmi, DcmiError, FaultEvent
from devicehost_ascend.fault_codes import CARD_DROP_CODE, DEVICE_NOT_READY, FaultTable
from devicehost_ascend.inventory import ChipRef

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ChipHealth:
    """A chip's health now, and why (empty when Healthy for no special reason)."""

    health: Health
    reason: str = ""


HEALTHY = ChipHealth(Health.HEALTHY)


def judge(
    health_code: int | None,
    error_codes: Iterable[int],
    table: FaultTable,
    severities: Mapping[int, int],
) -> ChipHealth:
    """The rule above, on values DCMI returned; ``health_code`` None: the card dropped."""
    codes = set(error_codes)
    if health_code is None:
        codes.add(CARD_DROP_CODE)
    if not codes:
        if health_code not in (None, HEALTH_OK):
            return ChipHealth(
                Health.HEALTHY, f"DCMI health {health_code} without a fault code: an alarm only"
            )
        return HEALTHY
    verdict = table.judge(codes, severities)
    detail = ", ".join(verdict.reasons)
    if health_code is None:
        detail = f"card dropped (DCMI {DEVICE_NOT_READY}, device not ready); {detail}"
    else:
        detail = f"DCMI health {health_code}, fault codes {detail}"
    health = Health.HEALTHY if verdict.healthy else Health.UNHEALTHY
    return ChipHealth(health, f"{verdict.fault_class}: {detail}")


class DcmiHealth:
    """Reads chips' health through DCMI."""

    def __init__(self, dcmi: Dcmi, table: FaultTable, severities: Mapping[int, int]) -> None:
        self._dcmi = dcmi
        self._table = table
        #: Severity of each code seen in a pushed event (shared with ``FaultHub``).
        self._severities = severities

    def check(self, chip: ChipRef) -> ChipHealth:
        code: int | None
        try:
            code = self._dcmi.health(chip.card, chip.chip)
        except DcmiError as exc:
            if exc.code != DEVICE_NOT_READY:
                return ChipHealth(Health.UNHEALTHY, f"DCMI cannot read the chip: {exc}")
            code = None  # the card dropped: judged below with its card-drop code
        try:
            errors = self._dcmi.error_codes(chip.card, chip.chip)
        except DcmiError as exc:
            if code is not None:
                return ChipHealth(Health.UNHEALTHY, f"DCMI cannot read the chip: {exc}")
            errors = []
        return judge(code, errors, self._table, dict(self._severities))

    def check_all(self, chips: Iterable[ChipRef]) -> dict[ChipRef, ChipHealth]:
        return {chip: self.check(chip) for chip in dict.fromkeys(chips)}


class FaultHub:
    """DCMI's one-per-process fault subscription, fanned out to every watch loop."""

    def __init__(self, dcmi: Dcmi) -> None:
        self._dcmi = dcmi
        self._listeners: list[Callable[[], None]] = []
        self._lock = threading.Lock()
        #: event ID → the severity DCMI reported with it, latest first: what an unlisted
        #: code is judged by, as the reference keeps ``faultSeverityMap``.
        self.severities: dict[int, int] = {}
        self.subscribed = False
        self.problem = ""

    def start(self) -> bool:
        """Subscribe; True when DCMI will push events. Failure only costs latency."""
        try:
            self.subscribed = self._dcmi.subscribe_faults(self._on_event)
        except DcmiError as exc:
            self.problem = str(exc)
            log.warning("DCMI fault-event subscription failed (%s); health is polled only", exc)
        return self.subscribed

    def add(self, listener: Callable[[], None]) -> None:
        with self._lock:
            self._listeners.append(listener)

    def remove(self, listener: Callable[[], None]) -> None:
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def _on_event(self, event: FaultEvent) -> None:
        # Runs on DCMI's thread: log and wake the watches, never block or raise here.
        log.info(
            "DCMI fault event 0x%08X (%s) on logical chip %d: severity %d, assertion %d",
            event.event_id,
            event.name or "unnamed",
            event.logic_id,
            event.severity,
            event.assertion,
        )
        with self._lock:
            self.severities[event.event_id] = event.severity
            listeners = list(self._listeners)
        for listener in listeners:
            listener()
