"""Keep one driver's worker process running: start it, bring it up, restart it when it dies.

A worker that exits, crashes (a segfault included), stops answering or cannot import its
driver is started again with tenacity's capped, jittered exponential back-off. After
``CRASH_LOOP_RESTARTS`` restarts without a stable run the driver is shown as
*crash-looping* and retried at the slow cap (five minutes, as the kubelet does with a
crash-looping container) — never abandoned, so a vendor library that recovers brings the
devices back without a pod restart. A run that lasted ``STABLE_SECONDS`` resets the
back-off. Only "no hardware here" (``DriverUnavailable``) and a config error end the
supervision: neither can change without a new config or node.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from devicehost.drivers.discovery import DRIVER_GROUP, DriverInfo, DriverStatus
from devicehost.drivers.process import MAX_ZOMBIES, DriverInvalid, WorkerExited, WorkerProcess
from devicehost.drivers.zygote import Zygote
from devicehost.errors import DriverError, DriverUnavailable

if TYPE_CHECKING:
    from tenacity import RetryCallState

log = logging.getLogger(__name__)

FIRST_RESTART_SECONDS = 1.0
MAX_RESTART_SECONDS = 300.0
CRASH_LOOP_RESTARTS = 5
STABLE_SECONDS = 60.0
STOP_GRACE_SECONDS = 1.0


class WorkerDown(Exception):
    """This run of the worker ended; the supervisor starts another after a back-off."""

    def __init__(self, why: str, stable: bool) -> None:
        super().__init__(why)
        self.why = why
        self.stable = stable


def _unstable(exc: BaseException) -> bool:
    """Restart with back-off: the worker went down before its run was stable."""
    return isinstance(exc, WorkerDown) and not exc.stable


class DriverFinal(Exception):
    """The driver cannot run on this node with this config (unavailable, config error)."""


BringUp = Callable[["DriverHandle", WorkerProcess, bool], Awaitable[None]]


class DriverHandle:
    """One installed driver as the host sees it: status, hooks, and calls into its worker."""

    def __init__(
        self,
        info: DriverInfo,
        zygote: Zygote,
        start_timeout: float,
        on_notify: Callable[[str], None] | None = None,
        log_level: str = "info",
        first_restart: float = FIRST_RESTART_SECONDS,
        stable_seconds: float = STABLE_SECONDS,
        on_restart: Callable[[str], None] | None = None,
        on_error: Callable[[str, str], None] | None = None,
        prestarted: WorkerProcess | None = None,
        on_task_restart: Callable[[str], None] | None = None,
        on_start_failure: Callable[[str], None] | None = None,
        on_resources_changed: Callable[[], None] | None = None,
        unavailable_retry: float = 0.0,
    ) -> None:
        self.info = info
        self.zygote = zygote
        #: A worker spawned before the host was built (``devicehost run``), for the first run.
        self._prestarted = prestarted
        self.name = info.name
        self.start_timeout = start_timeout
        #: Zombie descendants past which the worker is restarted (``limits.zombiesPerDriver``).
        self.max_zombies = MAX_ZOMBIES
        self.on_notify = on_notify or (lambda resource: None)
        self.log_level = log_level
        self.first_restart = first_restart
        self.stable_seconds = stable_seconds
        self.on_restart = on_restart
        self.on_error = on_error
        self.on_task_restart = on_task_restart
        self.on_start_failure = on_start_failure
        self.on_resources_changed = on_resources_changed or (lambda: None)
        #: seconds between tries of a driver that found no hardware (0: never again)
        self.unavailable_retry = unavailable_retry
        #: tries since the driver was first found unavailable
        self.unavailable_tries = 0
        #: runs in a row that went down since the driver last served (0 while it serves)
        self.runs_down = 0
        self.process: WorkerProcess | None = None
        self.hooks: frozenset[str] = frozenset()
        #: Set once the first run has brought the driver up, failed for good, or given up.
        self.settled = asyncio.Event()
        self._stopping = False
        #: a first run was started: every run after it is a restart
        self._ran = False

    def implements(self, hook: str) -> bool:
        """True when the driver itself implements ``hook`` (known once its worker started)."""
        return hook in self.hooks

    @property
    def up(self) -> bool:
        return self.process is not None and not self.process.exited.done()

    async def acall(self, hook: str, timeout: float, **kwargs: Any) -> Any:
        """Call ``hook`` in the current worker; ``DriverError`` when none is running."""
        process = self.process
        if process is None or process.exited.done():
            raise DriverError(self.name, hook, f"its worker is not running ({self.info.status})")
        return await process.call(hook, timeout, **kwargs)

    def _mark(self, status: DriverStatus, reason: str = "") -> None:
        self.info.status = status
        self.info.reason = reason

    # -- supervision -----------------------------------------------------------------------

    async def supervise(self, bring_up: BringUp, on_down: Callable[[str], None]) -> None:
        """Run the driver until ``stop()``; restart its worker whenever it goes down. A run
        that lasted ``stable_seconds`` ends the back-off: the next start is at once, and
        the restarts towards *crash-looping* are counted from it. A driver that found none
        of its hardware is tried again every ``unavailable_retry`` seconds, as a first
        start (not a restart): hardware a provisioning step creates later is served."""
        while True:
            await self._supervise_until_final(bring_up, on_down)
            if (
                self._stopping
                or self.info.status is not DriverStatus.UNAVAILABLE
                or not self.unavailable_retry
            ):
                return
            if not self.unavailable_tries:
                log.info(
                    "driver %r: trying again every %g s in case its hardware appears",
                    self.name,
                    self.unavailable_retry,
                )
            await asyncio.sleep(self.unavailable_retry)
            self.unavailable_tries += 1
            self._ran = False

    async def _supervise_until_final(
        self, bring_up: BringUp, on_down: Callable[[str], None]
    ) -> None:
        try:
            await self._run_once(bring_up, on_down, 1)
        except DriverFinal:
            self.settled.set()
        except WorkerDown as down:
            await self._restart(bring_up, on_down, down)
        except Exception as exc:
            # A host bug (not the driver's): the caller's supervision logs it and runs this
            # again; the worker of the failed run goes, so the next run starts clean.
            why = f"the host failed supervising it ({type(exc).__name__}: {exc})"
            if self.process is not None:
                await self.process.kill(why)
            self._down(why, on_down, 1)
            raise

    async def _restart(
        self, bring_up: BringUp, on_down: Callable[[str], None], down: WorkerDown
    ) -> None:
        """The first run went down: restart with tenacity's back-off, which sees that run's
        end as its own first attempt. Imported only now: a driver that never goes down
        needs none of it, and tenacity costs every start ~8 ms to import."""
        from tenacity import AsyncRetrying, retry_if_exception
        from tenacity.wait import wait_exponential_jitter

        pending: WorkerDown | None = down
        while not self._stopping:
            retrying = AsyncRetrying(
                wait=wait_exponential_jitter(
                    multiplier=self.first_restart,
                    max=MAX_RESTART_SECONDS,
                    jitter=self.first_restart,
                ),
                retry=retry_if_exception(_unstable),
                before_sleep=self._before_restart,
                reraise=True,
            )
            try:
                async for attempt in retrying:
                    with attempt:
                        if pending is not None:
                            ended, pending = pending, None
                            raise ended
                        await self._run_once(bring_up, on_down, attempt.retry_state.attempt_number)
                return
            except WorkerDown:
                continue  # a stable run ended: start over with the short back-off
            except DriverFinal:
                self.settled.set()
                return

    async def _run_once(
        self, bring_up: BringUp, on_down: Callable[[str], None], attempt: int
    ) -> None:
        """One run of the worker, the ``attempt``-th since the last stable one."""
        if self._stopping:
            return
        first, self._ran = not self._ran, True
        if not first:
            self.info.restarts += 1
            if self.on_restart:
                self.on_restart(self.name)
        process, self._prestarted = self._prestarted, None
        if process is None:
            process = WorkerProcess(
                self.name,
                self.info.distribution,
                DRIVER_GROUP,
                self.zygote,
                on_notify=self.on_notify,
                on_watch_error=self._watch_error,
                log_level=self.log_level,
                entry_point=self.info.entry_point,
                on_task_restart=self.on_task_restart,
            )
        else:
            process.on_notify, process.on_watch_error = self.on_notify, self._watch_error
        process.on_resources_changed = self.on_resources_changed
        process.max_zombies = self.max_zombies
        self.process = process
        started = time.monotonic()
        try:
            await process.start(self.start_timeout)
            self.hooks = process.hooks
            await bring_up(self, process, first)
        except DriverUnavailable as exc:
            if self.unavailable_tries:  # the start-up summary logged the first
                log.debug("driver %r: still unavailable: %s", self.name, exc)
            self._mark(DriverStatus.UNAVAILABLE, str(exc))
            await process.stop(STOP_GRACE_SECONDS)
            raise DriverFinal() from None
        except DriverFinal:
            await process.stop(STOP_GRACE_SECONDS)
            raise
        except DriverInvalid as exc:
            self._mark(DriverStatus.FAILED, str(exc).split(": ", 1)[1])
            log.error("driver %r is not started: %s", self.name, self.info.reason)
            await process.stop(STOP_GRACE_SECONDS)
            raise DriverFinal() from None
        except (DriverError, WorkerExited) as exc:
            why = str(exc)
            if isinstance(exc, WorkerExited):
                why = f"its worker {exc}{self._tail(process)}"
            await process.kill(f"bringing it up failed: {why}")
            if self.on_start_failure:
                self.on_start_failure(self.name)
            self._down(why, on_down, attempt)
            raise WorkerDown(why, stable=False) from None
        if not self.settled.is_set():
            self.settled.set()
        if self.info.status is DriverStatus.UNAVAILABLE:
            log.info(
                "driver %r: its hardware is here now (try %d after %s); serving",
                self.name,
                self.unavailable_tries,
                self.info.reason,
            )
        self._mark(DriverStatus.ACTIVE)
        self.runs_down = 0
        why = await asyncio.shield(process.exited)
        if self._stopping:
            return
        why = f"its worker (pid {process.pid}) {why}{self._tail(process)}"
        stable = time.monotonic() - started >= self.stable_seconds
        self._down(why, on_down, 1 if stable else attempt)
        raise WorkerDown(why, stable=stable)

    def _down(self, why: str, on_down: Callable[[str], None], runs: int) -> None:
        """The worker went down after ``runs`` runs without a stable one."""
        log.error("driver %r is down: %s", self.name, why)
        self.runs_down += 1
        self._mark(DriverStatus.RESTARTING, why)
        on_down(why)
        if runs >= CRASH_LOOP_RESTARTS:
            self._mark(DriverStatus.CRASH_LOOPING, why)
        self.settled.set()  # start-up waits no longer: its state and reason are known

    def _before_restart(self, state: RetryCallState) -> None:
        delay = state.next_action.sleep if state.next_action else 0.0
        log.warning(
            "driver %r: starting its worker again in %.1f s (restart %d)%s",
            self.name,
            delay,
            self.info.restarts + 1,
            "; crash-looping" if self.info.status is DriverStatus.CRASH_LOOPING else "",
        )

    def _watch_error(self, resource: str, message: str) -> None:
        if self.on_error:
            self.on_error(self.name, "devicehost_watch")
        log.error(
            "driver %r, hook devicehost_watch: %s; restarting the watch of resource %r",
            self.name,
            message,
            resource,
        )

    @staticmethod
    def _tail(process: WorkerProcess) -> str:
        lines = list(process.tail)[-5:]
        return ("; last output: " + " | ".join(lines)) if lines else ""

    async def stop(self) -> None:
        """Ask the worker to shut down (bounded), and stop restarting it."""
        self._stopping = True
        if self._prestarted is not None:  # never brought up
            await self._prestarted.stop(STOP_GRACE_SECONDS)
        if self.process is not None:
            await self.process.stop(STOP_GRACE_SECONDS)
