"""Keep one driver's resources current: enumerate on an interval and at once on notify().

Each scan asks the driver's worker for every resource's devices, rebuilds them into the
host's own types (``validation``) and updates the resource's snapshot. A failing or
hanging driver marks only its own devices Unhealthy; nothing it does reaches another
driver. The scanner is per run of the worker: when the worker goes down, the supervisor
marks the devices Unhealthy and a fresh scanner starts with the next run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

from devicehost.drivers.snapshots import Comparison, ResourceState
from devicehost.drivers.supervisor import DriverHandle
from devicehost.drivers.validation import Enumeration, devices_from_plain
from devicehost.edits.simulated_paths import devices_on_node
from devicehost.errors import DriverError, DriverOverLimit
from devicehost.model import Device
from devicehost.system.pacing import in_slices

log = logging.getLogger(__name__)

#: what a device whose attributes the API would refuse loses (it is served without them)
LEFT_OUT = "its attributes left out, the device kept"


class Scanner:
    """Scans one driver's resources into their ``ResourceState``s."""

    def __init__(
        self,
        driver: DriverHandle,
        states: dict[str, ResourceState],
        interval: float,
        timeout: float,
        on_error: Callable[[str, str], None] | None = None,
        on_change: Callable[[str], None] | None = None,
        tree: Path | None = None,
        max_devices: int = 10_000,
        allowed_edits: frozenset[str] = frozenset(),
    ) -> None:
        """``tree``: the driver's simulated tree, where its devices' host paths are moved
        (``simulated_paths``); None on a real node."""
        self.driver = driver
        self.tree = tree
        self.states = states
        self.interval = interval
        self.timeout = timeout
        self.on_error = on_error
        self.on_change = on_change
        self.max_devices = max_devices
        self.allowed_edits = allowed_edits
        self._wake = asyncio.Event()
        self._reported: set[str] = set()
        #: asks the driver for its resources again, adding and withdrawing states (set by
        #: the driver side); run on each interval scan and after ``resources_changed()``
        self.refresh: Callable[[], Awaitable[None]] | None = None
        self._resources_changed = False

    def notify(self, resource: str = "") -> None:
        """Re-enumerate now (called on the event loop when the worker says ``notify``)."""
        self._wake.set()

    def resources_changed(self) -> None:
        """Ask for the resources again now, then re-enumerate (the driver said so)."""
        self._resources_changed = True
        self._wake.set()

    async def scan_once(self) -> None:
        for name, state in self.states.items():
            if state.closed:  # withdrawn (a name another driver declares too)
                continue
            try:
                raw = await self.driver.acall("devicehost_enumerate", self.timeout, resource=name)
                devices, problems, left_out = await self._checked(raw)
                if self.tree is not None:
                    devices = devices_on_node(devices, self.tree)
            except DriverOverLimit as exc:
                if self.on_error:
                    self.on_error(self.driver.name, exc.hook)
                log.error(
                    "%s; refused, and the last good list of %r (%d devices) stays in force",
                    exc,
                    name,
                    len(state.devices),
                )
                continue
            except DriverError as exc:
                if self.on_error:
                    self.on_error(self.driver.name, exc.hook)
                state.mark_unhealthy()
                log.error(
                    "%s; its %d devices of %r are reported Unhealthy until it recovers",
                    exc,
                    len(state.devices),
                    name,
                )
                continue
            if (problems or left_out) and self.on_error:
                self.on_error(self.driver.name, "devicehost_enumerate")
            for problems_of, outcome in ((problems, "device dropped"), (left_out, LEFT_OUT)):
                for problem in problems_of:
                    if problem not in self._reported:
                        self._reported.add(problem)
                        log.error(
                            "driver %r, resource %r: %s; %s",
                            self.driver.name,
                            name,
                            problem,
                            outcome,
                        )
            comparison = Comparison(state.devices)
            await in_slices(devices, comparison.see)
            change = state.replace({d.id: d for d in devices}, comparison)
            if change:
                log.info("resource %r: %s", name, change)
                if self.on_change:
                    self.on_change(name)

    async def _checked(self, raw: object) -> tuple[list[Device], list[str], list[str]]:
        """The devices, why each dropped one was, and why each one kept without its
        attributes was: a list over ``max_devices`` is refused whole, the rest checked
        ``in_slices``."""
        if not isinstance(raw, list):
            return (*devices_from_plain(self.driver.name, raw, self.allowed_edits), [])
        if len(raw) > self.max_devices:
            raise DriverOverLimit(
                self.driver.name,
                "devicehost_enumerate",
                f"{len(raw)} devices, over the limit of {self.max_devices} per resource "
                "(limits.devicesPerResource)",
            )
        enumeration = Enumeration(self.allowed_edits)
        await in_slices(raw, enumeration.add_one)
        return list(enumeration.kept.values()), enumeration.problems, enumeration.left_out

    async def run(self) -> None:
        """Scan forever: every ``interval`` seconds, and at once after ``notify()``. An
        interval scan, and one after ``resources_changed()``, first asks for the driver's
        resources again."""
        while True:
            woken = False
            with contextlib.suppress(TimeoutError):
                woken = await asyncio.wait_for(self._wake.wait(), self.interval)
            self._wake.clear()
            if self.refresh is not None and (self._resources_changed or not woken):
                self._resources_changed = False
                await self.refresh()
            await self.scan_once()
