"""Start the drivers' worker processes before the host has imported the rest of itself.

A worker needs a fork from the zygote and its driver's imports; the host needs gRPC and
the rest of itself. Done one after the other, the two add up at every cold start.
``devicehost run`` therefore forks the zygote with a plan (``plan_workers``) before it
imports most of itself: the zygote lists the drivers from their metadata and forks their
workers at once, each sent its first calls (simulate under ``--simulate``, configure,
resources, notes, run in that order in the worker). The workers import their drivers and
answer those on the CPU the host leaves idle while it imports; ``start_workers`` then
takes them over (``WorkerProcess.adopt``), spawning any the zygote did not start, and the
bring-up takes the answers. The simulated tree is made before the fork for the same
reason; the host owns it from then on. The supervisor adopts each worker for its first run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from pathlib import Path

from devicehost.config.host_config import HostConfig
from devicehost.drivers.discovery import DRIVER_GROUP, DriverInfo, Listing, PluginSet, load_plugins
from devicehost.drivers.plan import first_calls
from devicehost.drivers.process import WorkerExited, WorkerProcess
from devicehost.drivers.zygote import Prestarted, Zygote
from devicehost.simulation.trees import driver_root, make_sim_root, remove_sim_root

log = logging.getLogger(__name__)


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
            remove_sim_root(self.sim_root)


#: How long the host waits for the zygote's prestarted workers (it started them ~100 ms
#: before the host asks; a zygote that does not answer only costs the host this wait).
PRESTART_WAIT_SECONDS = 2.0


async def start_workers(
    config: HostConfig, zygote: Zygote, sim_root: Path | None = None
) -> EarlyStart:
    """Discover the drivers ``config`` enables and take over or spawn a worker for each (a
    worker that cannot be spawned is left to its supervisor, which retries and reports
    it). ``sim_root``: the simulated tree, made before the zygote's fork (under
    ``--simulate``; made here otherwise)."""
    prestarted = await zygote.take_prestarted(PRESTART_WAIT_SECONDS)
    listing = None
    with contextlib.suppress(KeyError, TypeError, ValueError):
        listing = Listing.from_plain(zygote.prestart_result)
        log.debug("installed drivers and policies: as the zygote listed them at its fork")
    plugins = load_plugins(config.enabled_drivers, config.disabled_drivers, listing)
    if config.simulate and sim_root is None:
        sim_root = make_sim_root(config.simulate_dir)
    early = EarlyStart(plugins, sim_root=sim_root)
    infos = {info.name: info for info in plugins.drivers}
    workers = {name: _new_worker(info, config, zygote) for name, info in infos.items()}
    for name in list(workers):
        ready = prestarted.pop(name, None)
        if ready is None:
            continue
        if await _adopt(workers[name], ready, zygote):
            early.workers[name] = workers.pop(name)
        else:
            workers[name] = _new_worker(infos[name], config, zygote)
    for leftover in prestarted.values():  # a driver the host does not start: listing changed
        log.debug(
            "driver %r: worker (pid %d) not wanted; stopped", leftover.name, leftover.child.pid
        )
        zygote.discard(leftover)
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


def _new_worker(info: DriverInfo, config: HostConfig, zygote: Zygote) -> WorkerProcess:
    return WorkerProcess(
        info.name,
        info.distribution,
        DRIVER_GROUP,
        zygote,
        on_notify=lambda resource: None,  # replaced when a driver handle adopts it
        on_watch_error=lambda resource, message: None,
        log_level=config.log_level,
        entry_point=info.entry_point,
    )


async def _adopt(worker: WorkerProcess, ready: Prestarted, zygote: Zygote) -> bool:
    """Take over the worker the zygote started for this driver, when it runs the same
    driver the host lists; otherwise stop it (False: the caller starts a new one)."""
    if ready.argv != worker.argv:  # the installed drivers changed since the zygote looked
        log.debug(
            "driver %r: the worker the zygote started (pid %d) is for another installation; "
            "stopped",
            ready.name,
            ready.child.pid,
        )
        zygote.discard(ready)
        return False
    try:
        await worker.adopt(ready)
    except OSError as exc:  # its channel is unusable (the fds belong to the worker object)
        log.warning(
            "driver %r: its worker cannot be taken over (%s); starting another", ready.name, exc
        )
        zygote.kill(ready.child.pid)
        return False
    log.debug(
        "driver %r: worker (pid %d) started by the zygote at its fork", ready.name, ready.child.pid
    )
    return True
