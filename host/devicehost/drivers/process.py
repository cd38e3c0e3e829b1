"""One run of a driver's worker process, seen from the host: spawn, call, watch it die.

The worker is forked by the zygote (``zygote``). The host talks to it over a socket pair
(``protocol``) and reads its stderr, a pipe, as the driver's log. Calls are bounded: at
most ``MAX_PENDING`` at a time, each with a timeout; a call whose caller gives up is
cancelled in the worker before it starts. A worker that stops answering (every call thread
stuck, or a missed heartbeat: frozen, or its main thread stuck) is killed, so the
supervisor can start a fresh one; a call that times out makes the next heartbeat at once.
Its death is known from the zygote's report, or from the end of its channel when the
zygote cannot report it. Its stderr costs the host a
bounded line length and log rate whatever it writes (``DriverLog``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import itertools
import logging
import os
import signal
import socket
from collections.abc import Callable, Mapping
from typing import Any

from devicehost.drivers.plan import early_sequence, worker_argv, worker_environment
from devicehost.drivers.protocol import (
    HEADER,
    MAX_MESSAGE_BYTES,
    ProtocolError,
    body_length,
    decode,
    encode,
)
from devicehost.drivers.zygote import Child, Prestarted, Zygote, ZygoteError
from devicehost.errors import (
    DriverError,
    DriverOverLimit,
    DriverTimeout,
    DriverUnavailable,
    RequestRefused,
    UnknownDevice,
)
from devicehost.system import pacing, reaping, supervision

log = logging.getLogger(__name__)
_NONE: Any = object()  # no volunteered answer

MAX_PENDING = 32
STDERR_TAIL_LINES = 20
#: A brought-up worker is pinged this often; one that misses a ping for
#: ``HEARTBEAT_TIMEOUT_SECONDS`` (frozen by SIGSTOP, or its main thread stuck) is killed.
#: A frozen worker is so noticed within their sum (docs/reliability.md).
HEARTBEAT_SECONDS = 1.0
HEARTBEAT_TIMEOUT_SECONDS = 3.0
#: Every this many heartbeats, the worker's unreaped (zombie) descendants are counted; a
#: worker with more than ``max_zombies`` is restarted, which reaps them all.
ZOMBIE_CHECK_HEARTBEATS = 5
MAX_ZOMBIES = 100
#: After end-of-file on a worker's channel (it died), how long the zygote's report of its
#: exit is waited for before the host calls it gone itself (the zygote may be frozen).
CHANNEL_EOF_GRACE_SECONDS = 0.5
KILLED_EOF_GRACE_SECONDS = 0.1
#: One line of a driver's stderr is logged with at most this many characters (the rest is
#: cut); a line without an end is cut at this length too (a ``\r`` also ends a line).
MAX_STDERR_LINE = 4096
#: At most this many stderr lines per second are logged per driver (a burst of twice as
#: many first); the rest are counted and summed up in one line when the rate falls.
STDERR_LINES_PER_SECOND = 100
STDERR_READ_BYTES = 1 << 16
KILL_GRACE_SECONDS = 0.5
#: The worker's call threads (``worker.CALL_THREADS``): that many stuck calls means it is hung.
WORKER_THREADS = 4
#: The call id under which a worker's unasked enumerations count as stuck (asked calls
#: are numbered from 1).
VOLUNTEERED_CALL = 0
#: The hooks that answer a kubelet request: only they may refuse it (``RequestRefused``,
#: ``UnknownDevice``); from any other hook a refusal is a driver error like any other.
REQUEST_HOOKS = frozenset(
    {"devicehost_allocate", "devicehost_pre_start", "devicehost_preferred_allocation"}
)


class WorkerExited(Exception):
    """The worker process ended (or was killed because it stopped answering)."""


class DriverInvalid(DriverError):
    """pluggy refused the driver's hooks (a wrong signature, an unknown hook name).

    A code bug in the driver: restarting cannot fix it, so the driver stays failed.
    """


class DriverBusy(DriverError):
    """The driver already has ``MAX_PENDING`` calls waiting; this one is refused at once.

    It means the driver is slower than the requests it gets (often a hung vendor call).
    """


def describe_exit(returncode: int | None) -> str:
    if returncode is None:
        return "still running"
    if returncode < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-returncode).name}"
        return f"killed by signal {-returncode}"
    return f"exited with code {returncode}"


class WorkerProcess:
    """A started worker: ``call()`` runs hooks in it; ``exited`` completes when it ends."""

    def __init__(
        self,
        driver: str,
        distribution: str,
        group: str,
        zygote: Zygote,
        on_notify: Callable[[str], None],
        on_watch_error: Callable[[str, str], None],
        log_level: str = "info",
        entry_point: str = "",
        on_task_restart: Callable[[str], None] | None = None,
    ) -> None:
        self.driver = driver
        self.on_task_restart = on_task_restart
        self.zygote = zygote
        self.entry_point = entry_point
        self.distribution = distribution
        self.group = group
        self.on_notify = on_notify
        self.on_watch_error = on_watch_error
        #: the driver called ``devicehost.resources_changed()``
        self.on_resources_changed: Callable[[], None] = lambda: None
        self.log_level = log_level
        self.pid: int | None = None
        #: Zombie descendants at the last count, and how many restart the worker.
        self.zombies = 0
        self.max_zombies = MAX_ZOMBIES
        self.hooks: frozenset[str] = frozenset()
        self.tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
        self.exited: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._child: Child | None = None
        self._stderr: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._pending: dict[int, asyncio.Future[Any]] = {}
        #: answers of ``send_early``'s calls not yet taken: hook → (arguments, id, answer)
        self._early: dict[str, tuple[dict[str, Any], int, asyncio.Future[Any]]] = {}
        #: enumerations the worker ran after the early calls, unasked: resource → answer;
        #: settled when the worker has sent them all (or they can no longer be taken)
        self._volunteered: dict[str, Any] = {}
        self._volunteering: asyncio.Future[None] | None = None
        self._stuck: set[int] = set()
        #: the hook of each asked call not answered yet (what ``hung_hooks`` names)
        self._hook_of: dict[int, str] = {}

        #: the parts of long list answers received so far: call id → (bytes, items)
        self._parts: dict[int, tuple[int, list[Any]]] = {}
        self._ids = itertools.count(1)
        self._ready: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        # Read the outcome even when nobody waits any more (start timed out), so asyncio
        # does not log "exception was never retrieved".
        self._ready.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._tasks: list[asyncio.Task[None]] = []
        #: set to make the next heartbeat now (a call timed out), not at its interval
        self._beat_now = asyncio.Event()
        self._heartbeats: list[asyncio.Event] = []
        self._channel_closed = asyncio.Event()
        self._driver_log: DriverLog | None = None
        #: Why the host killed the worker, quoted with its exit (a bare SIGKILL says nothing).
        self._killed_because = ""

    # -- start -----------------------------------------------------------------------------

    @property
    def argv(self) -> list[str]:
        """The worker's command-line arguments: how it is spawned, and what a worker the
        zygote prestarted must have been started with to be adopted."""
        return worker_argv(
            self.driver, self.distribution, self.group, self.log_level, self.entry_point
        )

    async def spawn(self) -> None:
        """Start the worker process; it imports its driver while the host goes on.

        Raises ``WorkerExited`` when the zygote cannot start it."""
        if self._child is not None:
            return
        parent, child = socket.socketpair()
        stderr_read, stderr_write = os.pipe()
        try:
            self._child = await self.zygote.start(
                self.argv, worker_environment(self.driver), (child.fileno(), stderr_write)
            )
        except ZygoteError as exc:
            parent.close()
            os.close(stderr_read)
            raise WorkerExited(f"could not be started: {exc}") from None
        finally:
            child.close()
            os.close(stderr_write)
        await self._connect(parent, stderr_read)

    async def adopt(self, worker: Prestarted) -> None:
        """Take over a worker the zygote started before the host asked (``Zygote.fork``'s
        ``prestart``), with the early calls it was sent (as ``send_early`` would have)."""
        self._child = worker.child
        self._expect_early(worker.sequence, worker.then_enumerate)
        await self._connect(socket.socket(fileno=worker.channel), worker.stderr)

    async def _connect(self, parent: socket.socket, stderr_read: int) -> None:
        assert self._child is not None
        self.pid = self._child.pid
        loop = asyncio.get_running_loop()
        stderr = self._stderr = asyncio.StreamReader()
        await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(stderr), os.fdopen(stderr_read, "rb", 0)
        )
        reader, self._writer = await asyncio.open_unix_connection(sock=parent)
        self._driver_log = DriverLog(self.driver, self.tail)
        self._tasks = [
            asyncio.create_task(self._read_channel(reader), name=f"worker-{self.driver}-channel"),
            supervision.start(
                f"stderr-{self.driver}",
                functools.partial(self._driver_log.read, stderr),
                self.on_task_restart,
            ),
            asyncio.create_task(self._wait_exit(), name=f"worker-{self.driver}-exit"),
        ]

    async def start(self, timeout: float) -> None:
        """Spawn the worker (unless ``spawn`` already did) and wait until the driver is
        imported and registered.

        Raises ``DriverUnavailable`` (no hardware or vendor library), ``DriverError`` (the
        import failed or the driver is invalid) or ``WorkerExited`` (it died or hung).
        """
        await self.spawn()
        try:
            async with asyncio.timeout(timeout):
                ready = await asyncio.shield(self._ready)
        except TimeoutError:
            await self.kill(f"its driver did not finish importing within {timeout:g} s")
            raise WorkerExited(await asyncio.shield(self.exited)) from None
        self.hooks = frozenset(str(h) for h in ready.get("hooks", ()) if isinstance(h, str))
        self._tasks.append(
            asyncio.create_task(self._heartbeat(), name=f"worker-{self.driver}-heartbeat")
        )

    # -- channel ---------------------------------------------------------------------------

    def _send(self, message: dict[str, Any]) -> None:
        if self._writer is not None and not self._writer.is_closing():
            self._writer.write(encode(message))

    async def _read_channel(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                header = await reader.readexactly(HEADER.size)
                length = body_length(header)
                message = decode(await reader.readexactly(length))
                if "part" in message:
                    self._take_part(message, length)
                    await pacing.pause()  # the next part may be buffered: let others run first
                    continue
                self._dispatch(message)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the worker closed its end: it is exiting, or dead
        except ProtocolError as exc:
            await self.kill(f"it broke the channel protocol: {exc}")
        except Exception as exc:  # a host bug must not leave the worker unwatched
            log.exception("driver %r: reading its channel failed", self.driver)
            await self.kill(f"reading its channel failed: {type(exc).__name__}: {exc}")
        finally:
            self._channel_closed.set()

    async def _heartbeat(self) -> None:
        """Ping the started worker every ``HEARTBEAT_SECONDS``, and at once when a call
        timed out (``_beat_now``); kill it when a ping goes unanswered for
        ``HEARTBEAT_TIMEOUT_SECONDS`` (frozen, or its main thread stuck), so the supervisor
        restarts it. The one liveness check: one timeout, one kill message."""
        beats = 0
        while not self.exited.done():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._beat_now.wait(), HEARTBEAT_SECONDS)
            self._beat_now.clear()
            beats += 1
            if beats % ZOMBIE_CHECK_HEARTBEATS == 0 and await self._too_many_zombies():
                return
            answered = asyncio.Event()
            self._heartbeats.append(answered)
            self._send({"ping": True})
            try:
                await asyncio.wait_for(answered.wait(), HEARTBEAT_TIMEOUT_SECONDS)
            except TimeoutError:
                if not self.exited.done():
                    await self.kill(
                        f"it did not answer a heartbeat within {HEARTBEAT_TIMEOUT_SECONDS:g} s "
                        "(frozen, or its main thread is stuck)"
                    )
                return
            finally:
                with contextlib.suppress(ValueError):
                    self._heartbeats.remove(answered)

    async def _too_many_zombies(self) -> bool:
        """Count the worker's zombie descendants (off the loop); past ``max_zombies``,
        kill the worker, which reaps them all, and say why."""
        pid = self.pid
        if pid is None:
            return False
        self.zombies = await asyncio.to_thread(reaping.zombies_below, pid)
        if self.zombies <= self.max_zombies or self.exited.done():
            return False
        await self.kill(
            f"it left {self.zombies} finished child processes unreaped (zombies), over the "
            f"bound of {self.max_zombies}: each holds a slot of the node's process table"
        )
        return True

    def _take_part(self, message: dict[str, Any], length: int) -> None:
        """Keep one part of a long list answer until its ``result`` brings the rest."""
        call_id, items = message.get("part"), message.get("value")
        if not isinstance(call_id, int) or not isinstance(items, list):
            raise ProtocolError(f"a part {message!r:.80} is not a call id and a list")
        size, kept = self._parts.get(call_id, (0, []))
        if size + length > MAX_MESSAGE_BYTES:
            raise ProtocolError(f"an answer in parts is over the {MAX_MESSAGE_BYTES}-byte limit")
        kept.extend(items)
        self._parts[call_id] = (size + length, kept)

    def _dispatch(self, message: dict[str, Any]) -> None:
        if "result" in message and message.get("result") in self._parts:
            _, kept = self._parts.pop(message["result"])
            rest = message.get("value")
            message = {**message, "value": kept + (rest if isinstance(rest, list) else [rest])}
        if "result" in message or "error" in message:
            call_id = message.get("result", message.get("error"))
            future = self._pending.get(call_id) if isinstance(call_id, int) else None
            if isinstance(call_id, int):
                self._stuck.discard(call_id)
                self._hook_of.pop(call_id, None)
            if future is not None and not future.done():
                if "result" in message:
                    future.set_result(message.get("value"))
                else:
                    future.set_exception(_error(message))
        elif "volunteered" in message:
            if self._volunteering is not None and not self._volunteering.done():
                self._volunteered[str(message["volunteered"])] = message.get("value")
        elif "volunteered_all" in message:
            self._stuck.discard(VOLUNTEERED_CALL)
            if self._volunteering is not None and not self._volunteering.done():
                self._volunteering.set_result(None)
        elif "notify" in message:
            self.on_notify(str(message["notify"]))
        elif "resources_changed" in message:
            self.on_resources_changed()
        elif "watch_error" in message:
            self.on_watch_error(str(message["watch_error"]), str(message.get("message", "")))
        elif "pong" in message:
            for answered in self._heartbeats:
                answered.set()
        elif not self._ready.done():
            if "ready" in message and isinstance(message["ready"], dict):
                self._ready.set_result(message["ready"])
            elif "unavailable" in message:
                self._ready.set_exception(DriverUnavailable(str(message["unavailable"])))
            elif "invalid" in message:
                reason = str(message["invalid"])
                self._ready.set_exception(DriverInvalid(self.driver, "import", reason))
            else:
                reason = str(message.get("failed", f"unexpected first message {message!r:.200}"))
                self._ready.set_exception(DriverError(self.driver, "import", reason))

    async def _wait_exit(self) -> None:
        """The worker's end: the zygote reports its exit code; end-of-file on its channel
        is the same news when the zygote cannot tell (frozen, or gone)."""
        assert self._child is not None
        exit_code: asyncio.Future[int] = asyncio.ensure_future(asyncio.shield(self._child.exit))
        closed: asyncio.Future[Any] = asyncio.ensure_future(self._channel_closed.wait())
        try:
            await asyncio.wait([exit_code, closed], return_when=asyncio.FIRST_COMPLETED)
            if not exit_code.done():
                # Killed by the host: it is gone already, only the report may be missing.
                grace = (
                    KILLED_EOF_GRACE_SECONDS if self._killed_because else CHANNEL_EOF_GRACE_SECONDS
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(exit_code), grace)
        finally:
            closed.cancel()
        if exit_code.done():
            why = describe_exit(exit_code.result())
        else:
            exit_code.cancel()
            self._direct_kill()  # it closed its channel, so it is going: make sure
            why = "closed its channel and was killed (the zygote did not report its exit)"
        # Let the stderr reader take the last lines before they are quoted.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._tasks[1]), 0.5)
        if self._killed_because:
            why = f"{why} by the host ({self._killed_because})"
        for task in self._tasks[3:]:  # the heartbeat
            task.cancel()
        if not self.exited.done():
            self.exited.set_result(why)
        error = WorkerExited(why)
        if not self._ready.done():
            self._ready.set_exception(error)
        for future in self._pending.values():
            if not future.done():
                future.set_exception(RuntimeError(f"its worker process {why}"))
        self._stop_volunteering()
        if self._writer is not None:
            self._writer.close()

    # -- calls -----------------------------------------------------------------------------

    def send_early(self, calls: Mapping[str, dict[str, Any]], then_enumerate: bool = False) -> None:
        """Send start-up calls (hook → arguments) now, before the driver is even imported:
        the worker runs them one after the other as soon as it can, while the host goes on
        starting. The first ``call`` of each hook with the same arguments takes its answer
        instead of asking again; answers nobody takes are dropped.

        ``then_enumerate``: after the calls the worker enumerates each resource its
        ``resources`` answer named, unasked, and the first ``devicehost_enumerate`` of each
        takes that answer — only when every early answer was taken (a call asked again
        with other arguments, e.g. another config, makes them stale). A first snapshot a
        few ms old is safe: the host enumerates again as each watch starts."""
        sequence = early_sequence(calls, self._ids)
        self._expect_early(sequence, then_enumerate)
        self._send({"sequence": sequence, "then_enumerate": then_enumerate})

    def _expect_early(self, sequence: list[dict[str, Any]], then_enumerate: bool) -> None:
        """Hold a place for each early call's answer (and the unasked enumerations)."""
        if then_enumerate:
            self._volunteering = asyncio.get_running_loop().create_future()
        for call in sequence:
            call_id = int(call["call"])
            future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            future.add_done_callback(lambda f: f.cancelled() or f.exception())
            future.add_done_callback(functools.partial(self._forget, call_id))
            self._pending[call_id] = future
            self._early[str(call["hook"])] = (call["kwargs"], call_id, future)
        if sequence:  # asked calls are numbered after them (a prestarted worker's too)
            self._ids = itertools.count(max(int(call["call"]) for call in sequence) + 1)

    def _forget(self, call_id: int, _: asyncio.Future[Any]) -> None:
        self._pending.pop(call_id, None)

    async def call(self, hook: str, timeout: float, **kwargs: Any) -> Any:
        """Run ``hook`` in the worker and return its plain answer.

        ``DriverTimeout`` after ``timeout`` (the call is cancelled in the worker if it has
        not started), ``DriverBusy`` at once when too many calls wait, ``DriverError`` when
        the hook raised or the worker died, ``DriverUnavailable`` when the driver said so;
        from a request hook, ``RequestRefused`` and ``UnknownDevice`` as the driver raised them.
        """
        if self.exited.done():
            raise DriverError(self.driver, hook, f"its worker process {self.exited.result()}")
        if len(self._pending) >= MAX_PENDING:
            raise DriverBusy(
                self.driver, hook, f"{MAX_PENDING} calls are already waiting; refused at once"
            )
        early = self._early.pop(hook, None)
        if early is not None and early[0] != kwargs:
            self._stop_volunteering()
        if hook == "devicehost_enumerate" and self._volunteering is not None:
            waited_from = asyncio.get_running_loop().time()
            volunteered = await self._take_volunteered(str(kwargs.get("resource")), timeout)
            if volunteered is not _NONE:
                return volunteered
            if self.exited.done():  # it died enumerating: say so now, not at the timeout
                raise DriverError(self.driver, hook, f"its worker process {self.exited.result()}")
            if self._give_up_volunteering():
                raise DriverTimeout(self.driver, hook, f"did not return within {timeout:g} s")
            timeout = max(0.0, timeout - (asyncio.get_running_loop().time() - waited_from))
        if early is not None and early[0] == kwargs:
            _, call_id, future = early  # sent at spawn (``send_early``); its timeout starts now
        else:
            call_id = next(self._ids)
            future = asyncio.get_running_loop().create_future()
            self._pending[call_id] = future
            self._hook_of[call_id] = hook
            self._send({"call": call_id, "hook": hook, "kwargs": kwargs})
        try:
            async with asyncio.timeout(timeout):
                return await future
        except (RequestRefused, UnknownDevice) as exc:
            if hook in REQUEST_HOOKS:
                raise
            raise DriverError(self.driver, hook, f"{type(exc).__name__}: {exc}") from None
        except (DriverError, DriverUnavailable):
            raise
        except ValueError as exc:
            raise DriverError(self.driver, hook, f"ValueError: {exc}") from exc
        except _OverLimit as exc:
            raise DriverOverLimit(self.driver, hook, str(exc)) from None
        except RuntimeError as exc:
            raise DriverError(self.driver, hook, str(exc)) from None
        except TimeoutError:
            self._gave_up(call_id)
            raise DriverTimeout(self.driver, hook, f"did not return within {timeout:g} s") from None
        except asyncio.CancelledError:
            self._gave_up(call_id, timed_out=False)
            raise
        finally:
            self._pending.pop(call_id, None)
            if call_id not in self._stuck:
                self._hook_of.pop(call_id, None)

    def hung_hooks(self) -> list[str]:
        """The hooks running in the worker past their timeout now (a hung vendor call)."""
        hung = [self._hook_of.get(i, "devicehost_enumerate") for i in self._stuck]
        return sorted(hung) if not self.exited.done() else []

    async def _take_volunteered(self, resource: str, timeout: float) -> Any:
        """The enumeration the worker volunteered for ``resource`` (waiting for the worker
        to send them, within ``timeout``), or ``_NONE``: it is taken once."""
        assert self._volunteering is not None
        if self._early:  # an early call not asked yet: the answers may not hold
            self._stop_volunteering()
            return _NONE
        volunteering = self._volunteering
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(volunteering), timeout)
        answer = self._volunteered.pop(resource, _NONE)
        if volunteering.done() and not self._volunteered:
            self._volunteering = None  # all taken
        return answer

    def _give_up_volunteering(self) -> bool:
        """Stop waiting for the worker's unasked enumerations when they still run after a
        whole hook timeout (True then): that call thread counts as stuck, as an asked call
        would, and the call is not asked again, which would only queue it behind them."""
        if self._volunteering is None or self._volunteering.done():
            return False
        self._stop_volunteering()
        self._count_stuck(VOLUNTEERED_CALL)
        return True

    def _stop_volunteering(self) -> None:
        self._volunteered.clear()
        if self._volunteering is not None and not self._volunteering.done():
            self._volunteering.set_result(None)
        self._volunteering = None

    def _gave_up(self, call_id: int, timed_out: bool = True) -> None:
        """Cancel the call in the worker (it answers at once if the call had not started).
        A call that ran past its timeout counts as stuck until it answers: when every call
        thread is stuck, or the worker misses the heartbeat this starts, it is killed."""
        self._send({"cancel": call_id})
        if timed_out:
            self._count_stuck(call_id)

    def _count_stuck(self, call_id: int) -> None:
        """``call_id`` runs past its timeout: kill the worker when every call thread is
        stuck, else make sure it still answers at all."""
        self._stuck.add(call_id)
        if len(self._stuck) >= WORKER_THREADS:
            asyncio.get_running_loop().create_task(
                self.kill(f"all its {WORKER_THREADS} call threads are stuck in hooks")
            )
        else:
            self._beat_now.set()  # does it still answer at all? The heartbeat asks now

    def start_watches(self, resources: list[str]) -> None:
        if "devicehost_watch" in self.hooks and resources:
            self._send({"watch": resources})

    # -- stop ------------------------------------------------------------------------------

    async def stop(self, grace: float) -> None:
        """Ask the worker to run ``shutdown`` and exit; kill it after ``grace`` seconds."""
        if self._child is None or self.exited.done():
            return
        log.debug("driver %r: stopping its worker (pid %s)", self.driver, self.pid)
        self._send({"stop": True})
        try:
            await asyncio.wait_for(asyncio.shield(self.exited), grace)
        except TimeoutError:
            await self.kill(f"it did not stop within {grace:g} s")
        await self._finish()

    async def kill(self, why: str) -> None:
        """End the worker now (SIGKILL: a hung vendor call cannot be interrupted otherwise)."""
        if self._child is None or self.exited.done():
            return
        log.error("driver %r: killing its worker (pid %s): %s", self.driver, self.pid, why)
        self._killed_because = why
        self.zygote.kill(self._child.pid)
        self._direct_kill()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.exited), KILL_GRACE_SECONDS + 2)

    def _direct_kill(self) -> None:
        """SIGKILL the worker from here too, in case the zygote is frozen. Safe while the
        zygote has not reported the exit: an unreaped pid is never reused, and the zygote
        reaps a child only as it reports it."""
        assert self._child is not None
        if not self._child.exit.done():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(self._child.pid, signal.SIGKILL)

    async def _finish(self) -> None:
        """Let the readers drain to EOF (so the transport closes), then cancel stragglers."""
        _, late = await asyncio.wait(self._tasks, timeout=1.0)
        for task in late:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


def _error(message: dict[str, Any]) -> Exception:
    text = str(message.get("message", ""))[:2000]
    kind = message.get("kind")
    if kind == "unavailable":
        return DriverUnavailable(text)
    if kind == "refused":
        return RequestRefused(text)
    if kind == "unknown":
        return UnknownDevice(str(message.get("resource", "")), str(message.get("device_id", "")))
    if kind == "value":
        return ValueError(text.removeprefix("ValueError: "))
    if kind == "over_limit":
        return _OverLimit(text)
    return RuntimeError(text)


class DriverLog:
    """A driver's stderr as log lines: whatever it writes (a megabyte without a newline, a
    ``\r`` progress bar, a flood) costs the host a bounded line length and log rate."""

    def __init__(self, driver: str, tail: collections.deque[str]) -> None:
        self.driver = driver
        self.tail = tail
        self.log = logging.getLogger(f"devicehost.driver.{driver}")
        self.cut = 0
        self.suppressed = 0
        self._tokens = float(2 * STDERR_LINES_PER_SECOND)
        self._refilled = 0.0

    async def read(self, stream: asyncio.StreamReader) -> None:
        """Log ``stream``'s lines until its end."""
        pending = b""
        while chunk := await stream.read(STDERR_READ_BYTES):
            lines = (pending + chunk).replace(b"\r", b"\n").split(b"\n")
            pending = lines.pop()
            for raw in lines:
                self.line(raw)
            if len(pending) > MAX_STDERR_LINE:
                self.line(pending)
                pending = b""  # the rest of that line goes on as lines of its own
        if pending:
            self.line(pending)
        self._summarise()

    def line(self, raw: bytes) -> None:
        if len(raw) > MAX_STDERR_LINE:
            self.cut += 1
            raw = raw[:MAX_STDERR_LINE]
        line = raw.decode(errors="replace").rstrip()
        if not line:
            return
        self.tail.append(line)
        if not self._take_token():
            self.suppressed += 1
            return
        self._summarise()
        self.log.log(_level_of(line), "driver %r: %s", self.driver, line)

    def _take_token(self) -> bool:
        now = asyncio.get_running_loop().time()
        if self._refilled:
            self._tokens = min(
                2.0 * STDERR_LINES_PER_SECOND,
                self._tokens + (now - self._refilled) * STDERR_LINES_PER_SECOND,
            )
        self._refilled = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True

    def _summarise(self) -> None:
        if self.suppressed:
            self.log.warning(
                "driver %r: %d lines of its output not logged (over %d lines/s)",
                self.driver,
                self.suppressed,
                STDERR_LINES_PER_SECOND,
            )
            self.suppressed = 0


class _OverLimit(RuntimeError):
    """The worker's answer was over the channel's limit (it sent this error instead)."""


def _level_of(line: str) -> int:
    word = line.split(" ", 1)[0]
    return {
        "DEBUG": logging.DEBUG,
        "WARNING": logging.WARNING,
        "ERROR": logging.ERROR,
        "CRITICAL": logging.ERROR,
        "Traceback": logging.ERROR,
        "Fatal": logging.ERROR,
    }.get(word, logging.INFO)
