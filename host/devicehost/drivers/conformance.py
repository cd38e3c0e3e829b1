"""The conformance battery: one driver run in its own worker, exactly as the host runs it,
its every answer checked against the hook contract. Driver authors reach it as
``devicehost.testing.check_driver`` (whose module says what is checked)."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devicehost.drivers.discovery import DRIVER_GROUP, DriverStatus, load_plugins
from devicehost.drivers.process import WorkerExited, WorkerProcess
from devicehost.drivers.validation import (
    Invalid,
    choice_from_plain,
    devices_from_plain,
    edits_from_plain,
    resources_from_plain,
)
from devicehost.drivers.zygote import Zygote
from devicehost.edits.compose import CompositionClash, compose
from devicehost.errors import DriverError, DriverUnavailable, RequestRefused, UnknownDevice
from devicehost.model import NO_EDITS, Device, ResourceSpec

UNKNOWN_ID = "devicehost-conformance-no-such-device"
#: A plugin directory path as long as the kubelet's default, to check socket path lengths.
KUBELET_PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")


class ConformanceError(AssertionError):
    """The driver broke the hook contract; the message lists every problem found.

    ``unavailable`` is the driver's own reason when it had nothing to check on that root
    (no hardware there), so a caller can say what to try in its own terms."""

    def __init__(self, driver: str, problems: list[str], unavailable: str = "") -> None:
        self.driver = driver
        self.problems = problems
        self.unavailable = unavailable
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"driver {driver!r} failed {len(problems)} conformance checks:\n{lines}")


@dataclass
class ConformanceReport:
    """What the battery saw: device counts per resource and the slowest hook call."""

    driver: str
    devices: dict[str, int] = field(default_factory=dict)
    healthy: dict[str, int] = field(default_factory=dict)
    slowest_hook: tuple[str, float] = ("", 0.0)


class _Battery:
    """Drives the driver in its own worker process, exactly as the host does."""

    def __init__(self, process: WorkerProcess, timeout: float) -> None:
        self.process = process
        self.driver = process.driver
        self.timeout = timeout
        self.problems: list[str] = []
        self.report = ConformanceReport(process.driver)

    async def call(self, hook: str, **kwargs: Any) -> Any:
        started = time.monotonic()
        try:
            return await self.process.call(hook, self.timeout, **kwargs)
        finally:
            elapsed = time.monotonic() - started
            if elapsed > self.report.slowest_hook[1]:
                self.report.slowest_hook = (hook, elapsed)

    async def resource(self, spec: ResourceSpec) -> None:
        name = spec.name
        try:
            raw = await self.call("devicehost_enumerate", resource=name)
            devices, problems = devices_from_plain(self.driver, raw)
        except DriverError as exc:
            self.problems.append(str(exc))
            return
        self.problems += [f"{name}: enumerate returned an invalid device: {p}" for p in problems]
        self.report.devices[name] = len(devices)
        table = {d.id: d for d in devices}
        healthy = [d.id for d in devices if d.healthy]
        self.report.healthy[name] = len(healthy)
        for device_id in healthy:
            await self.allocation(spec, table, [device_id])
        if len(healthy) > 1:
            await self.allocation(spec, table, healthy)
        if "devicehost_allocate" in self.process.hooks:
            await self.unknown_id(name)
        if "devicehost_preferred_allocation" in self.process.hooks and healthy:
            await self.preferred(name, healthy)

    async def unknown_id(self, name: str) -> None:
        """``allocate`` given an ID it does not know raises ``UnknownDevice`` naming the
        resource and that ID: the host's snapshot can be older than the driver's view."""
        expected = f"raise devicehost.UnknownDevice(resource={name!r}, device_id={UNKNOWN_ID!r})"
        try:
            await self.call("devicehost_allocate", resource=name, device_ids=[UNKNOWN_ID])
        except UnknownDevice as exc:
            if (exc.resource, exc.device_id) != (name, UNKNOWN_ID):
                self.problems.append(
                    f"{name}: allocate refused the unknown ID with UnknownDevice(resource="
                    f"{exc.resource!r}, device_id={exc.device_id!r}); it must {expected}"
                )
            return
        except (DriverError, RequestRefused) as exc:
            self.problems.append(
                f"{name}: allocate given the unknown ID {UNKNOWN_ID!r} raised "
                f"{type(exc).__name__} ({exc}); it must {expected}"
            )
            return
        self.problems.append(
            f"{name}: allocate accepted the unknown ID {UNKNOWN_ID!r}; it must {expected}"
        )

    async def allocation(
        self, spec: ResourceSpec, devices: Mapping[str, Device], ids: list[str]
    ) -> None:
        """What the host would compose for ``ids``: it must give the container something."""
        extra = NO_EDITS
        if "devicehost_allocate" in self.process.hooks:
            try:
                extra = edits_from_plain(
                    await self.call("devicehost_allocate", resource=spec.name, device_ids=ids)
                )
            except (DriverError, Invalid, RequestRefused, UnknownDevice) as exc:
                self.problems.append(f"{spec.name}: allocating healthy {ids} failed: {exc}")
                return
        try:
            edits = compose(spec, devices, ids, extra)
        except CompositionClash as clash:
            self.problems.append(f"{spec.name}: the edits of {ids} clash: {clash}")
            return
        if not edits:
            self.problems.append(f"{spec.name}: a container given {ids} would get nothing")

    async def preferred(self, name: str, healthy: list[str]) -> None:
        for size in range(1, min(len(healthy), 4) + 1):
            must = healthy[-1:]
            try:
                chosen = choice_from_plain(
                    await self.call(
                        "devicehost_preferred_allocation",
                        resource=name,
                        available=healthy,
                        must_include=must,
                        size=size,
                    )
                )
            except (DriverError, Invalid, RequestRefused, UnknownDevice) as exc:
                self.problems.append(f"{name}: preferred_allocation(size={size}) failed: {exc}")
                continue
            if chosen is None:
                continue
            if (
                len(chosen) != size
                or len(set(chosen)) != size
                or not set(chosen) <= set(healthy)
                or not set(must) <= set(chosen)
            ):
                self.problems.append(
                    f"{name}: preferred_allocation(size={size}, must_include="
                    f"{must}) returned {chosen}"
                )


def check_driver(
    name: str,
    root: os.PathLike[str] | str,
    *,
    config: Mapping[str, Any] | None = None,
    simulated: bool = False,
    node: str = "",
    timeout: float = 10.0,
) -> ConformanceReport:
    """Run the battery on the installed driver ``name``; raise ``ConformanceError`` on failure.

    The driver runs in its own worker process, as under the host. With ``simulated=True``
    it first builds its simulated hardware (``node``: a simulated machine's name) under
    ``root`` (``devicehost_simulate``) and is configured as under ``devicehost demo``.
    """
    return asyncio.run(_check(name, Path(root), dict(config or {}), simulated, node, timeout))


async def _check(
    name: str, root: Path, config: dict[str, Any], simulated: bool, node: str, timeout: float
) -> ConformanceReport:
    plugins = load_plugins()
    info = next((i for i in plugins.infos if i.name == name and i.kind == "driver"), None)
    if info is None:
        raise ConformanceError(
            name,
            [
                f"no entry point {name!r} in group devicehost.drivers; "
                "is the distribution installed?"
            ],
        )
    if info.status is not DriverStatus.ACTIVE:
        raise ConformanceError(name, [f"driver is {info.status}: {info.reason}"])
    zygote = Zygote()
    process = WorkerProcess(
        name, info.distribution, DRIVER_GROUP, zygote, lambda r: None, lambda r, m: None
    )
    try:
        try:
            await process.start(timeout)
        except (DriverError, DriverUnavailable, WorkerExited) as exc:
            raise ConformanceError(name, [f"the driver did not load: {exc}"]) from exc
        battery = _Battery(process, timeout)
        try:
            await _run(battery, root, config, simulated, node)
        finally:
            await process.stop(2.0)
    finally:
        await zygote.close()
    if battery.problems:
        raise ConformanceError(name, battery.problems)
    return battery.report


async def _run(
    battery: _Battery, root: Path, config: dict[str, Any], simulated: bool, node: str
) -> None:
    try:
        if simulated:
            await battery.call("devicehost_simulate", root=str(root), config=config, node=node)
        await battery.call(
            "devicehost_configure", config=config, root=str(root), simulated=simulated
        )
        raw = await battery.call("devicehost_resources")
        specs, problems = resources_from_plain(battery.driver, raw, KUBELET_PLUGIN_DIR)
        await battery.call("devicehost_notes")
    except DriverError as exc:
        raise ConformanceError(battery.driver, [str(exc)]) from exc
    except DriverUnavailable as exc:  # from configure or resources: nothing to check here
        raise ConformanceError(
            battery.driver,
            [
                f"the driver is unavailable on this root: {exc} (give check_driver a root "
                "with its hardware, or simulated=True)"
            ],
            unavailable=str(exc),
        ) from exc
    battery.problems += [f"resources returned an invalid resource: {p}" for p in problems]
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        battery.problems.append(f"resources returned a name twice: {names}")
    for spec in {s.name: s for s in specs}.values():
        await battery.resource(spec)
    try:
        await battery.call("devicehost_shutdown")
    except DriverError as exc:
        battery.problems.append(str(exc))
