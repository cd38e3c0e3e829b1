"""How the supervisor restarts a driver's worker: back-off, crash-looping, and a stable
run starting both over (drivers/supervisor.py), with a real zygote and worker."""

from __future__ import annotations

import asyncio
import os
import signal
import time

from devicehost.drivers.discovery import DriverInfo, DriverStatus
from devicehost.drivers.supervisor import CRASH_LOOP_RESTARTS, DriverHandle
from devicehost.drivers.zygote import Zygote


async def kill_workers(times: int, after: float, stable_seconds: float) -> tuple[set[str], int]:
    """Supervise a driver, SIGKILL its worker ``times`` times, each ``after`` seconds into
    its run; return every status it showed, and its restarts."""
    info = DriverInfo(
        name="ordered",
        distribution="devicehost-ordered",
        version="1",
        status=DriverStatus.STARTING,
        entry_point="testdrivers.ordered:Ordered",
    )
    zygote = Zygote()
    handle = DriverHandle(info, zygote, 30.0, first_restart=0.01, stable_seconds=stable_seconds)
    shown: set[str] = set()

    async def bring_up(handle: DriverHandle, process: object, first: bool) -> None:
        return None

    supervising = asyncio.create_task(handle.supervise(bring_up, lambda why: None))
    try:
        last = None
        for _ in range(times):
            while not (
                handle.info.status is DriverStatus.ACTIVE
                and handle.process is not None
                and handle.process.pid not in (None, last)
            ):
                await asyncio.sleep(0.005)
            assert handle.process is not None and handle.process.pid is not None
            last = handle.process.pid
            await asyncio.sleep(after)
            os.kill(last, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while handle.info.status is DriverStatus.ACTIVE and time.monotonic() < deadline:
                await asyncio.sleep(0.005)
            shown.add(str(handle.info.status))
        return shown, handle.info.restarts
    finally:
        await handle.stop()
        supervising.cancel()
        await asyncio.gather(supervising, return_exceptions=True)
        await zygote.close()


def test_a_worker_that_keeps_dying_at_once_is_crash_looping():
    """Killed as soon as it runs, again and again: crash-looping after the set number of
    restarts."""
    shown, _ = asyncio.run(kill_workers(CRASH_LOOP_RESTARTS, after=0.0, stable_seconds=30.0))
    assert "crash-looping" in shown


def test_a_stable_run_starts_the_crash_loop_count_over():
    """A worker that dies only after a stable run is restarted (each counted), but never
    shown as crash-looping: each stable run starts the back-off and the count over."""
    shown, restarts = asyncio.run(
        kill_workers(CRASH_LOOP_RESTARTS + 1, after=0.3, stable_seconds=0.2)
    )
    assert shown == {"restarting"}
    assert restarts >= CRASH_LOOP_RESTARTS
