"""The NVML event set behind the watch hook: critical events become health marks at once.

One event set per driver, created at configure so no event is lost between start-up and
the first watch, registered for Xid critical errors and double-bit ECC errors on every
advertised GPU. ``pump`` waits on it for a short time (so ``stop`` is honoured), turns a
critical event into a mark, and re-checks marked GPUs whose quiet period has passed.
Watch threads of several resources may pump; one waits on the set at a time.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from devicehost_nvidia.discovery import Gpu
from devicehost_nvidia.health import Condition, HealthTracker, Observer
from devicehost_nvidia.nvml import (
    EVENT_DOUBLE_BIT_ECC_ERROR,
    EVENT_XID_CRITICAL_ERROR,
    NO_INSTANCE,
    NVML_ERROR_TIMEOUT,
    Handle,
    Nvml,
    NvmlError,
    NvmlEvent,
)
from devicehost_nvidia.xids import DOUBLE_BIT_ECC_RESOLUTION, Resolution, resolution

log = logging.getLogger(__name__)

HEALTH_EVENTS = EVENT_XID_CRITICAL_ERROR | EVENT_DOUBLE_BIT_ECC_ERROR
WAIT_MS = 250
CLOSE_WAIT_SECONDS = 1.0


class HealthMonitor:
    """Owns the event set; ``version`` grows whenever health may have changed."""

    def __init__(
        self,
        nvml: Nvml,
        gpus: Sequence[Gpu],
        tracker: HealthTracker,
        ignored_xids: frozenset[int],
        observer: Observer,
    ) -> None:
        self.nvml = nvml
        self.tracker = tracker
        self.observer = observer
        self.ignored_xids = ignored_xids
        self._gpus = {g.uuid: g for g in gpus}
        self._by_handle = {id(g.handle): g for g in gpus}
        self._event_set: Handle | None = None
        self._lock = threading.Lock()
        self._failing = False
        self._failures = 0

    @property
    def listening(self) -> bool:
        """True while an event set is open (events reach the driver as they happen)."""
        return self._event_set is not None

    @property
    def version(self) -> int:
        return self.tracker.version + self._failures

    def start(self) -> list[str]:
        """Create the event set and register every GPU; return notes on what could not be."""
        notes: list[str] = []
        try:
            self._event_set = self.nvml.event_set_create()
        except NvmlError as exc:
            return [
                f"cannot create an NVML event set ({exc}): health comes from NVML queries "
                "on each scan only"
            ]
        for gpu in self._gpus.values():
            try:
                mask = HEALTH_EVENTS & self.nvml.device_supported_event_types(gpu.handle)
                if not mask & EVENT_XID_CRITICAL_ERROR:
                    notes.append(
                        f"GPU {gpu.index} ({gpu.uuid}) reports no Xid events: its "
                        "health comes from NVML queries on each scan only"
                    )
                if mask:
                    self.nvml.device_register_events(gpu.handle, mask, self._event_set)
            except NvmlError as exc:
                notes.append(
                    f"GPU {gpu.index} ({gpu.uuid}): cannot register for NVML events "
                    f"({exc}); its health comes from NVML queries on each scan only"
                )
        return notes

    def condition(self, gpu_uuid: str) -> Condition:
        gpu = self._gpus.get(gpu_uuid)
        if gpu is None:
            return Condition("not advertised any more", 0, False)
        return self.observer.check(gpu)

    def handle(self, event: NvmlEvent) -> None:
        """Turn one event into a mark, unless an application caused it."""
        gpu = self._by_handle.get(id(event.device))
        if gpu is None:
            return
        if event.event_type & EVENT_XID_CRITICAL_ERROR:
            if event.event_data in self.ignored_xids:
                log.info(
                    "GPU %d (%s): Xid %d is caused by applications; health unchanged",
                    gpu.index,
                    gpu.uuid,
                    event.event_data,
                )
                return
            reason = f"Xid {event.event_data}"
            needs = resolution(event.event_data)
        elif event.event_type & EVENT_DOUBLE_BIT_ECC_ERROR:
            reason = "double-bit ECC error"
            needs = DOUBLE_BIT_ECC_RESOLUTION
        else:
            return
        # MIG events name the GPU instance and the compute instance (NO_INSTANCE: all).
        gi = None if event.gpu_instance_id == NO_INSTANCE else event.gpu_instance_id
        ci = (
            None
            if gi is None or event.compute_instance_id == NO_INSTANCE
            else (event.compute_instance_id)
        )
        where = (
            ""
            if gi is None
            else f" GPU instance {gi}" + ("" if ci is None else f" compute instance {ci}")
        )
        state = self.observer.check(gpu)
        held_at = None
        if needs is not Resolution.TRANSIENT and not state.decides:
            held_at = state.resets
            until = f"a {needs.value} is observed"
        elif state.decides:
            until = (
                f"{self.tracker.quiet_period:g} s pass without another and the driver's "
                "recovery action is NONE"
            )
        else:
            until = f"{self.tracker.quiet_period:g} s pass without another and NVML calls it sound"
        log.warning(
            "GPU %d (%s)%s: critical event %s; Unhealthy until %s",
            gpu.index,
            gpu.uuid,
            where,
            reason,
            until,
        )
        self.tracker.record(gpu.uuid, (gi, ci), f"{reason}{where}", held_at)

    def pump(self, stop: threading.Event, wait_ms: int = WAIT_MS) -> bool:
        """Wait up to ``wait_ms`` for one event, then re-check due marks. False when the
        event set failed (the caller backs off)."""
        ok = True
        if self._event_set is None or not self._lock.acquire(timeout=wait_ms / 1000):
            stop.wait(wait_ms / 1000)
        else:
            try:
                if self._event_set is not None and not stop.is_set():
                    ok = self._wait_once(self._event_set, wait_ms)
            finally:
                self._lock.release()
        if self.tracker.has_marks():
            self.tracker.recheck(self.condition)
        return ok

    def _wait_once(self, event_set: Handle, wait_ms: int) -> bool:
        try:
            event = self.nvml.event_set_wait(event_set, wait_ms)
        except NvmlError as exc:
            if exc.code == NVML_ERROR_TIMEOUT:
                self._failing = False
                return True
            if not self._failing:
                self._failing, self._failures = True, self._failures + 1
                log.warning("waiting on the NVML event set failed (%s); re-checking every GPU", exc)
            return False
        self._failing = False
        self.handle(event)
        return True

    def close(self) -> None:
        """Free the event set once no thread waits on it."""
        if self._event_set is None or not self._lock.acquire(timeout=CLOSE_WAIT_SECONDS):
            return
        try:
            event_set, self._event_set = self._event_set, None
            self.nvml.event_set_free(event_set)
        except NvmlError as exc:
            log.debug("freeing the NVML event set: %s", exc)
        finally:
            self._lock.release()
