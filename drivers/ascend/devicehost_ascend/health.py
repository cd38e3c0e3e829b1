"""Chip health from DCMI, read fresh every time, so a repaired chip is Healthy again.

A chip is Healthy when DCMI reports health 0 and no error code, or when every error code
it reports is in ``ignoredErrorCodes`` (an alarm raised only for codes the operator has
declared harmless). A chip DCMI cannot read at all is Unhealthy. Fault events pushed by
DCMI only wake the watch loops: the truth is always re-read, never remembered.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from devicehost import Health
from devicehost_ascend.dcmi import HEALTH_OK, Dcmi, DcmiError, FaultEvent
from devicehost_ascend.inventory import ChipRef

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ChipHealth:
    """A chip's health now, and why (empty when Healthy for no special reason)."""

    health: Health
    reason: str = ""


HEALTHY = ChipHealth(Health.HEALTHY)


def _hex(codes: Iterable[int]) -> str:
    return ", ".join(f"0x{code:08X}" for code in codes)


def judge(health_code: int, error_codes: Iterable[int], ignored: frozenset[int]) -> ChipHealth:
    """The rule above, on values DCMI returned."""
    codes = sorted(set(error_codes))
    harmful = [c for c in codes if c not in ignored]
    if harmful:
        return ChipHealth(
            Health.UNHEALTHY, f"DCMI health {health_code}, error codes {_hex(harmful)}"
        )
    if health_code != HEALTH_OK and not codes:
        return ChipHealth(Health.UNHEALTHY, f"DCMI health {health_code}")
    if codes:
        return ChipHealth(Health.HEALTHY, f"ignoring error codes {_hex(codes)}")
    return HEALTHY


class DcmiHealth:
    """Reads chips' health through DCMI."""

    def __init__(self, dcmi: Dcmi, ignored_error_codes: frozenset[int]) -> None:
        self._dcmi = dcmi
        self._ignored = ignored_error_codes

    def check(self, chip: ChipRef) -> ChipHealth:
        try:
            code = self._dcmi.health(chip.card, chip.chip)
            errors = self._dcmi.error_codes(chip.card, chip.chip)
        except DcmiError as exc:
            return ChipHealth(Health.UNHEALTHY, f"DCMI cannot read the chip: {exc}")
        return judge(code, errors, self._ignored)

    def check_all(self, chips: Iterable[ChipRef]) -> dict[ChipRef, ChipHealth]:
        return {chip: self.check(chip) for chip in dict.fromkeys(chips)}


class FaultHub:
    """DCMI's one-per-process fault subscription, fanned out to every watch loop."""

    def __init__(self, dcmi: Dcmi) -> None:
        self._dcmi = dcmi
        self._listeners: list[Callable[[], None]] = []
        self._lock = threading.Lock()
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
            listeners = list(self._listeners)
        for listener in listeners:
            listener()
