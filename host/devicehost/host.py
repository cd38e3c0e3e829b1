"""One devicehost process, wired: the driver side, the kubelet face, the node's files and
telemetry, built, connected, started and stopped in order. No part's work is done here.

``Host.start`` opens the plugin directory, starts the status server and every driver
(``drivers.running``); each resource the driver side claims (``drivers.ownership``) gets a
DevicePlugin service (``kubelet.deviceplugin.face``) and is served as soon as its driver's
first snapshot is taken, so a slow, hung or crashing driver never delays another's.

``Host.stop`` ends streams, removes sockets, stops every worker (bounded), and returns
within about a second and a half whatever the drivers do.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from devicehost.config.for_node import for_this_node
from devicehost.config.host_config import HostConfig
from devicehost.drivers.discovery import PluginSet
from devicehost.drivers.early import EarlyStart
from devicehost.drivers.ownership import Claim, ResourceTable
from devicehost.drivers.running import RunningDrivers
from devicehost.drivers.snapshots import ResourceState
from devicehost.drivers.supervisor import STOP_GRACE_SECONDS, DriverHandle
from devicehost.drivers.zygote import Zygote
from devicehost.kubelet.deviceplugin.face import DevicePluginFace, pod_resolver
from devicehost.node.file_errors import node_file_errors
from devicehost.system import descriptors, supervision
from devicehost.telemetry.facade import Telemetry
from devicehost.telemetry.readiness import not_ready
from devicehost.telemetry.status_server import StatusServer, start_status_server

if TYPE_CHECKING:
    from devicehost.drivers.conformance import ConformanceError, ConformanceReport, check_driver
    from devicehost.edits.cdi import CdiWriter
    from devicehost.kubelet.dra.face import DraFace
    from devicehost.node.labels import NodeLabels

log = logging.getLogger(__name__)

#: The kit (``devicehost.testing``) reaches the host through this module alone.
__all__ = ["ConformanceError", "ConformanceReport", "Host", "check_driver", "serve"]
#: The kit's conformance battery, imported only when the kit asks for it: never at a
#: ``devicehost run`` start.
_BATTERY = ("ConformanceError", "ConformanceReport", "check_driver")


def __getattr__(name: str) -> Any:
    if name in _BATTERY:
        from devicehost.drivers import conformance

        return getattr(conformance, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


STREAM_GRACE_SECONDS = 0.05
STOP_TASKS_SECONDS = 0.5
METRICS_BIND_SECONDS = 1.0
START_WAIT_SECONDS = 5.0


class Host:
    """One devicehost process: its drivers, their resources, and the face serving them."""

    def __init__(
        self,
        config: HostConfig,
        telemetry: Telemetry | None = None,
        use_inotify: bool = True,
        early: EarlyStart | None = None,
        zygote: Zygote | None = None,
    ) -> None:
        self.config = config
        self.telemetry = telemetry or Telemetry.from_config(
            config, functools.partial(pod_resolver, config)
        )
        self.table = ResourceTable(self._admit, self._claimed, self._withdrawn)
        self.running = RunningDrivers(config, self.telemetry, self.table, zygote, early)
        self.running.on_ready = self._driver_ready
        self.face = DevicePluginFace(config, self.telemetry, use_inotify)
        self.dra: DraFace | None = None
        if config.serves_dra:
            from devicehost.kubelet.dra.face import DraFace

            self.dra = DraFace(config, self.telemetry)
        self.status_server: StatusServer | None = None
        self.node_labels: NodeLabels | None = None
        if config.feature_file:  # these two are off unless configured: imported only then
            from devicehost.node.labels import NodeLabels

            self.node_labels = NodeLabels(
                config.feature_file, config.hook_timeout, self.telemetry.node_file_error
            )
        self.cdi: CdiWriter | None = None
        if config.cdi_enabled:
            from devicehost.edits.cdi import CdiWriter

            self.cdi = CdiWriter(config.cdi_dir, config.cdi_drivers, self.telemetry.node_file_error)
        self._serving = False
        self._tasks: list[asyncio.Task[None]] = []
        #: waits for the devicehost this one replaces to let the plugin directory go
        self.handover: asyncio.Task[None] | None = None

    # -- what callers and the kit read ------------------------------------------------------

    @property
    def resources(self) -> dict[str, Claim]:
        """Every claimed resource by name: its spec, driver and current snapshot."""
        return self.table.claims

    @property
    def plugins(self) -> PluginSet | None:
        return self.running.plugins

    @property
    def drivers(self) -> dict[str, DriverHandle]:
        return self.running.handles

    def simulated_root(self, driver: str) -> Path | None:
        """The simulated tree of the driver named ``driver``, or None when not simulating."""
        return self.running.simulated_root(driver)

    def driver_states(self) -> list[dict[str, Any]]:
        """Every installed plugin as ``devicehost drivers`` shows it, live; a driver with
        resources served through DRA has them in ``dra`` too."""
        rows = self.running.states(self._file_errors)
        if self.dra is not None:
            for row in rows:
                dra = self.dra.row(row["name"])
                if dra is not None:
                    row["dra"] = dra
        return rows

    def not_ready(self) -> list[str]:
        """Why /readyz fails; empty when ready."""
        reasons = not_ready(self.face.not_registered(), self.running.down())
        return reasons + (self.dra.not_ready() if self.dra is not None else [])

    @property
    def ready(self) -> bool:
        return not self.not_ready()

    # -- connections between the parts ------------------------------------------------------

    def _admit(self, name: str) -> str | None:
        unserved = self.face.unserved() + (self.dra.unserved() if self.dra else 0)
        return descriptors.resource_problem(name, unserved)

    def _claimed(self, claim: Claim) -> None:
        driver = claim.driver.name
        if self.dra is not None and self.dra.covers(claim.spec.name):
            # Never also a device plugin.
            self.dra.add(claim, self.running.policies, self.running.simulated_root(driver))
            return
        cdi = self.cdi if self.cdi and self.cdi.covers(driver) else None
        if cdi:
            claim.state.subscribe(functools.partial(cdi.refresh, claim.spec))
        self.face.add(claim, self.running.policies, cdi, self.running.simulated_root(driver))

    def _withdrawn(self, claim: Claim) -> None:
        self.face.withdraw(claim.spec.name)
        if self.dra is not None:
            self.dra.withdraw(claim.spec.name)

    async def _driver_ready(self, driver: DriverHandle, states: dict[str, ResourceState]) -> None:
        if not self._serving:
            return
        for name in states:
            if self.table.owned_by(name, driver):  # not contested since
                self.face.serve(name)  # once the plugin directory is this host's
                if self.dra is not None:
                    self.dra.serve(name)
        if self.node_labels is not None:
            await self.node_labels.add(driver, states.values(), write=self.face.held)

    async def _take_over(self) -> None:
        """Wait for the devicehost this one replaces to stop (it lets the plugin directory
        go last, after removing its sockets and node files), then write the node files and
        serve every device-plugin resource whose driver has come up."""
        seconds = self.config.plugin_dir_handover_seconds
        await self.face.take_over(seconds)
        log.info(
            "the device-plugin directory %s is this host's now: serving its resources",
            self.config.plugin_dir,
        )
        if self.cdi is not None:
            claims = self.table.claims.values()
            self.cdi.write_again(
                (c.spec, c.state.devices) for c in claims if self.cdi.covers(c.driver.name)
            )
        for name, claim in list(self.table.claims.items()):
            if claim.state.enumerated:  # its driver has come up (serve skips DRA's)
                self.face.serve(name)
        if self.node_labels is not None:
            self.node_labels.write()
        self._start_node_files()

    def _start_node_files(self) -> None:
        """Keep the node feature file and the CDI specs current (the plugin directory's
        holder's job: two hosts would remove each other's)."""
        if self.node_labels is not None:
            self._tasks.append(self._supervised("node-labels", self.node_labels.run))
        if self.cdi is not None:
            self._tasks.append(self._supervised("cdi-retry", self.cdi.retry_failed))

    def _file_errors(self, driver: str, resources: list[str]) -> list[str]:
        return node_file_errors(driver, resources, self.cdi, self.node_labels)

    def _supervised(self, name: str, run: Callable[[], Awaitable[object]]) -> asyncio.Task[None]:
        return supervision.start(name, run, self.telemetry.task_restarted)

    # -- start and stop ---------------------------------------------------------------------

    async def start(self) -> None:
        """Start every driver; serve each resource as soon as its first snapshot is ready.

        Returns once every driver has come up, failed or been found unavailable (at most
        ``START_WAIT_SECONDS``): a driver still starting then goes on in the background.
        """
        handover = self.config.plugin_dir_handover_seconds
        held = self.face.open(handover=handover > 0)
        descriptors.raise_soft_limit()
        self.status_server = await start_status_server(
            self.config.metrics_address,
            self.telemetry.metrics.render,
            self.not_ready,
            self.telemetry.task_restarted,
            self.driver_states,
        )
        self.face.start(self.running.launched)
        self._serving = True
        if held:
            self._start_node_files()
        else:
            log.warning(
                "another devicehost serves %s (the old pod of a rolling update): %sthe "
                "device plugins once it has stopped (waiting up to %g s)",
                self.config.plugin_dir,
                "serving through DRA now, and " if self.dra is not None else "serving ",
                handover,
            )
            self.handover = asyncio.create_task(self._take_over(), name="plugin-dir-handover")
        await self.running.launch(START_WAIT_SECONDS)
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

    async def prepare(self, scan: bool = True) -> None:
        """Start every driver and take a first snapshot, serving nothing.

        ``devicehost drivers``, ``devices`` and ``config`` stop here (then ``stop()``). A
        driver that has not settled within its start and hook timeouts is shown as
        *starting*.
        """
        config = self.config
        await self.running.launch(
            config.driver_start_timeout + config.hook_timeout * 3 + START_WAIT_SECONDS
        )

    async def stop(self) -> None:
        """End streams, stop servers and remove sockets, and stop every worker (bounded)."""
        self.running.close_streams()
        await asyncio.sleep(STREAM_GRACE_SECONDS)  # let open streams send their end cleanly
        if self.handover is not None:
            self._tasks.append(self.handover)
        for task in self._tasks:
            task.cancel()
        driver_tasks, workers = self.running.cancel()
        dra_tasks = self.dra.cancel() if self.dra is not None else []
        tasks = [*self._tasks, *self.face.cancel(), *dra_tasks, *driver_tasks]
        if tasks:
            _, stuck = await asyncio.wait(tasks, timeout=STOP_TASKS_SECONDS)
            for task in stuck:
                log.warning(
                    "stopping: %s did not finish within %.1f s; left behind",
                    task.get_name(),
                    STOP_TASKS_SECONDS,
                )
        await self.face.close()
        if self.dra is not None:
            await self.dra.close()
        # Before the plugin directory was this host's, the node files are the other's.
        if self.node_labels and self._serving and self.face.held:
            self.node_labels.close()
        if self.cdi and self.face.held:
            self.cdi.remove_all()
        closing = [self.running.finish_stop(workers), self.telemetry.close()]
        if self.status_server:
            closing.append(self.status_server.close())
        await asyncio.gather(*closing, return_exceptions=True)
        self.running.remove_sim_root()
        self.face.lock.release()
        log.info("stopped")


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
        config = await for_this_node(config, _probe_labels, _node_labels)
        host = Host(config, early=early, zygote=zygote)
    starting = asyncio.create_task(host.start(), name="start")
    stopping = asyncio.create_task(stop.wait(), name="stop-signal")
    try:
        await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if starting.done():
            starting.result()  # a config error at start-up ends the process with its message
            if host.handover is not None:
                await asyncio.wait({stopping, host.handover}, return_when=asyncio.FIRST_COMPLETED)
                if host.handover.done():
                    host.handover.result()  # the old devicehost never let the directory go
            await stopping
        log.info("stopping")
    finally:
        for task in (starting, stopping):
            task.cancel()
        await asyncio.gather(starting, stopping, return_exceptions=True)
        await host.stop()


async def _node_labels(config: HostConfig) -> dict[str, str]:
    """The labels of this node's Node object, read with the DRA face's client and
    credentials (the pod's service account, or ``dra.kubeconfig``)."""
    from devicehost.kubelet.dra.api import LightkubeApi

    api = await asyncio.to_thread(LightkubeApi, config.kubeconfig)
    try:
        return await api.node_labels(config.node_name)
    finally:
        await api.close()


async def _probe_labels(config: HostConfig) -> dict[str, str]:
    """The drivers' labels under ``config``, from a host that is stopped again at once."""
    from devicehost.node.labels import labels_of

    probe = Host(config, telemetry=Telemetry())
    try:
        await probe.prepare()
        return await labels_of(probe.drivers.values(), config.hook_timeout)
    finally:
        await probe.stop()
