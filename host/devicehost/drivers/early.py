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

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devicehost.config import HostConfig
from devicehost.drivers.discovery import DRIVER_GROUP, PluginSet, load_plugins
from devicehost.drivers.process import WorkerExited, WorkerProcess
from devicehost.drivers.zygote import Zygote
from devicehost.simulation import make_sim_root


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
    for info in plugins.drivers:
        worker = WorkerProcess(
            info.name,
            info.distribution,
            DRIVER_GROUP,
            zygote,
            on_notify=lambda resource: None,  # replaced when a driver handle adopts it
            on_watch_error=lambda resource, message: None,
            log_level=config.log_level,
            entry_point=info.entry_point,
        )
        try:
            await worker.spawn()
        except WorkerExited:
            continue
        early.workers[info.name] = worker
        _send_first_calls(config, worker, early.sim_root)
    return early


def _send_first_calls(config: HostConfig, worker: WorkerProcess, sim_root: Path | None) -> None:
    """Queue the calls a driver's bring-up starts with (``Host._bring_up``), with the same
    arguments: the worker runs them in order once its driver is imported, while the host is
    still importing gRPC, and the bring-up finds the answers waiting."""
    root = config.root if sim_root is None else sim_root / worker.driver
    if sim_root is not None:
        root.mkdir(exist_ok=True)
    section = dict(config.driver_section(worker.driver))
    calls: list[tuple[str, dict[str, Any]]] = []
    if config.simulate:
        simulate = {"root": str(root), "config": section, "node": config.simulate_node}
        calls.append(("devicehost_simulate", simulate))
    configure = {"config": section, "root": str(root), "simulated": config.simulate}
    calls += [("devicehost_configure", configure), ("devicehost_resources", {})]
    calls.append(("devicehost_notes", {}))
    worker.send_early(calls)
