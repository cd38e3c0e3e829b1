"""Run blocking driver calls off the event loop, one small pool of daemon threads per driver.

Why not ``ThreadPoolExecutor``: its threads are joined at interpreter exit, so one hung
vendor call would stop the process from ever exiting. These threads are daemons, and each
driver has its own pool, so a driver that hangs exhausts only its own threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class WorkerPool:
    """Up to ``size`` daemon threads, started on demand, running one driver's calls."""

    def __init__(self, name: str, size: int = 4) -> None:
        self.name = name
        self.size = size
        self._jobs: queue.SimpleQueue[Callable[[], object] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._idle = 0

    def submit(self, job: Callable[[], object]) -> None:
        """Run ``job`` in a worker thread (starting one if none is idle and there is room)."""
        self._jobs.put(job)
        with self._lock:
            if self._idle == 0 and len(self._threads) < self.size:
                thread = threading.Thread(
                    target=self._work, name=f"{self.name}-{len(self._threads)}", daemon=True
                )
                self._threads.append(thread)
                thread.start()

    def _work(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            job = self._jobs.get()
            with self._lock:
                self._idle -= 1
            if job is None:
                return
            job()

    def close(self) -> None:
        """Let idle workers exit; a worker stuck in a hung call is abandoned (daemon)."""
        with self._lock:
            count = len(self._threads)
            self._threads.clear()
        for _ in range(count):
            self._jobs.put(None)


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if not future.done():  # a timed-out call may finish long after its caller gave up
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(error)


async def run_with_timeout(pool: WorkerPool, fn: Callable[[], T], timeout: float) -> T:
    """Await ``fn()`` run in ``pool``, in the caller's context (so spans nest); raise
    ``TimeoutError`` after ``timeout`` seconds. The worker hands the outcome straight back to
    the loop: no intermediate concurrent future, no extra task."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()
    context = contextvars.copy_context()

    def job() -> None:
        try:
            outcome: tuple[Any, BaseException | None] = (context.run(fn), None)
        except BaseException as exc:
            outcome = (None, exc)
        with contextlib.suppress(RuntimeError):  # the loop closed while a hung call ran
            loop.call_soon_threadsafe(_settle, future, *outcome)

    pool.submit(job)
    async with asyncio.timeout(timeout):
        return await future
