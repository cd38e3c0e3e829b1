"""Run a devicehost ``Host`` in a background thread with its own event loop.

For tests and the demo: the host runs exactly as ``devicehost run`` runs it, while the
calling thread drives a kubelet stand-in and checks what arrives.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable
from concurrent.futures import Future
from typing import Any, TypeVar

from devicehost.config.host_config import HostConfig, with_overrides
from devicehost.host import Host
from devicehost.testing.fakeroot import FakeRoot

T = TypeVar("T")


class HostThread:
    """``start()`` returns once the host has started (or raises what start-up raised).

    ``overrides`` are HostConfig keys as in the YAML file (``enabledDrivers=["x"]``,
    ``drivers={"x": {...}}``, ``registration={"maxBackoffSeconds": 1}``); see
    ``devicehost.config.host_config.with_overrides``.
    """

    def __init__(self, config: HostConfig, **overrides: Any) -> None:
        self.config = with_overrides(config, overrides, "HostThread") if overrides else config
        self.host = Host(self.config)
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._started: Future[None] = Future()
        self._thread = threading.Thread(target=self._main, name="devicehost", daemon=True)

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._serve())

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        try:
            await self.host.start()
        except BaseException as exc:
            self._started.set_exception(exc)
            await self.host.stop()
            return
        self._started.set_result(None)
        try:
            await self._stop.wait()
        finally:
            await self.host.stop()

    def start(self, timeout: float = 30.0) -> HostThread:
        """Start the host; return once it serves (raises what start-up raised)."""
        self._thread.start()
        self._started.result(timeout)
        return self

    def call(self, fn: Any, *args: Any) -> Any:
        """Run ``fn(*args)`` on the host's loop (e.g. to read state) and return its result."""

        async def run() -> Any:
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(10)

    def run(self, awaitable: Awaitable[T], timeout: float = 30.0) -> T:
        """Await ``awaitable`` on the host's loop (e.g. a driver call) and return its result."""

        async def run() -> T:
            return await awaitable

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout)

    def simulated_root(self, driver: str) -> FakeRoot:
        """The tree ``driver`` simulates its hardware in (under ``simulate=True``), to flip
        a fake sysfs attribute the way real hardware would change it."""
        root = self.host.simulated_root(driver)
        if root is None:
            raise ValueError(f"the host is not simulating, or has no driver named {driver!r}")
        return FakeRoot(root)

    def driver_path(self, driver: str, host_path: str) -> str:
        """``host_path`` from an answer as ``driver`` declared it: under ``simulate`` the
        host answers with host paths inside the driver's simulated tree (so a runtime on
        the node finds them), on hardware as declared. A test that compares with this holds
        on both: ``host.driver_path(NAME, node.host_path) == "/dev/widget1"``."""
        root = self.host.simulated_root(driver)
        prefix = "" if root is None else str(root)
        if prefix and host_path.startswith(prefix + "/"):
            return host_path[len(prefix) :]
        return host_path

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the host (streams end, sockets go, drivers shut down); idempotent."""
        if self._thread.is_alive() and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout)
        if not self._loop.is_closed() and not self._thread.is_alive():
            self._loop.close()

    def __enter__(self) -> HostThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
