"""Keep one driver's resources current: enumerate on an interval and at once on notify().

Driver calls run in the driver's own worker threads with a timeout. A failing or hanging
driver marks its own devices Unhealthy and is retried at the next scan; nothing it does
reaches another driver or the process. ``watch`` hooks run in dedicated daemon threads
and are restarted with a back-off when they raise.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from devicehost.drivers.discovery import Driver
from devicehost.drivers.snapshots import ResourceState
from devicehost.errors import DriverError
from devicehost.model import Device

log = logging.getLogger(__name__)

WATCH_RESTART_MAX_SECONDS = 30.0


def clean_devices(
    driver: str, resource: str, devices: Any, reported: set[str] | None = None
) -> tuple[list[Device], int]:
    """The valid, unique devices of an enumeration, and how many were dropped (each distinct
    problem is logged once)."""
    if (
        devices is None
        or isinstance(devices, str | bytes | Mapping)
        or not isinstance(devices, Iterable)
    ):
        raise DriverError(
            driver,
            "devicehost_enumerate",
            f"returned {type(devices).__name__}, expected a list of Device",
        )
    reported = set() if reported is None else reported
    kept: dict[str, Device] = {}
    dropped = 0
    for device in devices:
        if not isinstance(device, Device):
            problem: str | None = f"returned {type(device).__name__} {device!r}, expected Device"
        elif device.id in kept:
            problem = f"device ID {device.id!r} appears more than once"
        else:
            problem = device.problem()
        if problem is None:
            kept[device.id] = device
            continue
        dropped += 1
        if problem not in reported:
            reported.add(problem)
            log.error("driver %r, resource %r: %s; device dropped", driver, resource, problem)
    return list(kept.values()), dropped


class Scanner:
    """Scans one driver's resources into their ``ResourceState``s; owns its watch threads."""

    def __init__(
        self,
        driver: Driver,
        states: Mapping[str, ResourceState],
        interval: float,
        timeout: float,
        on_error: Callable[[str, str], None] | None = None,
    ) -> None:
        self.driver = driver
        self.states = states
        self.interval = interval
        self.timeout = timeout
        self.on_error = on_error
        self._wake = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._stop = threading.Event()
        self._reported: set[str] = set()
        self._threads: list[threading.Thread] = []

    def notify(self) -> None:
        """Thread-safe: re-enumerate now. Handed to ``devicehost_watch`` as ``notify``."""
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._wake.set)

    async def scan_once(self) -> None:
        for name, state in self.states.items():
            try:
                raw = await self.driver.acall("devicehost_enumerate", self.timeout, resource=name)
                devices, dropped = clean_devices(self.driver.name, name, raw, self._reported)
                if dropped and self.on_error:
                    self.on_error(self.driver.name, "devicehost_enumerate")
            except DriverError as exc:
                if self.on_error:
                    self.on_error(self.driver.name, exc.hook)
                change = state.mark_unhealthy()
                log.error(
                    "%s; its %d devices of %r are reported Unhealthy until it recovers",
                    exc,
                    len(state.devices),
                    name,
                )
                continue
            change = state.update(devices)
            if change:
                log.info("resource %r: %s", name, change)

    async def run(self) -> None:
        """Scan forever: every ``interval`` seconds, and at once after ``notify()``."""
        self._start_watches()
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.interval)
            self._wake.clear()
            await self.scan_once()

    def _start_watches(self) -> None:
        if not self.driver.implements("devicehost_watch"):
            return
        for name in self.states:
            thread = threading.Thread(
                target=self._watch,
                args=(name,),
                daemon=True,
                name=f"watch-{self.driver.name}-{name}",
            )
            self._threads.append(thread)
            thread.start()

    def _watch(self, resource: str) -> None:
        delay = 1.0
        while not self._stop.is_set():
            try:
                self.driver.call(
                    "devicehost_watch", resource=resource, notify=self.notify, stop=self._stop
                )
                delay = 1.0
            except DriverError as exc:
                if self.on_error:
                    self._loop.call_soon_threadsafe(self.on_error, self.driver.name, exc.hook)
                log.error("%s; restarting the watch in %.0f s", exc, delay)
            if self._stop.wait(delay):
                return
            delay = min(delay * 2, WATCH_RESTART_MAX_SECONDS)

    def stop(self) -> None:
        """Ask watch hooks to return (they are daemon threads, so a stuck one is left)."""
        self._stop.set()
