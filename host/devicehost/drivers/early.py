"""Start the drivers' worker processes before the host has imported the rest of itself.

A worker needs a fork from the zygote and its driver's imports; the host needs gRPC,
OpenTelemetry and the Prometheus client. Done one after the other, the two add up at
every cold start. ``devicehost run`` therefore lists the drivers and spawns their workers
first (this module imports little), then imports the host while the workers import their
drivers; the supervisor adopts each spawned worker for its first run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from devicehost.config import HostConfig
from devicehost.drivers.discovery import DRIVER_GROUP, PluginSet, load_plugins
from devicehost.drivers.process import WorkerExited, WorkerProcess
from devicehost.drivers.zygote import Zygote


@dataclass
class EarlyStart:
    """The discovered plugins, and one spawned (not yet brought up) worker per driver."""

    plugins: PluginSet
    workers: dict[str, WorkerProcess] = field(default_factory=dict)

    async def stop(self, grace: float) -> None:
        """Stop the workers no driver handle took over (the host failed to start)."""
        while self.workers:
            _, worker = self.workers.popitem()
            await worker.stop(grace)


async def start_workers(config: HostConfig, zygote: Zygote) -> EarlyStart:
    """Discover the drivers ``config`` enables and spawn a worker for each (a worker that
    cannot be spawned is left to its supervisor, which retries and reports it)."""
    plugins = load_plugins(allow=config.enabled_drivers, deny=config.disabled_drivers)
    early = EarlyStart(plugins)
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
    return early
