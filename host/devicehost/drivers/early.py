"""Start the drivers' worker processes before the host has imported the rest of itself.

A worker needs a fork from the zygote and its driver's imports; the host needs gRPC and
the rest of itself. Done one after the other, the two add up at every cold start.
``devicehost run`` therefore lists the drivers and spawns their workers first (this module
imports little), and sends each its first calls at once (simulate under ``--simulate``,
configure, resources, notes, run in that order in the worker): the workers import their
drivers and answer those while the host imports, and the bring-up takes the answers
(``WorkerProcess.send_early``). The simulated tree is made here for the same reason; the
host owns it from then on. The supervisor adopts each spawned worker for its first run.
"""

from __future__ import annotations

import asyncio
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devicehost.config import HostConfig
from devicehost.drivers.discovery import DRIVER_GROUP, PluginSet, load_plugins
from devicehost.drivers.process import WorkerExited, WorkerProcess
from devicehost.drivers.zygote import Zygote
from devicehost.simulation import driver_root, make_sim_root


@dataclass
class EarlyStart:
    """The discovered plugins, and one spawned (not yet brought up) worker per driver."""

    plugins: PluginSet
    workers: dict[str, WorkerProcess] = field(default_factory=dict)
    sim_root: Path | None = None

    async def stop(self, grace: float) -> None:
        """Stop the workers no driver handle took over, and remove the simulated tree
        (the host failed to start, or it is stopping: it removes the tree too)."""
        while self.workers:
            _, worker = self.workers.popitem()
            await worker.stop(grace)
        if self.sim_root is not None:
            shutil.rmtree(self.sim_root, ignore_errors=True)


async def start_workers(config: HostConfig, zygote: Zygote) -> EarlyStart:
    """Discover the drivers ``config`` enables and spawn a worker for each (a worker that
    cannot be spawned is left to its supervisor, which retries and reports it)."""
    plugins = load_plugins(allow=config.enabled_drivers, deny=config.disabled_drivers)
    early = EarlyStart(plugins, sim_root=make_sim_root() if config.simulate else None)
    workers = {
        info.name: WorkerProcess(
            info.name,
            info.distribution,
            DRIVER_GROUP,
            zygote,
            on_notify=lambda resource: None,  # replaced when a driver handle adopts it
            on_watch_error=lambda resource, message: None,
            log_level=config.log_level,
            entry_point=info.entry_point,
        )
        for info in plugins.drivers
    }
    # Side by side: each spawn waits for the zygote to fork and answer (~5 ms on a busy
    # node); one after the other, those waits added up before the host could go on.
    spawned = await asyncio.gather(*(w.spawn() for w in workers.values()), return_exceptions=True)
    for (name, worker), outcome in zip(workers.items(), spawned, strict=True):
        if isinstance(outcome, WorkerExited):
            continue  # left to its supervisor, which retries and reports it
        if isinstance(outcome, BaseException):
            raise outcome  # the host is ending; its zygote takes the workers with it
        early.workers[name] = worker
        # Run while the host imports the rest of itself; the bring-up takes the answers.
        root = driver_root(early.sim_root, config.root, name)
        worker.send_early(first_calls(config, name, root), then_enumerate=True)
    return early


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
