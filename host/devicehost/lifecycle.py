"""Per resource: serve → register → watch, restarted as a unit. Per process: start and stop.

``Host.start`` loads drivers, asks each for its resources, takes a first snapshot, then
runs one ``ResourceRunner`` per resource. A runner serves its socket, registers, and on a
kubelet restart (``kubelet.sock`` re-created) or the loss of its own socket does it all
again on a fresh socket. ``Host.stop`` ends streams, removes sockets, calls every driver's
``shutdown`` and returns within a few seconds even if a driver hangs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import signal
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devicehost import profiles
from devicehost.config import HostConfig
from devicehost.drivers.calls import WorkerPool, run_with_timeout
from devicehost.drivers.discovery import Driver, DriverStatus, PluginSet, load_plugins
from devicehost.drivers.scan import Scanner
from devicehost.drivers.snapshots import ResourceState
from devicehost.errors import ConfigError, DriverError, DriverUnavailable
from devicehost.features import NodeLabels
from devicehost.kubelet.podresources import PodResolver
from devicehost.kubelet.restart_watch import DirectoryWatcher, file_identity
from devicehost.kubelet.runner import ResourceRunner
from devicehost.kubelet.servicer import DevicePluginServicer
from devicehost.model import ResourceSpec
from devicehost.telemetry.facade import Telemetry
from devicehost.telemetry.metrics import Gauge
from devicehost.telemetry.status_server import StatusServer

log = logging.getLogger(__name__)

SHUTDOWN_HOOK_SECONDS = 2.0
STREAM_GRACE_SECONDS = 0.05
STOP_TASKS_SECONDS = 3.0
START_WAIT_SECONDS = 5.0


@dataclass
class Resource:
    spec: ResourceSpec
    driver: Driver
    state: ResourceState
    servicer: DevicePluginServicer
    runner: ResourceRunner | None = None


class Host:
    """One devicehost process: its drivers, resources, runners and scanners."""

    def __init__(
        self, config: HostConfig, telemetry: Telemetry | None = None, use_inotify: bool = True
    ) -> None:
        self.config = config
        self.telemetry = telemetry or Telemetry.from_config(
            config, PodResolver(config.pod_resources_socket)
        )
        self.use_inotify = use_inotify
        self.plugins: PluginSet | None = None
        self.resources: dict[str, Resource] = {}
        self.scanners: list[Scanner] = []
        self.watcher = DirectoryWatcher(config.plugin_dir)
        self.status_server: StatusServer | None = None
        self.node_labels: NodeLabels | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._sim_root: Path | None = None
        self.telemetry.metrics.add_gauge(
            Gauge(
                "devicehost_devices",
                "Devices advertised now, by resource and health.",
                self._device_counts,
            )
        )
        self.telemetry.metrics.add_gauge(
            Gauge(
                "devicehost_driver_info",
                "Installed drivers (value 1), by name, version, status.",
                self._driver_info,
            )
        )

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

    def not_registered(self) -> list[str]:
        """Resources not (yet, or no longer) registered with the kubelet, for /readyz."""
        return [
            name
            for name, r in self.resources.items()
            if r.runner is None or not r.runner.registered.is_set()
        ]

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

    @property
    def ready(self) -> bool:
        """True when every served resource is registered with the kubelet."""
        return not self.not_registered()

    async def start(self) -> None:
        """Prepare, then serve every resource and keep it registered."""
        await self.prepare()
        await self._start_status_server()
        self.watcher.start(self.use_inotify)
        self._tasks.append(
            asyncio.create_task(self._count_kubelet_restarts(), name="kubelet-restarts")
        )
        for resource in self.resources.values():
            resource.runner = ResourceRunner(
                self.config, resource.spec, resource.servicer, self.watcher, self.telemetry
            )
            self._tasks.append(
                asyncio.create_task(resource.runner.run(), name=f"resource-{resource.spec.name}")
            )
        for scanner in self.scanners:
            self._tasks.append(
                asyncio.create_task(scanner.run(), name=f"scan-{scanner.driver.name}")
            )
        if self.config.feature_file:
            self.node_labels = self.labels_writer(self.config.feature_file)
            await self.node_labels.start()
            self._tasks.append(asyncio.create_task(self.node_labels.run(), name="node-labels"))
        waits = [
            asyncio.create_task(r.runner.serving.wait())
            for r in self.resources.values()
            if r.runner
        ]
        if waits:
            await asyncio.wait(waits, timeout=START_WAIT_SECONDS)
        log.info(
            "serving %d resources: %s", len(self.resources), ", ".join(self.resources) or "none"
        )

    def labels_writer(self, path: Path) -> NodeLabels:
        """The node labels of every active driver, kept in the feature file at ``path``."""
        assert self.plugins is not None
        active = [d for d in self.plugins.drivers if d.info.status is DriverStatus.ACTIVE]
        pairs = [(r.driver, r.state) for r in self.resources.values()]
        return NodeLabels(path, active, pairs, self.config.hook_timeout)

    async def prepare(self, scan: bool = True) -> None:
        """Load and configure drivers, collect their resources, take a first snapshot.

        Nothing is served yet; ``devicehost drivers`` and ``devicehost devices`` stop here.
        """
        config = self.config
        if self.plugins is None:
            self.plugins = load_plugins(allow=config.enabled_drivers, deny=config.disabled_drivers)
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
            await self._simulate()
        # Drivers configure concurrently; resources are then claimed in a stable order.
        drivers = list(self.plugins.drivers)
        answers = await asyncio.gather(*(self._configure(d) for d in drivers))
        for driver, answer in zip(drivers, answers, strict=True):
            if answer is not None:
                self._add_resources(driver, *answer)
        if scan:
            await asyncio.gather(*(s.scan_once() for s in self.scanners))
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

    async def _simulate(self) -> None:
        """Let every driver build its simulated node, concurrently, each in a tree of its
        own under a fresh temporary directory: never inside ``--root`` (on a real node that
        is the host's ``/``), and never shared, so one driver's fake devices cannot collide
        with another's."""
        assert self.plugins is not None
        self._sim_root = Path(tempfile.mkdtemp(prefix="devicehost-sim-"))
        node = self.config.simulate_node or "each driver's default"
        log.info("simulating hardware (%s) under %s", node, self._sim_root)
        drivers = [d for d in self.plugins.drivers if d.implements("devicehost_simulate")]
        await asyncio.gather(*(self._simulate_driver(d) for d in drivers))

    def driver_root(self, driver: Driver) -> Path:
        """The host's ``/`` as this driver sees it: its own simulated tree, or ``--root``."""
        if self._sim_root is None:
            return self.config.root
        root = self._sim_root / driver.name
        root.mkdir(exist_ok=True)
        return root

    def simulated_root(self, driver: str) -> Path | None:
        """The simulated tree of the driver named ``driver``, or None when not simulating."""
        if self._sim_root is None or not (self._sim_root / driver).is_dir():
            return None
        return self._sim_root / driver

    async def _simulate_driver(self, driver: Driver) -> None:
        assert self.plugins is not None
        try:
            await driver.acall(
                "devicehost_simulate",
                self.config.hook_timeout,
                root=self.driver_root(driver),
                config=self.config.driver_section(driver.name),
                node=self.config.simulate_node,
            )
        except DriverError as exc:
            self.plugins.mark(driver, DriverStatus.FAILED, str(exc))
            log.error("%s; the driver is skipped", exc)

    async def _configure(self, driver: Driver) -> tuple[Any, Any] | None:
        """configure → resources → notes; a driver that fails here is marked, not fatal."""
        assert self.plugins is not None
        timeout = self.config.hook_timeout
        try:
            await driver.acall(
                "devicehost_configure",
                timeout,
                config=self.config.driver_section(driver.name),
                root=self.driver_root(driver),
                simulated=self.config.simulate,
            )
            specs = await driver.acall("devicehost_resources", timeout)
            notes = await driver.acall("devicehost_notes", timeout)
        except DriverUnavailable as exc:
            self.plugins.mark(driver, DriverStatus.UNAVAILABLE, str(exc))
            log.info("driver %r is unavailable on this node: %s", driver.name, exc)
            return None
        except DriverError as exc:
            if isinstance(exc.__cause__, ValueError) and exc.hook == "devicehost_configure":
                raise ConfigError("config", f"drivers.{driver.name}", str(exc.__cause__)) from exc
            self.plugins.mark(driver, DriverStatus.FAILED, str(exc))
            log.error("%s; the driver is skipped", exc)
            return None
        return specs, notes

    def _add_resources(self, driver: Driver, specs: Any, notes: Any) -> None:
        """Create the states and servicers of a driver's resources, refusing taken names."""
        timeout = self.config.hook_timeout
        driver.info.notes = [str(n) for note_list in notes for n in note_list or ()]
        states: dict[str, ResourceState] = {}
        for spec in [s for spec_list in specs or () for s in spec_list or ()]:
            if not isinstance(spec, ResourceSpec):
                log.error(
                    "driver %r, hook devicehost_resources: returned %r, expected "
                    "ResourceSpec; skipped",
                    driver.name,
                    spec,
                )
                continue
            owner = self.resources.get(spec.name)
            if owner is not None:
                log.error(
                    "resource %r is claimed by driver %r (%s) and by driver %r (%s); "
                    "the first keeps it, the second is refused — disable one of them",
                    spec.name,
                    owner.driver.name,
                    owner.driver.info.distribution,
                    driver.name,
                    driver.info.distribution,
                )
                driver.info.reason = (
                    f"resource {spec.name!r} refused: already served by "
                    f"{owner.driver.info.distribution}"
                )
                continue
            state = ResourceState(spec.name)
            states[spec.name] = state
            servicer = DevicePluginServicer(spec, driver, state, timeout, self.telemetry)
            self.resources[spec.name] = Resource(spec, driver, state, servicer)
        self.scanners.append(
            Scanner(
                driver,
                states,
                self.config.scan_interval,
                timeout,
                on_error=self.telemetry.driver_error,
            )
        )

    async def _start_status_server(self) -> None:
        address = self.config.metrics_address
        if not address:
            return
        server = StatusServer(address, self.telemetry.metrics.render, self.not_registered)
        try:
            await server.start()
        except OSError as exc:
            raise ConfigError(
                "config", "metrics.address", f"cannot listen on {address}: {exc.strerror}"
            ) from exc
        self.status_server = server

    async def stop(self) -> None:
        """End streams, stop servers and remove sockets, then let drivers release."""
        for resource in self.resources.values():
            resource.state.close()
        await asyncio.sleep(STREAM_GRACE_SECONDS)  # let open streams send their end cleanly
        for scanner in self.scanners:
            scanner.stop()
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            _, stuck = await asyncio.wait(self._tasks, timeout=STOP_TASKS_SECONDS)
            for task in stuck:
                log.warning(
                    "stopping: %s did not finish within %.0f s; left behind",
                    task.get_name(),
                    STOP_TASKS_SECONDS,
                )
        self.watcher.close()
        if self.node_labels:
            self.node_labels.close()
        if self.plugins:
            await asyncio.gather(*(self._shutdown_driver(d) for d in self.plugins.drivers))
            for driver in self.plugins.drivers:
                driver.pool.close()
        if self.status_server:
            await self.status_server.close()
        await self.telemetry.close()
        if self._sim_root:
            shutil.rmtree(self._sim_root, ignore_errors=True)
        log.info("stopped")

    async def _shutdown_driver(self, driver: Driver) -> None:
        # A thread of its own: every worker of the driver may be stuck in a hung hook.
        pool = WorkerPool(f"shutdown-{driver.name}", size=1)
        try:
            await run_with_timeout(
                pool, lambda: driver.call("devicehost_shutdown"), SHUTDOWN_HOOK_SECONDS
            )
        except TimeoutError:
            log.warning(
                "driver %r, hook devicehost_shutdown: did not return within %.0f s",
                driver.name,
                SHUTDOWN_HOOK_SECONDS,
            )
        except DriverError as exc:
            log.warning("%s", exc)
        finally:
            pool.close()


async def serve(
    config: HostConfig, stop: asyncio.Event | None = None, host: Host | None = None
) -> None:
    """Run a host until SIGTERM/SIGINT (or ``stop`` is set), then stop it gracefully."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signum, stop.set)
    if host is None:
        config = await profiles.for_this_node(config, _probe_labels)
        host = Host(config)
    try:
        await host.start()
        await stop.wait()
        log.info("stopping")
    finally:
        await host.stop()


async def _probe_labels(config: HostConfig) -> dict[str, str]:
    """The drivers' labels under ``config``, from a host that is stopped again at once."""
    probe = Host(config, telemetry=Telemetry())
    try:
        await probe.prepare()
        writer = probe.labels_writer(Path("/dev/null"))
        await asyncio.gather(*(writer.refresh(d) for d in writer.drivers))
        return writer.labels()
    finally:
        await probe.stop()
