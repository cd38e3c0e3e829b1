"""What each driver's worker is started with: arguments, environment, first calls.

The host spawns workers through the zygote with these (``process``, ``early``), and
``devicehost run``'s zygote plans its prestart with them (``plan_workers``) right after it
is forked, before the host has imported asyncio or gRPC: this module imports neither.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from devicehost.config.host_config import HostConfig
from devicehost.drivers.zygote import Plan, Planned
from devicehost.simulation.trees import driver_root
from devicehost.system.subprocesses import host_environment

if TYPE_CHECKING:  # discovery is imported after the listing child is forked (below)
    from devicehost.drivers.discovery import Listing


def early_sequence(calls: Mapping[str, dict[str, Any]], ids: Iterator[int]) -> list[dict[str, Any]]:
    """The message body of early calls (hook → arguments), numbered from ``ids``."""
    return [{"call": next(ids), "hook": hook, "kwargs": kwargs} for hook, kwargs in calls.items()]


def worker_argv(
    driver: str, distribution: str, group: str, log_level: str, entry_point: str
) -> list[str]:
    """The arguments of ``python -m devicehost.drivers.worker`` for one driver."""
    return [
        *("--group", group, "--name", driver),
        *("--distribution", distribution, "--log-level", log_level),
        *(("--entry-point", entry_point) if entry_point else ()),
    ]


def worker_environment(driver: str) -> dict[str, str]:
    """The host's environment, with its import path (the worker finds the same drivers) and
    ``DEVICEHOST_DRIVER_NAME``, the driver's entry-point name."""
    env = host_environment(DEVICEHOST_DRIVER_NAME=driver)
    env.setdefault("PYTHONFAULTHANDLER", "1")  # a segfault leaves a Python stack in the log
    return env


def first_calls(config: HostConfig, driver: str, root: Path) -> dict[str, dict[str, Any]]:
    """The calls a driver's bring-up starts with, in order, with their arguments. Sent at
    spawn here and made again by ``Host._bring_up``, which takes an early answer only when
    the arguments are the same: both build them here."""
    section = dict(config.driver_section(driver))
    calls: dict[str, dict[str, Any]] = {}
    if config.simulate:
        calls["devicehost_simulate"] = {
            "root": str(root),
            "config": section,
            "node": config.simulate_node,
        }
    calls["devicehost_configure"] = {
        "config": section,
        "root": str(root),
        "simulated": config.simulate,
    }
    calls["devicehost_resources"] = {}
    calls["devicehost_notes"] = {}
    return calls


def plan_workers(config: HostConfig, sim_root: Path | None) -> Plan:
    """Run in the zygote at its fork, in two steps. This call starts reading the installed
    entry points, in a child, while the zygote imports the worker's code; the function it
    returns waits for them and gives the workers ``start_workers`` would spawn, with the
    first calls it would send, and the listing (plain) for the host, which then need not
    read the metadata again. Reads metadata only, never imports a driver."""
    reading = _read_listing_in_a_child()

    def plan() -> tuple[list[Planned], Any]:
        from devicehost.drivers.discovery import DRIVER_GROUP, drivers_to_start

        listing = reading()
        planned = []
        allow, deny = config.enabled_drivers, config.disabled_drivers
        for info in drivers_to_start(listing, allow=allow, deny=deny):
            root = driver_root(sim_root, config.root, info.name)
            argv = worker_argv(
                info.name, info.distribution, DRIVER_GROUP, config.log_level, info.entry_point
            )
            calls = first_calls(config, info.name, root)
            sequence = early_sequence(calls, itertools.count(1))
            planned.append(Planned(info.name, argv, worker_environment(info.name), sequence))
        return planned, listing.to_plain()

    return plan


def _read_listing_in_a_child() -> Callable[[], Listing]:
    """Start reading the installed entry points in a short-lived child (the zygote, and
    every worker forked from it, then never carry the metadata reader: a driver never needs
    it); the function returned waits for the listing."""
    read, write = os.pipe()
    pid = os.fork()  # before discovery is imported (~6 ms): the child reads meanwhile
    if pid == 0:
        code = 1
        try:
            from devicehost.drivers.discovery import read_listing

            os.close(read)
            with os.fdopen(write, "wb") as out:
                out.write(json.dumps(read_listing().to_plain()).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)

    def listing() -> Listing:
        from devicehost.drivers.discovery import Listing

        with os.fdopen(read, "rb") as result:
            data = result.read()
        os.waitpid(pid, 0)
        return Listing.from_plain(json.loads(data))

    return listing
