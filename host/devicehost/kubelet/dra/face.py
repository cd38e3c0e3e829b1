"""The DRA face of one host: a DRA driver per devicehost driver with resources configured
``api: dra``, served, registered, published and stopped as a unit under the host's task
supervisor.

The host hands it each such resource the driver side claims (``add``) and withdraws
(``withdraw``), and says when one should be served (``serve``): the resource's driver
then gets its DRA and registration sockets (``plugin``), a ``Preparer`` that reads the
driver's pool as it is at each call (so a resource served later joins the same pool) and
claims from the API server, and a ``SlicePublisher`` woken by every snapshot change and
every registration. A driver whose DRA name, node or API client cannot be used is not
served, with one error line each and the reason on /readyz; every other resource is
served as usual.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from devicehost.config.host_config import HostConfig
from devicehost.config.resource_api import DRA_API
from devicehost.drivers.ownership import Claim
from devicehost.drivers.validation import Invalid, allocation_from_plain
from devicehost.edits.compose import PolicyChain
from devicehost.errors import DriverError, RequestRefused, UnknownDevice
from devicehost.kubelet.dra.attributes import facts_from_snapshot
from devicehost.kubelet.dra.checkpoint import Checkpoint
from devicehost.kubelet.dra.claims import ClaimSource
from devicehost.kubelet.dra.health import Changes, HealthServicer
from devicehost.kubelet.dra.naming import driver_name, pool_name
from devicehost.kubelet.dra.plugin import DraPlugin, driver_dir
from devicehost.kubelet.dra.prepare import PoolView, PrepareError, Preparer
from devicehost.kubelet.dra.publisher import SliceApi, SlicePublisher
from devicehost.kubelet.dra.slices import PoolDevice, Unhealthy
from devicehost.model import NO_EDITS, ContainerEdits
from devicehost.system import supervision
from devicehost.telemetry import tracing
from devicehost.telemetry.facade import Telemetry

log = logging.getLogger(__name__)

CHECKPOINT_FILE = "checkpoint.json"
#: Locked around every change of the claims, by every instance of the driver on the node.
LOCK_FILE = "serialize.lock"


class ApiClient(SliceApi, ClaimSource, Protocol):
    """The API server, as publishing and prepare use it (``api.LightkubeApi``)."""

    async def close(self) -> None: ...


@dataclass
class DraDriver:
    """One devicehost driver as a DRA driver: its resources and, once served, its plugin."""

    driver: str
    name: str
    claims: dict[str, Claim] = field(default_factory=dict)
    policies: PolicyChain | None = None
    plugin: DraPlugin | None = None
    publisher: SlicePublisher | None = None
    task: asyncio.Task[None] | None = None
    #: Bumped at every change, for the health streams.
    changes: Changes = field(default_factory=Changes)

    def changed(self, _devices: object = None) -> None:
        """A snapshot of one of its resources was replaced: publish the pool again and
        tell the kubelet's health stream."""
        self.changes.bump()
        if self.publisher is not None:
            self.publisher.changed()


class DraFace:
    """Every resource this host serves through DRA, grouped by driver."""

    def __init__(self, config: HostConfig, telemetry: Telemetry) -> None:
        self.config = config
        self.telemetry = telemetry
        self.drivers: dict[str, DraDriver] = {}
        #: Resources refused by this face: name → (its driver, why), shown on /readyz.
        self.refused: dict[str, tuple[str, str]] = {}
        #: The API server's client, made at the first DRA driver's start (lightkube is
        #: imported then, off the event loop); a test may set its own before.
        self.api: ApiClient | None = None
        #: Each simulated driver's tree (``edits.simulated_paths``).
        self.trees: dict[str, Path] = {}
        self._api_lock = asyncio.Lock()
        self._stopping = False

    def covers(self, resource: str) -> bool:
        """Whether ``resource`` is configured to be served through DRA."""
        return self.config.api_of(resource) == DRA_API

    def dra_name(self, driver: str) -> str:
        """The DRA driver name of ``driver`` (``ValueError`` when the configured or
        derived name is not one)."""
        return driver_name(driver, self.config.dra_driver_names)

    # -- what the host hands over ----------------------------------------------------------

    def add(self, claim: Claim, policies: PolicyChain | None, tree: Path | None = None) -> None:
        """A DRA resource the driver side claimed: part of its driver's pool, not served yet.
        ``tree``: its driver's simulated tree, where ``allocate`` answers' host paths move."""
        driver = claim.driver.name
        if tree is not None:
            self.trees[driver] = tree
        resource = claim.spec.name
        problem = self._problem(driver)
        if problem:
            self.refused[resource] = (driver, problem)
            log.error("resource %r is not served through DRA: %s", resource, problem)
            return
        entry = self.drivers.get(driver)
        if entry is None:
            entry = self.drivers[driver] = DraDriver(driver, self.dra_name(driver))
        entry.claims[resource] = claim
        entry.policies = policies
        claim.state.subscribe(entry.changed)
        entry.changed()

    def _problem(self, driver: str) -> str | None:
        try:
            self.dra_name(driver)
        except ValueError as exc:
            return str(exc)
        if not self.config.node_name:
            return (
                "DRA names its pool after the node, and no node name is set (nodeName, "
                "DEVICEHOST_NODE_NAME or NODE_NAME: the pod's spec.nodeName)"
            )
        try:
            pool_name(self.config.node_name)
        except ValueError as exc:
            return str(exc)
        return None

    def withdraw(self, resource: str) -> None:
        """``resource`` left its driver's pool (another driver declared it too)."""
        self.refused.pop(resource, None)
        for entry in self.drivers.values():
            if entry.claims.pop(resource, None) is not None:
                entry.changed()

    def serve(self, resource: str) -> None:
        """Serve ``resource``'s driver through DRA (once: its other resources share it)."""
        for entry in self.drivers.values():
            if resource in entry.claims and entry.task is None and not self._stopping:
                entry.task = self._supervised(
                    f"dra-{entry.driver}", functools.partial(self._run, entry)
                )

    def _supervised(self, name: str, run: Callable[[], Awaitable[object]]) -> asyncio.Task[None]:
        return supervision.start(name, run, self.telemetry.task_restarted)

    # -- what readiness and ``devicehost drivers`` read ------------------------------------

    def unserved(self) -> int:
        """Drivers with DRA resources whose sockets are not open yet (a DRA driver holds
        three descriptors however many resources it has: two sockets and a checkpoint)."""
        return sum(1 for e in self.drivers.values() if e.task is None)

    def not_ready(self) -> list[str]:
        """Why DRA resources are not (yet) served, for /readyz."""
        reasons = [f"resource {r!r}: {why}" for r, (_, why) in sorted(self.refused.items())]
        for entry in self.drivers.values():
            plugin = entry.plugin
            if plugin is None or not plugin.registration.registered.is_set():
                reasons.append(f"DRA driver {entry.name} is not registered with the kubelet")
        return reasons

    def row(self, driver: str) -> dict[str, object] | None:
        """The DRA part of ``driver``'s row in ``devicehost drivers``, or None."""
        entry = self.drivers.get(driver)
        refused = {r: why for r, (d, why) in sorted(self.refused.items()) if d == driver}
        if entry is None and not refused:
            return None
        publisher = entry.publisher if entry else None
        row: dict[str, object] = {
            "name": entry.name if entry else "",
            "resources": sorted(entry.claims) if entry else [],
            "registered": bool(
                entry and entry.plugin and entry.plugin.registration.registered.is_set()
            ),
        }
        if publisher is not None and publisher.published is not None:
            row["generation"] = publisher.published.generation
        if publisher is not None and publisher.last_error:
            row["publishError"] = publisher.last_error
        if refused:
            row["refused"] = refused
        return row

    # -- serving ---------------------------------------------------------------------------

    def _pool(self, entry: DraDriver) -> PoolView:
        claims = dict(entry.claims)
        return PoolView(
            pool=pool_name(self.config.node_name),
            specs={r: c.spec for r, c in claims.items()},
            snapshots={r: c.state.devices for r, c in claims.items()},
        )

    def _entries(self, entry: DraDriver) -> list[PoolDevice]:
        return [
            PoolDevice(resource=resource, device=device, facts=facts_from_snapshot(device))
            for resource, claim in list(entry.claims.items())
            for device in claim.state.devices.values()
        ]

    async def _hooks(self, entry: DraDriver, resource: str, ids: list[str]) -> ContainerEdits:
        """The driver's hooks for a claim's devices of ``resource``, in the order the
        kubelet calls them for a device plugin: ``allocate`` (its edits checked like every
        driver answer and moved into a simulated tree), then ``pre_start`` (a claim is
        prepared just before its containers start); each in a child span, a failure the
        claim's ``PrepareError``."""
        claim = entry.claims.get(resource)
        if claim is None:
            raise PrepareError(f"resource {resource!r} is no longer served through DRA")
        driver = claim.driver
        extra = NO_EDITS
        for hook in ("devicehost_allocate", "devicehost_pre_start"):
            if not driver.implements(hook):
                continue
            attributes = {tracing.DRIVER: driver.name, tracing.REQUESTED: list(ids)}
            with self.telemetry.tracing.child_span(hook, **attributes):
                try:
                    answer = await driver.acall(
                        hook, self.config.hook_timeout, resource=resource, device_ids=list(ids)
                    )
                except (DriverError, RequestRefused, UnknownDevice) as exc:
                    if isinstance(exc, DriverError):
                        self.telemetry.driver_error(driver.name, hook)
                    raise PrepareError(
                        f"driver {driver.name!r}, resource {resource!r}: {exc}"
                    ) from None
            if hook == "devicehost_allocate":
                allowed = self.config.allowed_edits(driver.name)
                try:
                    extra = allocation_from_plain(answer, allowed, self.trees.get(driver.name))
                except Invalid as exc:
                    self.telemetry.driver_error(driver.name, hook)
                    raise PrepareError(
                        f"driver {driver.name!r}, resource {resource!r}: "
                        f"{hook} returned an invalid Allocation: {exc}"
                    ) from None
        return extra

    async def _client(self) -> ApiClient:
        """The one API client of this host (``MissingClient`` when it cannot be made)."""
        async with self._api_lock:
            if self.api is None:
                from devicehost.kubelet.dra.api import LightkubeApi

                # lightkube's import costs ~0.5 s of CPU: never on the event loop.
                self.api = await asyncio.to_thread(LightkubeApi, self.config.kubeconfig)
            return self.api

    async def _run(self, entry: DraDriver) -> None:
        """Serve and publish one DRA driver until cancelled; its sockets go with it."""
        from devicehost.kubelet.dra.api import MissingClient

        try:
            api = await self._client()
        except MissingClient as exc:
            for resource in entry.claims:
                self.refused[resource] = (entry.driver, str(exc))
            log.error("DRA driver %s is not served: %s", entry.name, exc)
            return
        publisher = SlicePublisher(
            api,
            entry.name,
            self.config.node_name,
            lambda: self._entries(entry),
            Unhealthy(self.config.dra_unhealthy),
            lambda name: self.telemetry.metrics.slice_publish_errors.inc(driver=name),
        )
        directory = driver_dir(self.config.kubelet_dir, entry.name)
        preparer = Preparer(
            entry.name,
            api,
            lambda: self._pool(entry),
            self.config.cdi_dir,
            Checkpoint(directory / CHECKPOINT_FILE),
            entry.policies,
            hooks=functools.partial(self._hooks, entry),
            lock_path=directory / LOCK_FILE,
        )
        plugin = DraPlugin(
            entry.name,
            preparer,
            self.config.kubelet_dir,
            publisher.republish,
            self.telemetry.tracing,
            HealthServicer(lambda: self._pool(entry), entry.changes),
            pod_uid=self.config.pod_uid,
        )
        await plugin.start()
        entry.plugin, entry.publisher = plugin, publisher
        try:
            await publisher.run()
        finally:
            entry.publisher = None
            await plugin.stop(None)

    # -- stop ------------------------------------------------------------------------------

    def cancel(self) -> list[asyncio.Task[None]]:
        """Stop serving: every DRA driver's task cancelled (sockets removed as they end)."""
        self._stopping = True
        tasks = [e.task for e in self.drivers.values() if e.task is not None]
        for task in tasks:
            task.cancel()
        return tasks

    async def close(self) -> None:
        """Close the API client (after ``cancel``'s tasks ended)."""
        if self.api is not None:
            await self.api.close()
