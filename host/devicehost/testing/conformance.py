"""``check_driver()``: the conformance battery every driver runs on itself.

It finds the driver through its real entry point (so the distribution must be installed),
drives its hooks through the same handle the host uses, and collects every problem
instead of stopping at the first::

    def test_conformance(fake_root):
        build_my_node(fake_root)
        report = check_driver("mydriver", fake_root, config={"chips": 4})
        assert report.devices["example.com/widget"] == 4

Checked: the driver loads and validates; ``resources`` returns valid, unique
``ResourceSpec``s; every enumeration returns valid, unique IDs with legal health; every
healthy device alone composes (as the host composes an Allocate: the resource's edits, the
device's, and the optional ``allocate`` answer) to edits that give the container something,
without a clash; an ``allocate`` hook, when implemented, refuses an unknown ID;
``preferred_allocation`` (when implemented) returns valid choices; every hook returns
within ``timeout``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devicehost.compose import CompositionClash, compose
from devicehost.errors import DriverError
from devicehost.model import NO_EDITS, Allocation, Device, ResourceSpec
from devicehost.plugins import Driver, DriverStatus, load_plugins
from devicehost.scan import clean_devices

UNKNOWN_ID = "devicehost-conformance-no-such-device"


class ConformanceError(AssertionError):
    """The driver broke the hook contract; the message lists every problem found."""

    def __init__(self, driver: str, problems: list[str]) -> None:
        self.problems = problems
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
    def __init__(self, driver: Driver, timeout: float) -> None:
        self.driver = driver
        self.timeout = timeout
        self.problems: list[str] = []
        self.report = ConformanceReport(driver.name)

    def call(self, hook: str, **kwargs: Any) -> Any:
        started = time.monotonic()
        try:
            return self.driver.call(hook, **kwargs)
        finally:
            elapsed = time.monotonic() - started
            if elapsed > self.timeout:
                self.problems.append(
                    f"{hook} took {elapsed:.2f} s, over the {self.timeout} s hook timeout"
                )
            if elapsed > self.report.slowest_hook[1]:
                self.report.slowest_hook = (hook, elapsed)

    def resource(self, spec: ResourceSpec) -> None:
        name = spec.name
        try:
            raw = self.call("devicehost_enumerate", resource=name)
            devices, dropped = clean_devices(self.driver.name, name, raw, set())
        except DriverError as exc:
            self.problems.append(str(exc))
            return
        if dropped:
            self.problems.append(
                f"{name}: enumerate returned {dropped} invalid or duplicate devices (see the "
                "log for each)"
            )
        self.report.devices[name] = len(devices)
        healthy = [d.id for d in devices if d.healthy]
        self.report.healthy[name] = len(healthy)
        by_id = {d.id: d for d in devices}
        for device_id in healthy:
            self.allocation(spec, by_id, [device_id])
        if self.driver.implements("devicehost_allocate"):
            try:
                self.call("devicehost_allocate", resource=name, device_ids=[UNKNOWN_ID])
                self.problems.append(
                    f"{name}: allocate accepted the unknown ID {UNKNOWN_ID!r}; "
                    "it must raise (devicehost.UnknownDevice)"
                )
            except DriverError:
                pass
        if self.driver.implements("devicehost_preferred_allocation") and healthy:
            self.preferred(name, healthy)

    def allocation(self, spec: ResourceSpec, devices: Mapping[str, Device], ids: list[str]) -> None:
        name, extra = spec.name, NO_EDITS
        if self.driver.implements("devicehost_allocate"):
            try:
                result = self.call("devicehost_allocate", resource=name, device_ids=ids)
            except DriverError as exc:
                self.problems.append(f"{name}: allocating healthy {ids} failed: {exc}")
                return
            if result is not None and not isinstance(result, Allocation):
                self.problems.append(
                    f"{name}: allocate({ids}) returned {type(result).__name__}, "
                    "expected Allocation or None"
                )
                return
            extra = result or NO_EDITS
        try:
            edits = compose(spec, devices, ids, extra)
        except CompositionClash as exc:
            self.problems.append(f"{name}: allocating {ids} clashes: {exc}")
            return
        if not (edits.envs or edits.mounts or edits.devices or edits.cdi_devices):
            self.problems.append(f"{name}: allocating {ids} gave the container nothing")

    def preferred(self, name: str, healthy: list[str]) -> None:
        for size in range(1, min(len(healthy), 4) + 1):
            must = healthy[-1:]
            try:
                chosen = self.call(
                    "devicehost_preferred_allocation",
                    resource=name,
                    available=healthy,
                    must_include=must,
                    size=size,
                )
            except DriverError as exc:
                self.problems.append(f"{name}: preferred_allocation(size={size}) raised: {exc}")
                continue
            if chosen is None:
                continue
            chosen = list(chosen)
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

    With ``simulated=True`` the driver first builds its simulated hardware under ``root``
    (``devicehost_simulate``; ``node`` names the simulated machine, "" the driver's default)
    and is configured as under ``devicehost demo``.
    """
    plugins = load_plugins(allow=[name])
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
    battery = _Battery(plugins.drivers[0], timeout)
    root = Path(root)
    try:
        if simulated:
            battery.call("devicehost_simulate", root=root, config=dict(config or {}), node=node)
        battery.call(
            "devicehost_configure", config=dict(config or {}), root=root, simulated=simulated
        )
        results = battery.call("devicehost_resources")
        specs = [s for specs in results or () for s in specs or ()]
    except DriverError as exc:
        raise ConformanceError(name, [str(exc)]) from exc
    valid = [s for s in specs if isinstance(s, ResourceSpec)]
    if len(valid) != len(specs):
        battery.problems.append(f"resources returned non-ResourceSpec values: {specs!r}")
    names = [s.name for s in valid]
    if len(set(names)) != len(names):
        battery.problems.append(f"resources returned a name twice: {names}")
    for spec in {s.name: s for s in valid}.values():
        battery.resource(spec)
    try:
        battery.call("devicehost_shutdown")
    except DriverError as exc:
        battery.problems.append(str(exc))
    if battery.problems:
        raise ConformanceError(name, battery.problems)
    return battery.report
