"""One DRA driver's ResourceSlices on the API server, kept equal to its pool.

The publisher rebuilds the pool (``slices.build_pool``) whenever it is told something
changed — a snapshot replaced, the kubelet registering the plugin again — and applies the
slices whose pool got a new generation, then deletes this driver's slices on this node
that the pool no longer has (fewer slices than before, or left by an earlier run). Its
first pool continues the generation of the slices already there, so a restarted host
never publishes a generation the scheduler has seen with other devices.

Every slice is owned by the Node object (``ownerReferences``, as k8s.io/dynamic-resource-
allocation's ``resourceslice`` controller does), so deleting the Node deletes them; the
kubelet itself deletes a driver's slices some time after the driver unregisters (the
registration socket removed at stop), so an uninstall leaves none and a restart within
that time changes nothing. An API call that fails is retried with exponential back-off
and jitter (tenacity), each failure reported; a change arriving meanwhile is published by
the next attempt, which rebuilds the pool.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, wait_exponential_jitter

from devicehost.kubelet.dra.slices import Pool, PoolDevice, Unhealthy, build_pool

log = logging.getLogger(__name__)

FIRST_RETRY_SECONDS = 0.5
MAX_RETRY_SECONDS = 30.0


class ApiProblem(Exception):
    """An API call failed (unreachable, refused, or an error answer); retried."""


class SliceApi(Protocol):
    """The API calls publishing needs (``api.LightkubeApi`` is the real one)."""

    async def node_uid(self, node: str) -> str: ...

    async def list_slices(self, node: str, driver: str) -> list[dict[str, Any]]: ...

    async def apply_slice(self, document: dict[str, Any]) -> None: ...

    async def delete_slice(self, name: str) -> None: ...


class SlicePublisher:
    """Publishes one DRA driver's pool on one node until cancelled."""

    def __init__(
        self,
        api: SliceApi,
        driver: str,
        node: str,
        entries: Callable[[], Iterable[PoolDevice]],
        unhealthy: Unhealthy = Unhealthy.WITHDRAW,
        on_error: Callable[[str], None] = lambda message: None,
        first_retry: float = FIRST_RETRY_SECONDS,
        max_retry: float = MAX_RETRY_SECONDS,
    ) -> None:
        self.api = api
        self.driver = driver
        self.node = node
        self.entries = entries
        self.unhealthy = unhealthy
        self.on_error = on_error
        self.first_retry = first_retry
        self.max_retry = max_retry
        #: The pool the API server has, once published.
        self.published: Pool | None = None
        #: Why the last attempt failed; None once one succeeded.
        self.last_error: str | None = None
        self._owner: dict[str, Any] | None = None
        self._stale: set[str] = set()
        self._changed = asyncio.Event()
        self._force = False

    def changed(self) -> None:
        """Something in the pool may have changed: rebuild it, publish if it did."""
        self._changed.set()

    def republish(self) -> None:
        """Apply every slice again even if unchanged (the kubelet registered the plugin
        again and may have deleted them meanwhile)."""
        self._force = True
        self._changed.set()

    async def run(self) -> None:
        async for attempt in self._retrying():
            with attempt:
                await self._start()
        while True:
            self._changed.clear()
            async for attempt in self._retrying():
                with attempt:
                    await self._publish()
            await self._changed.wait()

    def _retrying(self) -> AsyncRetrying:
        return AsyncRetrying(
            retry=retry_if_exception_type(ApiProblem),
            wait=wait_exponential_jitter(
                multiplier=self.first_retry, max=self.max_retry, jitter=self.first_retry
            ),
            before_sleep=self._failed,
            reraise=True,
        )

    def _failed(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        self.last_error = str(exc)
        delay = state.next_action.sleep if state.next_action else 0.0
        log.error(
            "DRA driver %s: publishing its ResourceSlices failed (%s); retrying in %.1f s "
            "(attempt %d)",
            self.driver,
            exc,
            delay,
            state.attempt_number,
        )
        self.on_error(self.driver)

    async def _start(self) -> None:
        """The Node's UID for owner references, and the slices an earlier run left."""
        uid = await self.api.node_uid(self.node)
        self._owner = {
            "apiVersion": "v1",
            "kind": "Node",
            "name": self.node,
            "uid": uid,
            "controller": True,
        }
        existing = await self.api.list_slices(self.node, self.driver)
        self._stale = {s["metadata"]["name"] for s in existing}
        generations = [s["spec"]["pool"].get("generation", 0) for s in existing]
        if generations:
            # Seeds the generation: the first pool is one past what the scheduler saw.
            self.published = Pool(
                driver=self.driver,
                name=self.node,
                generation=max(generations),
                slices=[],
                devices={},
            )
            self._force = True

    async def _publish(self) -> None:
        pool = build_pool(self.driver, self.node, self.entries(), self.published, self.unhealthy)
        unchanged = self.published is not None and pool.generation == self.published.generation
        if unchanged and not self._force:
            return
        force, self._force = self._force, False
        try:
            for document in pool.slices:
                document["metadata"]["ownerReferences"] = [dict(self._owner or {})]
                await self.api.apply_slice(document)
            names = {s["metadata"]["name"] for s in pool.slices}
            old = (
                {s["metadata"]["name"] for s in self.published.slices} if self.published else set()
            )
            for name in sorted((old | self._stale) - names):
                await self.api.delete_slice(name)
        except ApiProblem:
            self._force = self._force or force
            raise
        if pool.notes:
            for note in pool.notes:
                log.warning("DRA driver %s: %s", self.driver, note)
        self._stale.clear()
        self.published = pool
        self.last_error = None
        log.info(
            "DRA driver %s: published pool %s generation %d: %d device%s in %d slice%s",
            self.driver,
            pool.name,
            pool.generation,
            sum(len(s["spec"]["devices"]) for s in pool.slices),
            "" if sum(len(s["spec"]["devices"]) for s in pool.slices) == 1 else "s",
            len(pool.slices),
            "" if len(pool.slices) == 1 else "s",
        )
