"""Crash-only supervision of the host's long-running tasks: none of them can end silently.

Every long-running task of the host (a driver's supervisor, a worker's stderr reader, the
node-label writer, a CDI or feature-file retry, a scanner, the restart watch, the status
server's heartbeat) runs through ``supervise``: when its coroutine raises anything, the
task is named in the log — with the traceback the first time, one line after that —
counted in ``devicehost_task_restarts_total{task}``, and started again after a capped,
doubling back-off. Only cancellation (the host stopping) ends it. A coroutine that
returns has finished its job; that is not a failure.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

FIRST_RESTART_SECONDS = 0.5
MAX_RESTART_SECONDS = 30.0
#: A run that lasted this long was healthy: the next failure starts the back-off over.
STABLE_SECONDS = 60.0

#: Called with the task's name each time it is restarted (the metric).
OnRestart = Callable[[str], None]


async def supervise(
    name: str,
    run: Callable[[], Awaitable[object]],
    on_restart: OnRestart | None = None,
    first_restart: float = FIRST_RESTART_SECONDS,
) -> None:
    """Run ``run()`` until it returns; restart it with back-off whenever it raises."""
    loop = asyncio.get_running_loop()
    delay = first_restart
    failures = 0
    while True:
        started = loop.time()
        try:
            await run()
            return
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # SystemExit from a library must not end a task either
            if loop.time() - started >= STABLE_SECONDS:
                delay = first_restart
            failures += 1
            log.error(
                "host task %r failed (%s: %s); restarting it in %.1f s (failure %d)",
                name,
                type(exc).__name__,
                exc,
                delay,
                failures,
                exc_info=exc if failures == 1 else None,
            )
            if on_restart is not None:
                try:
                    on_restart(name)
                except Exception:  # counting must never stop the restart
                    log.exception("host task %r: counting its restart failed", name)
        await asyncio.sleep(delay)
        delay = min(delay * 2, MAX_RESTART_SECONDS)


def start(
    name: str,
    run: Callable[[], Awaitable[object]],
    on_restart: OnRestart | None = None,
) -> asyncio.Task[None]:
    """``supervise`` as a task named ``name``."""
    return asyncio.get_running_loop().create_task(supervise(name, run, on_restart), name=name)
