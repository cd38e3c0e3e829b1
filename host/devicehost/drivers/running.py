"""The drivers running on this host: each started in its own worker, brought up on its own
timeline, scanned, and restarted with back-off when it goes down.

Bring-up is simulate (under ``--simulate``) → configure → resources → notes → claim the
resource names (``ownership``) → a first snapshot → ``on_ready`` → watch. A slow, hung or
crashing driver never delays another's. When a worker goes down its devices are reported
Unhealthy (its resources stay claimed) and it is restarted. Nothing here serves the
kubelet: the host connects ``on_ready`` and the resource table's callbacks to its faces.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable, Collection
from pathlib import Path
from typing import Any

from devicehost.config.host_config import HostConfig
from devicehost.drivers.discovery import DriverInfo, DriverStatus, PluginSet, load_plugins
from devicehost.drivers.early import EarlyStart
from devicehost.drivers.ownership import ResourceTable
from devicehost.drivers.plan import first_calls
from devicehost.drivers.process import WorkerProcess
from devicehost.drivers.scan import Scanner
from devicehost.drivers.snapshots import ResourceState
from devicehost.drivers.supervisor import STOP_GRACE_SECONDS, DriverFinal, DriverHandle
from devicehost.drivers.validation import notes_from_plain, resources_from_plain
from devicehost.drivers.zygote import Zygote
from devicehost.edits.compose import PolicyChain
from devicehost.edits.simulated_paths import spec_on_node
from devicehost.errors import DriverError, DriverUnavailable
from devicehost.model import ResourceSpec
from devicehost.simulation.trees import driver_root, make_sim_root, remove_sim_root
from devicehost.system import supervision
from devicehost.telemetry.facade import Telemetry
from devicehost.telemetry.metrics import Gauge

log = logging.getLogger(__name__)

#: a driver that should serve counts against readiness once it has gone down this many
#: runs in a row (its first restarts did not help)
NOT_READY_AFTER_RUNS = 3
#: ``extra`` of the log line for a driver that refused its config section
CONFIG_REFUSED = {"devicehost_config_refused": True}
WORKERS_STOP_SECONDS = 0.9

#: told of a driver whose first snapshot of its resources is taken (each bring-up)
OnReady = Callable[[DriverHandle, dict[str, ResourceState]], Awaitable[None]]


class RunningDrivers:
    """Every installed driver of this host, its worker, scanner and claimed resources."""

    def __init__(
        self,
        config: HostConfig,
        telemetry: Telemetry,
        table: ResourceTable,
        zygote: Zygote | None = None,
        early: EarlyStart | None = None,
    ) -> None:
        self.config = config
        self.telemetry = telemetry
        self.table = table
        #: Forks the drivers' workers; owned here and ended on stop.
        self.zygote = zygote or Zygote()
        self.zygote.on_death = lambda: telemetry.metrics.helper_deaths.inc(helper="zygote")
        #: Drivers discovered and workers spawned before the host was built (``early``).
        self._early = early
        self.plugins: PluginSet | None = early.plugins if early else None
        self.policies: PolicyChain | None = None
        self.handles: dict[str, DriverHandle] = {}
        self.scanners: dict[str, Scanner] = {}
        #: set once every driver was started and has come up, failed or been waited for
        self.launched = asyncio.Event()
        self.on_ready: OnReady | None = None
        self._driver_tasks: list[asyncio.Task[None]] = []
        self._scan_tasks: dict[str, asyncio.Task[None]] = {}
        #: made by the early start when there was one (the workers are building in it);
        #: owned from here and removed on stop
        self._sim_root: Path | None = None
        if early is not None:
            self._sim_root, early.sim_root = early.sim_root, None
        metrics = telemetry.metrics
        metrics.add_gauge(
            Gauge(
                "devicehost_devices",
                "Devices advertised now, by resource and health.",
                self._device_counts,
            )
        )
        metrics.add_gauge(
            Gauge(
                "devicehost_driver_info",
                "Installed drivers (value 1), by name, version, status.",
                self._driver_info,
            )
        )
        metrics.add_gauge(
            Gauge(
                "devicehost_driver_zombies",
                "Finished child processes a driver's worker has not reaped, at the last count.",
                self._driver_zombies,
            )
        )
        metrics.add_gauge(
            Gauge(
                "devicehost_driver_up",
                "1 while a driver's worker process is running and brought up, else 0.",
                self._driver_up,
            )
        )

    # -- what the status endpoints and metrics read -----------------------------------------

    def _device_counts(self) -> list[tuple[dict[str, str], float]]:
        samples = []
        for name, claim in sorted(self.table.claims.items()):
            healthy = sum(d.healthy for d in claim.state.devices.values())
            total = len(claim.state.devices)
            samples.append(({"resource": name, "health": "Healthy"}, float(healthy)))
            samples.append(({"resource": name, "health": "Unhealthy"}, float(total - healthy)))
        return samples

    def _driver_zombies(self) -> list[tuple[dict[str, str], float]]:
        return [
            ({"driver": name}, float(handle.process.zombies if handle.process else 0))
            for name, handle in sorted(self.handles.items())
        ]

    def _driver_info(self) -> list[tuple[dict[str, str], float]]:
        infos = self.plugins.infos if self.plugins else []
        return [
            ({"driver": i.name, "version": i.version, "status": str(i.status)}, 1.0)
            for i in infos
            if i.kind == "driver"
        ]

    def _driver_up(self) -> list[tuple[dict[str, str], float]]:
        return [
            ({"driver": name}, 1.0 if h.up and h.info.status is DriverStatus.ACTIVE else 0.0)
            for name, h in sorted(self.handles.items())
        ]

    def states(
        self, node_file_errors: Callable[[str, list[str]], list[str]]
    ) -> list[dict[str, Any]]:
        """Every installed plugin as ``devicehost drivers`` shows it, live: status, reason,
        restarts, hooks running past their timeout, resources; and node files whose last
        write failed (``node_file_errors`` of the driver and its resources, retried)."""
        infos = self.plugins.infos if self.plugins else []
        rows: list[dict[str, Any]] = []
        for info in infos:
            handle = self.handles.get(info.name)
            process = handle.process if handle is not None else None
            resources = [r for r, claim in self.table.claims.items() if claim.driver.info is info]
            rows.append(
                {
                    "name": info.name,
                    "kind": info.kind,
                    "distribution": info.distribution,
                    "version": info.version,
                    "status": str(info.status),
                    "reason": info.reason,
                    "notes": list(info.notes),
                    "restarts": info.restarts,
                    "hung": process.hung_hooks() if process is not None else [],
                    "resources": resources,
                    "nodeFileErrors": node_file_errors(info.name, resources),
                }
            )
        return rows

    def down(self) -> list[str]:
        """Drivers that should serve but have been down through ``NOT_READY_AFTER_RUNS``
        runs in a row (their first restarts did not help), each with the reason
        ``devicehost drivers`` shows. A driver that found no hardware (unavailable) is no
        reason: a node without a vendor's devices is a ready node."""
        return [
            f"driver {name!r} is {h.info.status} (down {h.runs_down} times in a row): "
            f"{h.info.reason}"
            for name, h in sorted(self.handles.items())
            if h.runs_down >= NOT_READY_AFTER_RUNS
            and h.info.status in (DriverStatus.RESTARTING, DriverStatus.CRASH_LOOPING)
        ]

    def simulated_root(self, driver: str) -> Path | None:
        """The simulated tree of the driver named ``driver``, or None when not simulating."""
        if self._sim_root is None or not (self._sim_root / driver).is_dir():
            return None
        return self._sim_root / driver

    def driver_root(self, driver: DriverHandle) -> Path:
        """The host's ``/`` as this driver sees it: its own simulated tree, or ``--root``."""
        return driver_root(self._sim_root, self.config.root, driver.name)

    # -- start -----------------------------------------------------------------------------

    async def launch(self, wait: float) -> None:
        """Start every enabled driver; return once each has come up, failed or been found
        unavailable, or after ``wait`` seconds (a driver still starting goes on)."""
        config = self.config
        if self.plugins is None:
            self.plugins = load_plugins(allow=config.enabled_drivers, deny=config.disabled_drivers)
        self.policies = PolicyChain(self.plugins.pm)
        names = {info.name for info in self.plugins.infos}
        for key, name in [
            *((f"drivers.{n}", n) for n in config.drivers),
            *((f"containerEdits.allow.{n}", n) for n in config.edits_allowed),
        ]:
            if name not in names:
                log.warning(
                    "config %s: no installed driver is named %r; section ignored (installed: %s)",
                    key,
                    name,
                    ", ".join(sorted(names)),
                )
        if config.simulate:
            if self._sim_root is None:
                self._sim_root = make_sim_root(config.simulate_dir)
            node = config.simulate_node or "each driver's default"
            log.info("simulating hardware (%s) under %s", node, self._sim_root)
        for info in self.plugins.drivers:
            self._start_driver(info)
        settled = [asyncio.create_task(h.settled.wait()) for h in self.handles.values()]
        if settled:
            _, waiting = await asyncio.wait(settled, timeout=wait)
            for task in waiting:
                task.cancel()
        for info in self.plugins.infos:
            log.info(
                "%s %s (%s %s): %s%s",
                info.kind,
                info.name,
                info.distribution,
                info.version,
                info.status,
                f" — {info.reason}" if info.reason else "",
            )
            for note in info.notes:
                log.info("driver %s: %s", info.name, note)
        self.launched.set()

    def _supervised(self, name: str, run: Callable[[], Awaitable[object]]) -> asyncio.Task[None]:
        return supervision.start(name, run, self.telemetry.task_restarted)

    def _start_driver(self, info: DriverInfo) -> None:
        info.status = DriverStatus.STARTING
        metrics = self.telemetry.metrics
        handle = DriverHandle(
            info,
            self.zygote,
            start_timeout=self.config.driver_start_timeout,
            on_notify=functools.partial(self._notify_driver, info.name),
            log_level=self.config.log_level,
            on_restart=lambda name: metrics.driver_restarts.inc(driver=name),
            on_error=self.telemetry.driver_error,
            prestarted=self._early.workers.pop(info.name, None) if self._early else None,
            on_task_restart=self.telemetry.task_restarted,
            on_start_failure=lambda name: metrics.driver_start_failures.inc(driver=name),
            on_resources_changed=functools.partial(self._resources_changed, info.name),
            unavailable_retry=self.config.unavailable_retry_interval,
        )
        handle.max_zombies = self.config.max_zombies_per_driver
        self.handles[info.name] = handle
        self._driver_tasks.append(
            self._supervised(
                f"driver-{info.name}",
                functools.partial(handle.supervise, self._bring_up, self._on_down(handle)),
            )
        )

    def _resources_changed(self, driver: str) -> None:
        scanner = self.scanners.get(driver)
        if scanner is not None:
            scanner.resources_changed()

    def _notify_driver(self, driver: str, resource: str) -> None:
        scanner = self.scanners.get(driver)
        if scanner is not None:
            scanner.notify()

    async def _bring_up(self, handle: DriverHandle, process: WorkerProcess, first: bool) -> None:
        """simulate → configure → resources → notes → first snapshot → on_ready → watch."""
        config, timeout, name = self.config, self.config.hook_timeout, handle.name
        calls = first_calls(config, name, self.driver_root(handle))
        if config.simulate and handle.implements("devicehost_simulate"):
            # Building a simulated machine writes thousands of files: part of starting, like
            # the import, so it gets the start timeout rather than a hook's.
            await process.call(
                "devicehost_simulate", config.driver_start_timeout, **calls["devicehost_simulate"]
            )
        try:
            await process.call("devicehost_configure", timeout, **calls["devicehost_configure"])
        except DriverError as exc:
            if isinstance(exc.__cause__, ValueError):
                reason = f"config drivers.{name}: {exc.__cause__}"
                handle.info.status, handle.info.reason = DriverStatus.FAILED, reason
                # Marked: `devicehost config` reports it as its own error, once.
                log.error("driver %r is not started: %s", name, reason, extra=CONFIG_REFUSED)
                raise DriverFinal() from None
            raise
        specs, problems = self._specs(name, await process.call("devicehost_resources", timeout))
        tree = self.simulated_root(name)
        notes = notes_from_plain(await process.call("devicehost_notes", timeout))
        handle.info.notes = notes + [f"resource refused: {p}" for p in problems]
        states = self.table.claim(handle, specs, first)
        self._withdraw_unlisted(handle, states)  # listed by its last run, not by this one
        # A driver whose watch notices changes is re-enumerated only as a safety net: the
        # scans are most of an idle node's CPU (docs/performance.md).
        watched = handle.implements("devicehost_watch")
        scanner = Scanner(
            handle,
            states,
            config.watched_scan_interval if watched else config.scan_interval,
            timeout,
            on_error=self.telemetry.driver_error,
            tree=tree,
            max_devices=config.max_devices_per_resource,
            allowed_edits=config.allowed_edits(name),
        )
        scanner.refresh = functools.partial(self._refresh, handle, process, scanner)
        self.scanners[name] = scanner
        await scanner.scan_once()
        if self.on_ready is not None:
            await self.on_ready(handle, states)
        # A change between the first snapshot and the watch's start would be missed: the
        # worker notifies once as each watch starts, and the scan that follows sees it (a
        # watch compares later looks with ``enumerated()``, so its own start is covered).
        process.start_watches(list(states))
        task = self._supervised(f"scan-{name}", scanner.run)
        self._scan_tasks[name] = task
        process.exited.add_done_callback(lambda _: task.cancel())

    def _specs(self, name: str, raw: object) -> tuple[list[ResourceSpec], list[str]]:
        """The driver's answer to ``resources``, checked and capped, and what was refused
        (logged and counted)."""
        config = self.config
        specs, problems = resources_from_plain(
            name, raw, config.plugin_dir, config.allowed_edits(name)
        )
        if len(specs) > config.max_resources_per_driver:
            past = specs[config.max_resources_per_driver :]
            specs = specs[: config.max_resources_per_driver]
            problems.append(
                f"{len(specs) + len(past)} resources, over the limit of "
                f"{config.max_resources_per_driver} per driver (limits.resourcesPerDriver): "
                f"{len(past)} refused, from {past[0].name!r} on"
            )
        tree = self.simulated_root(name)
        if tree is not None:
            specs = [spec_on_node(spec, tree) for spec in specs]
        for problem in problems:
            log.error("driver %r, hook devicehost_resources: %s; resource refused", name, problem)
            self.telemetry.driver_error(name, "devicehost_resources")
        return specs, problems

    def _withdraw_unlisted(self, handle: DriverHandle, listed: Collection[str]) -> None:
        """Withdraw each resource ``handle`` owns but no longer lists (its socket removed)."""
        for claim in self.table.of(handle):
            if claim.spec.name not in listed:
                log.warning(
                    "driver %r no longer lists resource %r: withdrawn (its socket removed)",
                    handle.name,
                    claim.spec.name,
                )
                self.table.release(handle, claim.spec.name)

    async def _refresh(
        self, handle: DriverHandle, process: WorkerProcess, scanner: Scanner
    ) -> None:
        """Ask the running driver for its resources again: serve a name it now lists (its
        first snapshot first, then its watch) and withdraw one it no longer does. A
        resource whose spec changed keeps the one it was served with until the driver's
        next start. ``DriverUnavailable`` now withdraws them all; a failing call changes
        nothing."""
        name, states = handle.name, scanner.states
        try:
            raw = await process.call("devicehost_resources", self.config.hook_timeout)
        except DriverUnavailable as exc:
            log.warning("driver %r now finds none of its hardware: %s", name, exc)
            raw = []
        except DriverError as exc:
            self.telemetry.driver_error(name, exc.hook)
            log.error("%s; its resources stay as they are", exc)
            return
        specs, _ = self._specs(name, raw)
        listed = {spec.name for spec in specs}
        self._withdraw_unlisted(handle, listed)
        for gone in [r for r in states if r not in listed]:
            del states[gone]
        added = self.table.claim(handle, [s for s in specs if s.name not in states], False)
        if not added:
            return
        states.update(added)
        await scanner.scan_once()
        if self.on_ready is not None:
            await self.on_ready(handle, added)
        process.start_watches(list(added))

    def _on_down(self, handle: DriverHandle) -> Callable[[str], None]:
        def down(why: str) -> None:
            self.scanners.pop(handle.name, None)
            for claim in self.table.of(handle):
                if claim.state.mark_unhealthy():
                    log.warning(
                        "resource %r: every device Unhealthy while driver %r is down",
                        claim.spec.name,
                        handle.name,
                    )

        return down

    # -- stop ------------------------------------------------------------------------------

    def close_streams(self) -> None:
        """End every resource's open streams: the first step of stopping."""
        for claim in self.table.claims.values():
            claim.state.close()

    def cancel(self) -> tuple[list[asyncio.Task[None]], Awaitable[Any]]:
        """Cancel the drivers' supervision and scans, and begin stopping every worker.
        Returns the cancelled tasks, and what finishes stopping the workers and the zygote
        (``finish_stop``'s argument)."""
        tasks = [*self._driver_tasks, *self._scan_tasks.values()]
        for task in tasks:
            task.cancel()
        workers = asyncio.gather(
            *(handle.stop() for handle in self.handles.values()),
            *([self._early.stop(STOP_GRACE_SECONDS)] if self._early else []),
            return_exceptions=True,
        )
        return tasks, workers

    async def finish_stop(self, workers: Awaitable[Any]) -> None:
        """The workers first: the zygote reports their exits, then it ends too. Bounded:
        with a frozen worker or zygote the zygote is ended after ``WORKERS_STOP_SECONDS``
        (killed if need be), and every worker dies with it, so SIGTERM ends the host within
        its 2 s whatever state they are in."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(
                asyncio.shield(asyncio.ensure_future(workers)), WORKERS_STOP_SECONDS
            )
        await self.zygote.close()

    def remove_sim_root(self) -> None:
        if self._sim_root:
            remove_sim_root(self._sim_root)
