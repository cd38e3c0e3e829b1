"""One devicehost process: start every driver on its own, serve each resource when ready.

``Host.start`` lists the installed drivers and starts each in its own worker process under
a supervisor (``drivers.supervisor``). Each driver is brought up on its own timeline —
simulate (under ``--simulate``), configure, resources, a first snapshot — and each of its
resources is served and registered as soon as that snapshot is taken, so a slow, hung or
crashing driver never delays another's. When a worker goes down its devices are reported
Unhealthy (its resources stay registered), and it is restarted with back-off.

``Host.stop`` ends streams, removes sockets, stops every worker (bounded), and returns
within about a second and a half whatever the drivers do.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import logging
import os
import shutil
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from devicehost.config.for_node import for_this_node
from devicehost.config.host_config import HostConfig
from devicehost.drivers.discovery import DriverInfo, DriverStatus, PluginSet, load_plugins
from devicehost.drivers.early import EarlyStart
from devicehost.drivers.plan import first_calls
from devicehost.drivers.process import WorkerProcess
from devicehost.drivers.scan import Scanner
from devicehost.drivers.snapshots import ResourceState
from devicehost.drivers.supervisor import STOP_GRACE_SECONDS, DriverFinal, DriverHandle
from devicehost.drivers.validation import notes_from_plain, resources_from_plain
from devicehost.drivers.zygote import Zygote
from devicehost.edits.compose import PolicyChain
from devicehost.edits.simulated_paths import spec_on_node
from devicehost.errors import ConfigError, DriverError
from devicehost.kubelet.deviceplugin.checkpoint import CHECKPOINT_FILE
from devicehost.kubelet.deviceplugin.restart_watch import DirectoryWatcher, file_identity
from devicehost.kubelet.deviceplugin.runner import ResourceRunner
from devicehost.kubelet.deviceplugin.servicer import DevicePluginServicer
from devicehost.model import ResourceSpec
from devicehost.simulation.trees import driver_root, make_sim_root
from devicehost.system import descriptors, supervision
from devicehost.telemetry.facade import Telemetry
from devicehost.telemetry.metrics import Gauge
from devicehost.telemetry.pods import PodLookup
from devicehost.telemetry.status_server import StatusServer

if TYPE_CHECKING:
    from devicehost.edits.cdi import CdiWriter
    from devicehost.node.labels import NodeLabels

log = logging.getLogger(__name__)

STREAM_GRACE_SECONDS = 0.05
STOP_TASKS_SECONDS = 0.5
METRICS_BIND_SECONDS = 1.0
START_WAIT_SECONDS = 5.0
#: /readyz fails once a driver that should serve has gone down this many runs in a row
NOT_READY_AFTER_RUNS = 3
WATCH_START_SECONDS = 1.0
RUNNER_RETRY_SECONDS = 1.0
#: ``extra`` of the log line for a driver that refused its config section
CONFIG_REFUSED = {"devicehost_config_refused": True}
WORKERS_STOP_SECONDS = 0.9


@dataclass
class Resource:
    spec: ResourceSpec
    driver: DriverHandle
    state: ResourceState
    servicer: DevicePluginServicer
    runner: ResourceRunner | None = None
    task: asyncio.Task[None] | None = None


class PluginDirInUse(ConfigError):
    """Another devicehost already serves this device-plugin directory.

    Two hosts on one directory would delete and re-create each other's sockets. Stop the
    other one (or point this one at another ``pluginDir``).
    """


class Host:
    """One devicehost process: its drivers, resources, runners and scanners."""

    def __init__(
        self,
        config: HostConfig,
        telemetry: Telemetry | None = None,
        use_inotify: bool = True,
        early: EarlyStart | None = None,
        zygote: Zygote | None = None,
    ) -> None:
        self.config = config
        #: Forks the drivers' workers; the host owns it and ends it on stop.
        self.zygote = zygote or Zygote()
        #: Drivers discovered and workers spawned before the host was built (``early``).
        self._early = early
        self.telemetry = telemetry or Telemetry.from_config(
            config,
            functools.partial(
                pod_resolver, config.pod_resources_socket, config.plugin_dir / CHECKPOINT_FILE
            ),
        )
        self.zygote.on_death = lambda: self.telemetry.metrics.helper_deaths.inc(helper="zygote")
        self.use_inotify = use_inotify
        self.plugins: PluginSet | None = early.plugins if early else None
        self.drivers: dict[str, DriverHandle] = {}
        self.resources: dict[str, Resource] = {}
        #: resource names two or more drivers declared: name → those drivers; served by none
        self.contested: dict[str, set[str]] = {}
        self.scanners: dict[str, Scanner] = {}
        self.watcher = DirectoryWatcher(
            config.plugin_dir, on_task_restart=self.telemetry.task_restarted
        )
        self.status_server: StatusServer | None = None
        self.policies: PolicyChain | None = None
        self.node_labels: NodeLabels | None = None
        if config.feature_file:  # these two are off unless configured: imported only then
            from devicehost.node.labels import NodeLabels

            self.node_labels = NodeLabels(
                config.feature_file, config.hook_timeout, self.telemetry.node_file_error
            )
        self._serving = False
        self._stopping = False
        #: set once start-up has brought every driver up (or stopped waiting for one)
        self._launched = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._driver_tasks: list[asyncio.Task[None]] = []
        self._scan_tasks: dict[str, asyncio.Task[None]] = {}
        #: made by the early start when there was one (the workers are building in it);
        #: the host owns it from here and removes it when it stops
        self._sim_root: Path | None = None
        if early is not None:
            self._sim_root, early.sim_root = early.sim_root, None
        self.cdi: CdiWriter | None = None
        if config.cdi_enabled:
            from devicehost.edits.cdi import CdiWriter

            self.cdi = CdiWriter(config.cdi_dir, config.cdi_drivers, self.telemetry.node_file_error)
        self._lock_fd: int | None = None
        metrics = self.telemetry.metrics
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
                "devicehost_driver_up",
                "1 while a driver's worker process is running and brought up, else 0.",
                self._driver_up,
            )
        )

    # -- what the status endpoints and metrics read -----------------------------------------

    def _device_counts(self) -> list[tuple[dict[str, str], float]]:
        samples = []
        for name, resource in sorted(self.resources.items()):
            healthy = sum(d.healthy for d in resource.state.devices.values())
            total = len(resource.state.devices)
            samples.append(({"resource": name, "health": "Healthy"}, float(healthy)))
            samples.append(({"resource": name, "health": "Unhealthy"}, float(total - healthy)))
        return samples

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
            for name, h in sorted(self.drivers.items())
        ]

    def driver_states(self) -> list[dict[str, Any]]:
        """Every installed plugin as ``devicehost drivers`` shows it, live: status, reason,
        restarts, hooks running past their timeout, resources; and node files whose last
        write failed (retried)."""
        infos = self.plugins.infos if self.plugins else []
        rows: list[dict[str, Any]] = []
        for info in infos:
            handle = self.drivers.get(info.name)
            process = handle.process if handle is not None else None
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
                    "resources": [
                        r for r, res in self.resources.items() if res.driver.info is info
                    ],
                    "nodeFileErrors": self._node_file_errors(info.name),
                }
            )
        return rows

    def _node_file_errors(self, driver: str) -> list[str]:
        errors = []
        if self.cdi is not None:
            failed = self.cdi.errors()
            errors += [
                failed[r]
                for r, res in self.resources.items()
                if res.driver.name == driver and r in failed
            ]
        labels = self.node_labels
        if labels is not None and labels.error and any(d.name == driver for d in labels.drivers):
            errors.append(labels.error)
        return errors

    def not_registered(self) -> list[str]:
        """Resources not (yet, or no longer) registered with the kubelet, for /readyz."""
        return [
            name
            for name, r in self.resources.items()
            if r.runner is None or not r.runner.registered.is_set()
        ]

    def drivers_down(self) -> list[str]:
        """Drivers that should serve but have been down through ``NOT_READY_AFTER_RUNS``
        runs in a row (their first restarts did not help), each with the reason
        ``devicehost drivers`` shows. A driver that found no hardware (unavailable) is no
        reason: a node without a vendor's devices is a ready node."""
        return [
            f"driver {name!r} is {h.info.status} (down {h.runs_down} times in a row): "
            f"{h.info.reason}"
            for name, h in sorted(self.drivers.items())
            if h.runs_down >= NOT_READY_AFTER_RUNS
            and h.info.status in (DriverStatus.RESTARTING, DriverStatus.CRASH_LOOPING)
        ]

    def not_ready(self) -> list[str]:
        """Why /readyz fails: resources not registered, drivers down past their first
        restarts; empty when ready."""
        waiting = self.not_registered()
        return ([f"not registered: {', '.join(waiting)}"] if waiting else []) + self.drivers_down()

    @property
    def ready(self) -> bool:
        """True when every served resource is registered with the kubelet and no driver
        has been down past its first restarts."""
        return not self.not_ready()

    def simulated_root(self, driver: str) -> Path | None:
        """The simulated tree of the driver named ``driver``, or None when not simulating."""
        if self._sim_root is None or not (self._sim_root / driver).is_dir():
            return None
        return self._sim_root / driver

    # -- start -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Start every driver; serve each resource as soon as its first snapshot is ready.

        Returns once every driver has come up, failed or been found unavailable (at most
        ``START_WAIT_SECONDS``): a driver still starting then goes on in the background.
        """
        self._make_plugin_dir()
        self._lock_plugin_dir()
        descriptors.raise_soft_limit()
        await self._start_status_server()
        self._tasks.append(self._supervised("kubelet-restarts", self._count_kubelet_restarts))
        self._tasks.append(self._supervised("plugin-dir-lock", self._keep_plugin_dir_locked))
        self._serving = True
        if self.node_labels is not None:
            self._tasks.append(self._supervised("node-labels", self.node_labels.run))
        if self.cdi is not None:
            self._tasks.append(self._supervised("cdi-retry", self.cdi.retry_failed))
        self._tasks.append(self._supervised("watch-start", self._watch_when_registered))
        await self._launch(START_WAIT_SECONDS)
        self._launched.set()
        count = len(self.resources)
        log.info(
            "serving %d resource%s: %s",
            count,
            "" if count == 1 else "s",
            ", ".join(self.resources) or "none",
        )
        # The Prometheus client is imported once start-up is over, so its ~20 ms never
        # delay a registration; a scrape before then imports it at once (metrics.py).
        asyncio.get_running_loop().call_later(METRICS_BIND_SECONDS, self.telemetry.metrics.bind)

    def _supervised(self, name: str, run: Callable[[], Awaitable[object]]) -> asyncio.Task[None]:
        """A long-running task of the host, restarted with back-off whenever it fails
        (``supervision``), its failures counted in ``devicehost_task_restarts_total``."""
        return supervision.start(name, run, self.telemetry.task_restarted)

    async def prepare(self, scan: bool = True) -> None:
        """Start every driver and take a first snapshot, serving nothing.

        ``devicehost drivers``, ``devices`` and ``config`` stop here (then ``stop()``). A
        driver that has not settled within its start and hook timeouts is shown as
        *starting*.
        """
        await self._launch(
            self.config.driver_start_timeout + self.config.hook_timeout * 3 + START_WAIT_SECONDS
        )

    async def _launch(self, wait: float) -> None:
        config = self.config
        if self.plugins is None:
            self.plugins = load_plugins(allow=config.enabled_drivers, deny=config.disabled_drivers)
        self.policies = PolicyChain(self.plugins.pm)
        names = {info.name for info in self.plugins.infos}
        for name in config.drivers:
            if name not in names:
                log.warning(
                    "config drivers.%s: no installed driver is named %r; section "
                    "ignored (installed: %s)",
                    name,
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
        settled = [asyncio.create_task(h.settled.wait()) for h in self.drivers.values()]
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

    def _start_driver(self, info: DriverInfo) -> None:
        info.status = DriverStatus.STARTING
        handle = DriverHandle(
            info,
            self.zygote,
            start_timeout=self.config.driver_start_timeout,
            on_notify=functools.partial(self._notify_driver, info.name),
            log_level=self.config.log_level,
            on_restart=lambda name: self.telemetry.metrics.driver_restarts.inc(driver=name),
            on_error=self.telemetry.driver_error,
            prestarted=self._early.workers.pop(info.name, None) if self._early else None,
            on_task_restart=self.telemetry.task_restarted,
            on_start_failure=lambda name: self.telemetry.metrics.driver_start_failures.inc(
                driver=name
            ),
        )
        self.drivers[info.name] = handle
        self._driver_tasks.append(
            self._supervised(
                f"driver-{info.name}",
                functools.partial(handle.supervise, self._bring_up, self._on_down(handle)),
            )
        )

    def _notify_driver(self, driver: str, resource: str) -> None:
        scanner = self.scanners.get(driver)
        if scanner is not None:
            scanner.notify()

    def driver_root(self, driver: DriverHandle) -> Path:
        """The host's ``/`` as this driver sees it: its own simulated tree, or ``--root``."""
        return driver_root(self._sim_root, self.config.root, driver.name)

    async def _bring_up(self, handle: DriverHandle, process: WorkerProcess, first: bool) -> None:
        """simulate → configure → resources → notes → first snapshot → serve → watch."""
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
        raw_specs = await process.call("devicehost_resources", timeout)
        specs, problems = resources_from_plain(
            name, raw_specs, config.plugin_dir, config.allowed_edits(name)
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
        notes = notes_from_plain(await process.call("devicehost_notes", timeout))
        handle.info.notes = notes + [f"resource refused: {p}" for p in problems]
        states = self._claim(handle, specs, first)
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
        self.scanners[name] = scanner
        await scanner.scan_once()
        if self._serving:
            for resource_name in states:
                resource = self.resources.get(resource_name)
                if resource is not None and resource.driver is handle:  # not contested since
                    self._serve(resource)
            if self.node_labels is not None:
                await self.node_labels.add(handle, states.values())
        # A change between the first snapshot and the watch's own baseline would be missed:
        # the worker notifies once as each watch starts, and the scan that follows sees it.
        process.start_watches(list(states))
        task = self._supervised(f"scan-{name}", scanner.run)
        self._scan_tasks[name] = task
        process.exited.add_done_callback(lambda _: task.cancel())

    def _claim(
        self, handle: DriverHandle, specs: list[ResourceSpec], first: bool
    ) -> dict[str, ResourceState]:
        """The states of the driver's resources. A name no other driver declared is
        claimed; a name two drivers declare is served by neither, whichever came first
        (``_contest``): ownership never depends on which driver started faster."""
        states: dict[str, ResourceState] = {}
        for spec in specs:
            owner = self.resources.get(spec.name)
            if owner is not None and owner.driver is handle:
                states[spec.name] = owner.state
                continue
            if owner is not None or spec.name in self.contested:
                self._contest(spec.name, handle, owner)
                continue
            unserved = sum(1 for r in self.resources.values() if r.task is None)
            starved = descriptors.resource_problem(spec.name, unserved)
            if starved:
                log.error("driver %r: %s", handle.name, starved)
                handle.info.notes.append(starved)
                continue
            if not first:
                log.warning(
                    "driver %r now reports resource %r, which it did not at start-up; it is "
                    "served from now on",
                    handle.name,
                    spec.name,
                )
            state = ResourceState(spec.name)
            cdi = self.cdi if self.cdi and self.cdi.covers(handle.name) else None
            if cdi:
                state.subscribe(functools.partial(cdi.refresh, spec))
            servicer = DevicePluginServicer(
                spec,
                handle,
                state,
                self.config.hook_timeout,
                self.telemetry,
                self.policies,
                cdi,
                tree=self.simulated_root(handle.name),
                allowed_edits=self.config.allowed_edits(handle.name),
            )
            self.resources[spec.name] = Resource(spec, handle, state, servicer)
            states[spec.name] = state
        return states

    def _contest(self, name: str, handle: DriverHandle, owner: Resource | None) -> None:
        """Refuse ``name`` for ``handle`` and for every driver that declared it before,
        withdrawing it from the one serving it (its socket removed, its streams ended)."""
        drivers = self.contested.setdefault(name, set())
        if owner is not None:
            drivers.add(owner.driver.name)
            del self.resources[name]
            owner.state.close()
            if owner.task is not None:
                owner.task.cancel()
        new = handle.name not in drivers  # else a restart of a driver already refused
        drivers.add(handle.name)
        names = " and ".join(repr(d) for d in sorted(drivers))
        if new:
            log.error(
                "resource %r is declared by drivers %s; it is served by none of them — "
                "disable all but one (disabledDrivers) and restart",
                name,
                names,
            )
        note = f"resource {name!r} refused: declared by drivers {names}"
        for driver in drivers:
            info = self.drivers[driver].info if driver in self.drivers else None
            if info is not None:
                info.notes = [n for n in info.notes if not n.startswith(f"resource {name!r} ")]
                info.notes.append(note)

    def _serve(self, resource: Resource) -> None:
        if resource.task is not None:
            return
        resource.runner = ResourceRunner(
            self.config, resource.spec, resource.servicer, self.watcher, self.telemetry
        )
        resource.task = asyncio.create_task(
            resource.runner.run(), name=f"resource-{resource.spec.name}"
        )
        resource.task.add_done_callback(functools.partial(self._runner_ended, resource))

    def _runner_ended(self, resource: Resource, task: asyncio.Task[None]) -> None:
        """A runner only ends when stopped; one that failed is a host bug, which must not
        leave its resource unserved for good: log it and serve the resource again."""
        if task.cancelled() or self._stopping or task.exception() is None:
            return
        exc = task.exception()
        log.error(
            "resource %r: serving it failed (%s: %s); serving it again in %.0f s",
            resource.spec.name,
            type(exc).__name__,
            exc,
            RUNNER_RETRY_SECONDS,
            exc_info=exc,
        )
        resource.task = None
        self.telemetry.task_restarted(f"resource-{resource.spec.name}")
        asyncio.get_running_loop().call_later(RUNNER_RETRY_SECONDS, self._serve_again, resource)

    def _serve_again(self, resource: Resource) -> None:
        if not self._stopping:
            self._serve(resource)

    def _on_down(self, handle: DriverHandle) -> Callable[[str], None]:
        def down(why: str) -> None:
            self.scanners.pop(handle.name, None)
            for resource in self.resources.values():
                if resource.driver is handle:
                    change = resource.state.mark_unhealthy()
                    if change:
                        log.warning(
                            "resource %r: every device Unhealthy while driver %r is down",
                            resource.spec.name,
                            handle.name,
                        )

        return down

    # -- the plugin directory --------------------------------------------------------------

    def _make_plugin_dir(self) -> None:
        """Create the plugin directory when the kubelet has not made it yet, before any
        socket is bound in it (and said once), so every resource serves at its first try;
        the kubelet keeps a directory it finds. One that cannot be made is left to the
        runners, which report it and retry."""
        directory = self.config.plugin_dir
        if directory.is_dir():
            return
        try:
            directory.mkdir(mode=0o750, parents=True)
        except OSError as exc:
            log.error("cannot create the plugin directory %s: %s", directory, exc.strerror)
            return
        log.info("created the plugin directory %s (the kubelet has not made it yet)", directory)

    def _lock_plugin_dir(self) -> None:
        """Hold an exclusive lock on the plugin directory itself (a lock file in it would be
        deleted by the kubelet's clean-up), so a second host refuses to start. Called again
        on every change of the directory: one created late or re-created after it was
        removed is locked anew (a lock on the old one guards nothing)."""
        directory = self.config.plugin_dir
        if self._lock_fd is not None:
            held = os.fstat(self._lock_fd)
            with contextlib.suppress(OSError):
                now = os.stat(directory)
                if (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino):
                    return
            os.close(self._lock_fd)
            self._lock_fd = None
        try:
            fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return  # not there yet: the runners report it and retry
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise PluginDirInUse(
                "config",
                "pluginDir",
                f"another devicehost already serves {directory}; stop it, or use another "
                "--plugin-dir",
            ) from None
        self._lock_fd = fd

    async def _watch_when_registered(self) -> None:
        """Start the kubelet-restart watch once the drivers have come up and their
        resources are registered, or ``WATCH_START_SECONDS`` after start-up began (a slow
        or hung driver does not hold it back): its inotify binding costs ~8 ms to load (it
        runs ``ldconfig``), which every first registration used to wait for. A restart
        before then is not missed: the watch wakes every resource as it starts, and each
        checks the kubelet's socket and its own."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(WATCH_START_SECONDS):
                await self._launched.wait()
                await asyncio.gather(
                    *(r.runner.registered.wait() for r in self.resources.values() if r.runner)
                )
        if not self._stopping:
            self.watcher.start(self.use_inotify)
            descriptors.preload_recovery_modules()  # recovery must never need a descriptor

    async def _keep_plugin_dir_locked(self) -> None:
        """Lock the plugin directory again whenever it is created or replaced."""
        changed = self.watcher.subscribe()
        refused = False
        try:
            while True:
                await changed.wait()
                changed.clear()
                try:
                    self._lock_plugin_dir()
                    refused = False
                except PluginDirInUse as exc:
                    if not refused:
                        log.error("%s", exc)
                    refused = True
        finally:
            self.watcher.unsubscribe(changed)

    async def _count_kubelet_restarts(self) -> None:
        """Count each new kubelet.sock after one was seen (a late first kubelet is no restart)."""
        changed = self.watcher.subscribe()
        seen = file_identity(self.config.kubelet_socket)
        try:
            while True:
                await changed.wait()
                changed.clear()
                now = file_identity(self.config.kubelet_socket)
                if now is not None and now != seen:
                    if seen is not None:
                        self.telemetry.metrics.kubelet_restarts.inc()
                        log.warning(
                            "kubelet restart detected: %s was re-created",
                            self.config.kubelet_socket,
                        )
                    seen = now
        finally:
            self.watcher.unsubscribe(changed)

    async def _start_status_server(self) -> None:
        address = self.config.metrics_address
        if not address:
            return
        server = StatusServer(
            address,
            self.telemetry.metrics.render,
            self.not_ready,
            self.telemetry.task_restarted,
            self.driver_states,
        )
        try:
            await server.start()
        except OSError as exc:
            raise ConfigError(
                "config", "metrics.address", f"cannot listen on {address}: {exc.strerror}"
            ) from exc
        self.status_server = server

    # -- stop ------------------------------------------------------------------------------

    async def stop(self) -> None:
        """End streams, stop servers and remove sockets, and stop every worker (bounded)."""
        self._stopping = True
        for resource in self.resources.values():
            resource.state.close()
        await asyncio.sleep(STREAM_GRACE_SECONDS)  # let open streams send their end cleanly
        tasks = [
            *self._tasks,
            *self._driver_tasks,
            *self._scan_tasks.values(),
            *(r.task for r in self.resources.values() if r.task is not None),
        ]
        for task in tasks:
            task.cancel()
        workers = asyncio.gather(
            *(handle.stop() for handle in self.drivers.values()),
            *([self._early.stop(STOP_GRACE_SECONDS)] if self._early else []),
            return_exceptions=True,
        )
        if tasks:
            _, stuck = await asyncio.wait(tasks, timeout=STOP_TASKS_SECONDS)
            for task in stuck:
                log.warning(
                    "stopping: %s did not finish within %.1f s; left behind",
                    task.get_name(),
                    STOP_TASKS_SECONDS,
                )
        await self.watcher.close()
        if self.node_labels and self._serving:
            self.node_labels.close()
        if self.cdi:
            self.cdi.remove_all()
        closing = [self._stop_workers(workers), self.telemetry.close()]
        if self.status_server:
            closing.append(self.status_server.close())
        await asyncio.gather(*closing, return_exceptions=True)
        if self._sim_root:
            shutil.rmtree(self._sim_root, ignore_errors=True)
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        log.info("stopped")

    async def _stop_workers(self, workers: Awaitable[Any]) -> None:
        """The workers first: the zygote reports their exits, then it ends too. Bounded:
        with a frozen worker or zygote the zygote is ended after ``WORKERS_STOP_SECONDS``
        (killed if need be), and every worker dies with it, so SIGTERM ends the host within
        its 2 s whatever state they are in."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(
                asyncio.shield(asyncio.ensure_future(workers)), WORKERS_STOP_SECONDS
            )
        await self.zygote.close()


def pod_resolver(socket: Path | None, checkpoint: Path | None = None) -> PodLookup:
    """The kubelet's PodResources client (pod UIDs from its device-manager ``checkpoint``),
    imported only when tracing needs it (its generated protobuf modules cost every start
    otherwise)."""
    from devicehost.kubelet.deviceplugin.podresources import PodResolver

    return PodResolver(socket, checkpoint=checkpoint)


async def serve(
    config: HostConfig,
    stop: asyncio.Event | None = None,
    host: Host | None = None,
    early: EarlyStart | None = None,
    zygote: Zygote | None = None,
) -> None:
    """Run a host until SIGTERM/SIGINT (or ``stop`` is set), then stop it gracefully.

    A signal is honoured at any moment, start-up included: a driver still starting is not
    waited for. SIGHUP is ignored with a log line (devicehost does not reload its config;
    restart the pod to apply a new one).
    """
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signum, stop.set)
    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
        loop.add_signal_handler(
            signal.SIGHUP,
            lambda: log.warning(
                "SIGHUP ignored: devicehost does not reload its config; restart it to apply one"
            ),
        )
    if host is None:
        if config.profiles and early is not None:  # a profile may choose other drivers
            await early.stop(STOP_GRACE_SECONDS)
            early = None
        config = await for_this_node(config, _probe_labels)
        host = Host(config, early=early, zygote=zygote)
    starting = asyncio.create_task(host.start(), name="start")
    stopping = asyncio.create_task(stop.wait(), name="stop-signal")
    try:
        await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if starting.done():
            starting.result()  # a config error at start-up ends the process with its message
            await stopping
        log.info("stopping")
    finally:
        for task in (starting, stopping):
            task.cancel()
        await asyncio.gather(starting, stopping, return_exceptions=True)
        await host.stop()


async def _probe_labels(config: HostConfig) -> dict[str, str]:
    """The drivers' labels under ``config``, from a host that is stopped again at once."""
    from devicehost.node.labels import NodeLabels

    probe = Host(config, telemetry=Telemetry())
    try:
        await probe.prepare()
        labels = NodeLabels(Path("/dev/null"), config.hook_timeout)
        for handle in probe.drivers.values():
            if handle.up:
                await labels.add(handle, (), write=False)
        return labels.labels()
    finally:
        await probe.stop()
