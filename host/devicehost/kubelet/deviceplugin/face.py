"""The Device Plugin face of one host: a DevicePlugin server per claimed resource, served,
registered and re-served as a unit, in a plugin directory this host alone holds.

The host hands it each resource the driver side claims (``add``) and withdraws (``withdraw``),
and says when one should be served (``serve``). It keeps the directory locked, counts
kubelet restarts, and starts the restart watch once the first registrations are done.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from devicehost.config.host_config import HostConfig
from devicehost.drivers.ownership import Claim
from devicehost.edits.compose import PolicyChain
from devicehost.kubelet.deviceplugin.checkpoint import CHECKPOINT_FILE
from devicehost.kubelet.deviceplugin.plugin_dir_lock import PluginDirInUse, PluginDirLock
from devicehost.kubelet.deviceplugin.restart_watch import DirectoryWatcher, file_identity
from devicehost.kubelet.deviceplugin.runner import ResourceRunner
from devicehost.kubelet.deviceplugin.servicer import DevicePluginServicer
from devicehost.system import descriptors, supervision
from devicehost.telemetry.facade import Telemetry
from devicehost.telemetry.pods import PodLookup

if TYPE_CHECKING:
    from devicehost.edits.cdi import CdiWriter

log = logging.getLogger(__name__)

WATCH_START_SECONDS = 1.0
RUNNER_RETRY_SECONDS = 1.0


@dataclass
class Served:
    """One claimed resource on this face: its DevicePlugin service and, once served, the
    runner that serves and registers it."""

    claim: Claim
    servicer: DevicePluginServicer
    runner: ResourceRunner | None = None
    task: asyncio.Task[None] | None = None


class DevicePluginFace:
    """Every resource this host serves through the Device Plugin API v1beta1."""

    def __init__(self, config: HostConfig, telemetry: Telemetry, use_inotify: bool = True):
        self.config = config
        self.telemetry = telemetry
        self.use_inotify = use_inotify
        self.resources: dict[str, Served] = {}
        self.watcher = DirectoryWatcher(config.plugin_dir, on_task_restart=telemetry.task_restarted)
        self.lock = PluginDirLock(config.plugin_dir)
        #: the plugin directory is this host's: its resources may be served
        self.held = False
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False

    def add(
        self,
        claim: Claim,
        policies: PolicyChain | None,
        cdi: CdiWriter | None,
        tree: Path | None,
    ) -> None:
        """A resource the driver side claimed: its service, not served yet."""
        name = claim.driver.name
        servicer = DevicePluginServicer(
            claim.spec,
            claim.driver,
            claim.state,
            self.config.hook_timeout,
            self.telemetry,
            policies,
            cdi,
            tree=tree,
            allowed_edits=self.config.allowed_edits(name),
        )
        self.resources[claim.spec.name] = Served(claim, servicer)

    def withdraw(self, name: str) -> None:
        """Stop serving ``name`` (another driver declared it too): socket removed."""
        served = self.resources.pop(name, None)
        if served is not None and served.task is not None:
            served.task.cancel()

    def unserved(self) -> int:
        """Resources added whose sockets and streams are not open yet."""
        return sum(1 for s in self.resources.values() if s.task is None)

    def not_registered(self) -> list[str]:
        """Resources not (yet, or no longer) registered with the kubelet, for /readyz.
        None while another devicehost holds the directory: the rolling update that
        replaces it waits for this pod to be ready before it stops the old one."""
        if not self.held:
            return []
        return [
            name
            for name, s in self.resources.items()
            if s.runner is None or not s.runner.registered.is_set()
        ]

    # -- serving ---------------------------------------------------------------------------

    def open(self, handover: bool = False) -> bool:
        """Make the plugin directory if missing and lock it; True when locked. When another
        host holds it: ``PluginDirInUse`` without ``handover``; with it, False (``take_over``
        then waits for the other host to let it go)."""
        self.lock.make()
        try:
            self.lock.lock()
        except PluginDirInUse:
            if not handover:
                raise
            return False
        self.held = True
        return True

    async def take_over(self, seconds: float) -> None:
        """Lock the directory once the other host lets it go (``PluginDirInUse`` after
        ``seconds``); ``serve`` serves from then on."""
        await self.lock.wait_to_lock(seconds)
        self.held = True

    def start(self, launched: asyncio.Event) -> None:
        """The face's long-running tasks: the kubelet-restart count, the lock keeper, and
        the restart watch once ``launched`` and registered."""
        self._tasks.append(self._supervised("kubelet-restarts", self._count_kubelet_restarts))
        self._tasks.append(
            self._supervised(
                "plugin-dir-lock", functools.partial(self.lock.keep_locked, self.watcher)
            )
        )
        self._tasks.append(
            self._supervised(
                "watch-start", functools.partial(self._watch_when_registered, launched)
            )
        )

    def _supervised(self, name: str, run: Callable[[], Awaitable[object]]) -> asyncio.Task[None]:
        return supervision.start(name, run, self.telemetry.task_restarted)

    def serve(self, name: str) -> None:
        """Serve and register ``name`` (once; a runner restarts itself as a unit), once the
        plugin directory is this host's."""
        served = self.resources.get(name)
        if served is None or served.task is not None or not self.held:
            return
        spec = served.claim.spec
        served.runner = ResourceRunner(
            self.config, spec, served.servicer, self.watcher, self.telemetry
        )
        served.task = asyncio.create_task(served.runner.run(), name=f"resource-{spec.name}")
        served.task.add_done_callback(functools.partial(self._runner_ended, served))

    def _runner_ended(self, served: Served, task: asyncio.Task[None]) -> None:
        """A runner only ends when stopped; one that failed is a host bug, which must not
        leave its resource unserved for good: log it and serve the resource again."""
        if task.cancelled() or self._stopping or task.exception() is None:
            return
        exc = task.exception()
        name = served.claim.spec.name
        log.error(
            "resource %r: serving it failed (%s: %s); serving it again in %.0f s",
            name,
            type(exc).__name__,
            exc,
            RUNNER_RETRY_SECONDS,
            exc_info=exc,
        )
        served.task = None
        self.telemetry.task_restarted(f"resource-{name}")
        asyncio.get_running_loop().call_later(RUNNER_RETRY_SECONDS, self._serve_again, name)

    def _serve_again(self, name: str) -> None:
        if not self._stopping:
            self.serve(name)

    async def _watch_when_registered(self, launched: asyncio.Event) -> None:
        """Start the kubelet-restart watch once the drivers have come up and their
        resources are registered, or ``WATCH_START_SECONDS`` after start-up began (a slow
        or hung driver does not hold it back): its inotify binding costs ~8 ms to load (it
        runs ``ldconfig``), which every first registration used to wait for. A restart
        before then is not missed: the watch wakes every resource as it starts, and each
        checks the kubelet's socket and its own."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(WATCH_START_SECONDS):
                await launched.wait()
                await asyncio.gather(
                    *(s.runner.registered.wait() for s in self.resources.values() if s.runner)
                )
        if not self._stopping:
            self.watcher.start(self.use_inotify)
            descriptors.preload_recovery_modules()  # recovery must never need a descriptor

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

    # -- stop ------------------------------------------------------------------------------

    def cancel(self) -> list[asyncio.Task[None]]:
        """Stop serving: every runner and task cancelled (sockets removed as they end)."""
        self._stopping = True
        tasks = [*self._tasks, *(s.task for s in self.resources.values() if s.task is not None)]
        for task in tasks:
            task.cancel()
        return tasks

    async def close(self) -> None:
        await self.watcher.close()


def pod_resolver(config: HostConfig) -> PodLookup:
    """The kubelet's PodResources client (pod UIDs from its device-manager checkpoint),
    imported only when tracing needs it (its generated protobuf modules cost every start
    otherwise)."""
    from devicehost.kubelet.deviceplugin.podresources import PodResolver

    return PodResolver(
        config.pod_resources_socket,
        checkpoint=config.plugin_dir / CHECKPOINT_FILE,
        timeout=config.pod_identity_timeout,
    )
