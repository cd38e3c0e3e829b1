"""GPU health as a snapshot that can go both ways.

Two things make a unit Unhealthy: a *mark* left by a critical event (an Xid not caused by
an application, a double-bit ECC error), and a GPU that NVML does not call *sound* now (it
does not answer, it is lost, a row remap is pending). A mark is cleared once no new
critical event has arrived for the quiet period **and** the GPU is sound, so a flapping GPU
stays out until it has been quiet, and a repaired GPU comes back without a restart.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from devicehost_nvidia.discovery import Gpu
from devicehost_nvidia.nvml import NVML_ERROR_NOT_SUPPORTED, Nvml, NvmlError

log = logging.getLogger(__name__)


def soundness(nvml: Nvml, gpu: Gpu) -> str | None:
    """Why NVML does not call ``gpu`` sound right now, or None when it is."""
    try:
        nvml.device_pci_bus_id(gpu.handle)
        rows = nvml.device_remapped_rows(gpu.handle)
    except NvmlError as exc:
        if exc.code != NVML_ERROR_NOT_SUPPORTED:
            return f"NVML query failed: {exc}"
        return None
    if rows.failure:
        return "a row remapping failed: the GPU needs service"
    if rows.pending:
        return "a row remap is pending: the GPU needs a reset"
    return None


@dataclass
class _Mark:
    reason: str
    last: float


class HealthTracker:
    """Marks per (GPU UUID, GPU instance or None for the whole GPU). Thread-safe.

    ``version`` grows on every change, so a watcher can tell when to notify the host.
    """

    def __init__(self, quiet_period: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.quiet_period = quiet_period
        self._clock = clock
        self._marks: dict[tuple[str, int | None], _Mark] = {}
        self._lock = threading.Lock()
        self.version = 0

    def record(self, gpu_uuid: str, gpu_instance: int | None, reason: str) -> None:
        """A critical event: (re)start the quiet period of that GPU or GPU instance."""
        with self._lock:
            self._marks[(gpu_uuid, gpu_instance)] = _Mark(reason, self._clock())
            self.version += 1

    def marked(self, gpu_uuid: str, gpu_instance: int | None = None) -> str | None:
        """Why a unit is marked, or None. A whole GPU (``gpu_instance`` None) is marked by any
        of its marks; a MIG device by its own GPU instance's and by GPU-wide ones."""
        with self._lock:
            for (uuid, instance), mark in self._marks.items():
                if uuid == gpu_uuid and (gpu_instance is None or instance in (None, gpu_instance)):
                    return mark.reason
        return None

    def recheck(self, is_sound: Callable[[str], bool]) -> bool:
        """Clear marks past their quiet period whose GPU is sound; True when any cleared."""
        now = self._clock()
        with self._lock:
            due = [key for key, mark in self._marks.items() if now - mark.last >= self.quiet_period]
        cleared = []
        for key in due:
            if is_sound(key[0]):
                cleared.append(key)
        if not cleared:
            return False
        with self._lock:
            for key in cleared:
                mark = self._marks.get(key)
                if mark is not None and now - mark.last >= self.quiet_period:
                    del self._marks[key]
                    log.info(
                        "GPU %s%s: no critical event for %g s and NVML reports it sound; "
                        "Healthy again (was: %s)",
                        key[0],
                        "" if key[1] is None else f" GPU instance {key[1]}",
                        self.quiet_period,
                        mark.reason,
                    )
            self.version += 1
        return True

    def has_marks(self) -> bool:
        with self._lock:
            return bool(self._marks)
