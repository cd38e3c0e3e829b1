"""Run blocking driver calls off the event loop, one small pool of daemon threads per driver.

Why not ``ThreadPoolExecutor``: its threads are joined at interpreter exit, so one hung
vendor call would stop the process from ever exiting. These threads are daemons, and each
driver has its own pool, so a driver that hangs exhausts only its own threads.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
_Job = tuple[concurrent.futures.Future[Any], Callable[[], Any]]


class WorkerPool:
    """Up to ``size`` daemon threads, started on demand, running one driver's calls."""

    def __init__(self, name: str, size: int = 4) -> None:
        self.name = name
        self.size = size
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._idle = 0

    def submit(self, fn: Callable[[], T]) -> concurrent.futures.Future[T]:
        """Run ``fn`` in a worker thread, in the caller's context (so spans nest)."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        context = contextvars.copy_context()
        self._jobs.put((future, lambda: context.run(fn)))
        with self._lock:
            if self._idle == 0 and len(self._threads) < self.size:
                thread = threading.Thread(
                    target=self._work, name=f"{self.name}-{len(self._threads)}", daemon=True
                )
                self._threads.append(thread)
                thread.start()
        return future

    def _work(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            job = self._jobs.get()
            with self._lock:
                self._idle -= 1
            if job is None:
                return
            future, fn = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn())
            except BaseException as exc:
                future.set_exception(exc)

    def close(self) -> None:
        """Let idle workers exit; a worker stuck in a hung call is abandoned (daemon)."""
        with self._lock:
            count = len(self._threads)
            self._threads.clear()
        for _ in range(count):
            self._jobs.put(None)


async def run_with_timeout(pool: WorkerPool, fn: Callable[[], T], timeout: float) -> T:
    """Await ``fn()`` run in ``pool``; raise ``TimeoutError`` after ``timeout`` seconds."""
    future = asyncio.wrap_future(pool.submit(fn))
    return await asyncio.wait_for(future, timeout)
