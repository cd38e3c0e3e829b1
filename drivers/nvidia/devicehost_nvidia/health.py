"""GPU health as a snapshot that can go both ways, and only when it should.

Two things make a unit Unhealthy:

- a *mark* left by a critical event. A mark is either *transient* (cleared once no new
  critical event arrived for the quiet period and the GPU is sound) or *held until a reset*
  (the Xid's documented resolution is a GPU reset or a node reboot, ``xids.py``): it clears
  only once a reset of that GPU has been observed through NVML;
- a GPU that NVML does not call *sound* now: a query fails (lost, …), a row remap failed,
  (optionally) a remap is pending, or the driver's recovery-action field asks for anything
  but NONE.

Where the driver offers ``NVML_FI_DEV_GET_GPU_RECOVERY_ACTION``, that field decides: every
mark is transient, and the GPU stays Unhealthy for as long as the field asks for a reset,
reboot or drain. Elsewhere a reset is *observed* when NVML's energy counter for the GPU,
which counts "since the driver was last reloaded" (go-nvml ``gen/nvml/nvml.h``), goes
backwards, or when a GPU that was lost answers again. devicehost holds NVML open the whole
time, so the driver cannot unload and restart that counter for any other reason.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from devicehost_nvidia.discovery import Gpu
from devicehost_nvidia.nvml import (
    FI_DEV_GET_GPU_RECOVERY_ACTION,
    GPU_RECOVERY_ACTION_BUS_RESET,
    GPU_RECOVERY_ACTION_DRAIN_AND_RESET,
    GPU_RECOVERY_ACTION_DRAIN_P2P,
    GPU_RECOVERY_ACTION_GPU_RESET,
    GPU_RECOVERY_ACTION_NODE_REBOOT,
    GPU_RECOVERY_ACTION_NONE,
    GPU_RECOVERY_ACTION_RECOVER_IMEX_DOMAIN,
    GPU_RECOVERY_ACTION_SYSTEM_REBOOT,
    NVML_ERROR_NOT_SUPPORTED,
    Nvml,
    NvmlError,
)

log = logging.getLogger(__name__)

RECOVERY_ACTIONS = {
    GPU_RECOVERY_ACTION_GPU_RESET: "a GPU reset",
    GPU_RECOVERY_ACTION_NODE_REBOOT: "a node reboot",
    GPU_RECOVERY_ACTION_DRAIN_P2P: "draining peer-to-peer traffic",
    GPU_RECOVERY_ACTION_DRAIN_AND_RESET: "draining peer-to-peer traffic and a GPU reset",
    GPU_RECOVERY_ACTION_RECOVER_IMEX_DOMAIN: "recovering its IMEX domain",
    GPU_RECOVERY_ACTION_BUS_RESET: "a bus reset",
    GPU_RECOVERY_ACTION_SYSTEM_REBOOT: "a system reboot",
}


@dataclass(frozen=True, slots=True)
class Condition:
    """What NVML says about one GPU now. ``problem`` None means sound; ``resets`` counts
    the resets observed since start; ``decides`` is true where the recovery-action field
    is offered (marks are then transient)."""

    problem: str | None
    resets: int
    decides: bool


class Observer:
    """Reads each GPU's condition from NVML and remembers what a reset looks like."""

    def __init__(self, nvml: Nvml, remap_pending_is_fault: bool = False) -> None:
        self.nvml = nvml
        self.remap_pending_is_fault = remap_pending_is_fault
        self._lock = threading.Lock()
        self._energy: dict[str, int] = {}
        self._lost: set[str] = set()
        self._resets: dict[str, int] = {}
        self._offers_action: dict[str, bool] = {}

    def _reset_seen(self, uuid: str) -> None:
        self._resets[uuid] = self._resets.get(uuid, 0) + 1
        log.info("GPU %s: a reset was observed through NVML", uuid)

    def _watch_energy(self, gpu: Gpu) -> None:
        try:
            energy = self.nvml.device_total_energy_consumption(gpu.handle)
        except NvmlError:
            return  # no counter on this GPU: resets show only through the other signals
        before = self._energy.get(gpu.uuid)
        self._energy[gpu.uuid] = energy
        if before is not None and energy < before:
            self._reset_seen(gpu.uuid)

    def _recovery_action(self, gpu: Gpu) -> int | None:
        if self._offers_action.get(gpu.uuid) is False:
            return None
        try:
            action = self.nvml.device_field_value(gpu.handle, FI_DEV_GET_GPU_RECOVERY_ACTION)
        except NvmlError as exc:
            if exc.code == NVML_ERROR_NOT_SUPPORTED:
                self._offers_action[gpu.uuid] = False
            return None
        self._offers_action[gpu.uuid] = True
        return action

    def check(self, gpu: Gpu) -> Condition:
        """The condition of ``gpu`` now; notices resets on the way."""
        with self._lock:
            problem = self._problem(gpu)
            return Condition(
                problem, self._resets.get(gpu.uuid, 0), bool(self._offers_action.get(gpu.uuid))
            )

    def _problem(self, gpu: Gpu) -> str | None:
        try:
            self.nvml.device_pci_bus_id(gpu.handle)
        except NvmlError as exc:
            self._lost.add(gpu.uuid)
            return f"NVML query failed: {exc}"
        if gpu.uuid in self._lost:
            self._lost.discard(gpu.uuid)
            self._reset_seen(gpu.uuid)  # it was off the bus and answers again
        self._watch_energy(gpu)
        action = self._recovery_action(gpu)
        if action is not None and action != GPU_RECOVERY_ACTION_NONE:
            what = RECOVERY_ACTIONS.get(action, f"recovery action {action}")
            return f"the driver reports that the GPU needs {what}"
        try:
            rows = self.nvml.device_remapped_rows(gpu.handle)
        except NvmlError as exc:
            if exc.code == NVML_ERROR_NOT_SUPPORTED:
                return None
            return f"NVML query failed: {exc}"
        if rows.failure:
            return "a row remapping failed: the GPU needs service"
        if rows.pending and self.remap_pending_is_fault:
            return "a row remap is pending (remapPendingUnhealthy is on): it needs a reset"
        return None


@dataclass
class _Mark:
    reason: str
    last: float
    #: None: transient; otherwise the reset count the GPU had when marked.
    held_at: int | None


Scope = tuple[int | None, int | None]  # (GPU instance, compute instance); None: all


class HealthTracker:
    """Marks per (GPU UUID, GPU instance, compute instance). Thread-safe.

    ``version`` grows on every change, so a watcher can tell when to notify the host.
    """

    def __init__(self, quiet_period: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.quiet_period = quiet_period
        self._clock = clock
        self._marks: dict[tuple[str, int | None, int | None], _Mark] = {}
        self._lock = threading.Lock()
        self.version = 0

    def record(
        self,
        gpu_uuid: str,
        scope: Scope,
        reason: str,
        held_at: int | None = None,
    ) -> None:
        """A critical event: (re)start the mark of that GPU, GPU instance or compute
        instance; ``held_at`` (the GPU's reset count now) holds it until the next reset."""
        with self._lock:
            key = (gpu_uuid, *scope)
            before = self._marks.get(key)
            if before is not None and before.held_at is not None and held_at is None:
                held_at = before.held_at  # a transient event never releases a hold
            self._marks[key] = _Mark(reason, self._clock(), held_at)
            self.version += 1

    def marked(
        self, gpu_uuid: str, gpu_instance: int | None = None, compute_instance: int | None = None
    ) -> str | None:
        """Why a unit is marked, or None. A whole GPU is marked by any of its marks; a MIG
        device by GPU-wide marks, by its GPU instance's, and by its compute instance's."""
        with self._lock:
            for (uuid, gi, ci), mark in self._marks.items():
                if uuid != gpu_uuid:
                    continue
                if gpu_instance is None or gi is None:
                    return mark.reason
                if gi == gpu_instance and (ci is None or ci == compute_instance):
                    return mark.reason
        return None

    def recheck(self, condition: Callable[[str], Condition]) -> bool:
        """Clear the marks that may go: transient ones past the quiet period on a sound GPU,
        held ones once a reset was observed and the GPU is sound. True when any cleared."""
        now = self._clock()
        with self._lock:
            keys = list(self._marks)
        seen: dict[str, Condition] = {}
        cleared = []
        for key in keys:
            with self._lock:
                mark = self._marks.get(key)
            if mark is None:
                continue
            if key[0] not in seen:
                seen[key[0]] = condition(key[0])
            state = seen[key[0]]
            if state.problem is not None:
                continue
            # Where the recovery-action field decides, a sound GPU needs only the quiet period.
            held = mark.held_at is not None and not state.decides
            done = (
                state.resets > (mark.held_at or 0) if held else now - mark.last >= self.quiet_period
            )
            if done:
                cleared.append((key, mark))
        if not cleared:
            return False
        with self._lock:
            for key, mark in cleared:
                if self._marks.get(key) is mark:
                    del self._marks[key]
                    log.info(
                        "GPU %s%s: %s; Healthy again (was: %s)",
                        key[0],
                        "" if key[1] is None else f" GPU instance {key[1]}",
                        "quiet and sound" if mark.held_at is None else "reset and sound",
                        mark.reason,
                    )
            self.version += 1
        return True

    def has_marks(self) -> bool:
        with self._lock:
            return bool(self._marks)
