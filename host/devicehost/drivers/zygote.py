"""Fork each driver's worker from one small process that never runs gRPC or driver code.

A fresh interpreter per driver, each importing pluggy and devicehost's model, was most of
a cold start's CPU on a small node (docs/performance.md). The zygote pays for that once:
it imports the worker's code, stays single-threaded, and for each worker the host asks for
it forks a child that becomes that worker. The fork is safe because the zygote never
starts a thread: ``devicehost run`` forks it from itself before it imports gRPC,
OpenTelemetry or the Prometheus client and before any thread exists (``Zygote.fork``);
anywhere else — tests, one-shot commands, a zygote that was killed — it is a fresh
interpreter, ``python -m devicehost.drivers.zygote``. It never imports a driver, so nothing
a driver does reaches it, and every worker is still a process of its own.

The zygote and the host talk over a ``SOCK_SEQPACKET`` pair, one JSON object per
datagram; a spawn request carries two file descriptors (the worker's channel and the write
end of its stderr pipe)::

  host → zygote:  {"spawn": n, "argv": [...], "env": {...}}   + 2 fds
                  {"kill": pid}                 SIGKILL, if that child still runs
                  {"ping": n}                   the heartbeat (``HEARTBEAT_SECONDS``)
  zygote → host:  {"spawned": n, "pid": pid} | {"failed": n, "message": text}
                  {"exited": pid, "code": code} as subprocess reports it (-N: signal N)
                  (pid: the worker's, never its keeper's)
                  {"pong": n}
                  {"prestarted": name, "pid": pid, "argv": [...], "sequence": [...]}
                                                + 2 fds (the host's end of the worker's
                                                channel, the read end of its stderr)
                  {"prestart_done": [name, ...], "result": the plan's plain result}

Prestart: ``devicehost run`` forks the zygote before it imports most of itself, with a
plan (``plan.plan_workers``) the zygote runs at once: it lists the installed drivers (in a
child of its own), forks a worker per enabled driver, writes each its first calls, and
hands the host each worker's channel and the listing. The workers import their drivers on
the CPU the host leaves idle while it imports (a cold start's first ~100 ms), instead of
after it; the plan reads entry-point metadata only and never imports a driver or policy
in the zygote.

Each worker has a keeper (``keep``): the zygote forks the keeper, the keeper forks the
worker. The keeper leads a session of its own and is the subreaper of the worker's tree,
so whatever a driver forks, a detached daemon included, stays below it; when the worker
ends it stops all that is left and reports the worker's exit code to the zygote through a
pipe (docs/reliability.md, "Containment"). The host knows the worker's pid only.

The zygote reaps its keepers and reports each worker's exit, so the host learns a worker's
exit status although the worker is not its own child; kills go through the zygote, to the
worker's keeper, which is still the zygote's child (no pid-reuse race). The zygote is a
subreaper too and stops whatever a killed keeper left. When the host goes away (EOF on
the channel, or the kernel's ``PR_SET_PDEATHSIG``) the zygote stops everything below it
and exits; if the zygote dies, its keepers and workers die with it (their own
``PR_SET_PDEATHSIG``), the host stops what they left, and the next start gets a fresh
zygote.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

# asyncio, and what only one side uses (the selector, ctypes and subprocess, the worker
# protocol), are imported where they run: ``devicehost run`` forks the zygote before it
# has imported them (~25 ms), so the zygote and its workers start sooner.
if TYPE_CHECKING:
    import asyncio

log = logging.getLogger(__name__)

MAX_DATAGRAM = 1 << 20
#: How long ``close`` waits for the zygote to kill its children and exit (it takes a few
#: ms); then it is killed, so a frozen zygote cannot hold a stopping host.
CLOSE_SECONDS = 0.3
#: The zygote is pinged this often while the host uses it; one that does not answer within
#: ``HEARTBEAT_TIMEOUT_SECONDS`` (frozen) is killed, and its workers with it: each driver
#: starts again from a fresh zygote, as after the zygote's death.
HEARTBEAT_SECONDS = 1.0
HEARTBEAT_TIMEOUT_SECONDS = 3.0
#: A ping unanswered this long when the host stops means the zygote is frozen.
FROZEN_SECONDS = 0.5
#: The exit code of a child that failed before the worker's own code ran.
BROKEN_CHILD = 70


class ZygoteError(Exception):
    """The zygote could not start a worker (or is gone)."""


@dataclass
class Child:
    """A worker the zygote forked: its pid, and its exit code once it has ended."""

    pid: int
    exit: asyncio.Future[int]


@dataclass
class Planned:
    """A worker the zygote starts at its fork: its arguments, environment, first calls."""

    name: str
    argv: list[str]
    env: dict[str, str]
    sequence: list[dict[str, Any]]


#: Called once the worker's code is imported: the workers to start, and a plain result for
#: the host.
Plan = Callable[[], tuple[list[Planned], Any]]
#: Called in the zygote at its fork (before it imports the worker's code); returns the plan.
Prestart = Callable[[], Plan]


@dataclass
class Prestarted:
    """A worker the zygote started at its fork, for the host to take over
    (``WorkerProcess.adopt``): its channel and stderr fds, and the calls it was sent."""

    name: str
    child: Child
    argv: list[str]
    channel: int
    stderr: int
    sequence: list[dict[str, Any]]
    then_enumerate: bool = True


# -- the host's side ---------------------------------------------------------------------


class _Process:
    """One zygote process and the host's end of its channel."""

    def __init__(
        self,
        control: socket.socket,
        pid: int,
        poll: Callable[[], int | None],
        stderr: int | None = None,
    ) -> None:
        from devicehost.system.subprocesses import OutputTail

        self.control = control
        self.pid = pid
        self.poll = poll
        self.gone = False
        #: its stderr (a pipe), read on the host's loop, logged and kept for its death's log
        self.output = OutputTail(stderr, f"the zygote (pid {pid})", log) if stderr else None
        self.output_open = self.output is not None


class Zygote:
    """Starts workers through a zygote process; a zygote that died is replaced by a fresh
    interpreter at the next start."""

    def __init__(self, process: _Process | None = None, prestarting: bool = False) -> None:
        self._process = process
        self._ids = itertools.count(1)
        self._starting: dict[int, asyncio.Future[Child]] = {}
        self._children: dict[int, Child] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        #: the zygote was forked with a plan and its workers are not taken over yet
        self._prestarting = prestarting
        self._prestarted: dict[str, Prestarted] = {}
        self._prestart_done = False
        self._prestart_event: asyncio.Event | None = None
        #: what the plan returned beside the workers (plain data), once done
        self.prestart_result: Any = None
        self._heartbeat: asyncio.Task[None] | None = None
        #: when the heartbeat's unanswered ping was sent (None: answered)
        self._ping_sent: float | None = None
        self._pongs: dict[int, asyncio.Event] = {}
        #: called when a zygote dies while it has workers (counted as a helper's death)
        self.on_death: Callable[[], None] | None = None

    @classmethod
    def fork(cls, prestart: Prestart | None = None) -> Zygote:
        """Fork the zygote from this process, which must not have started a thread (nor
        imported gRPC): ``devicehost run`` calls this first. A process that already runs
        threads gets a zygote that starts as a fresh interpreter instead (and no prestart).

        ``prestart``: called in the zygote at once (before it imports the worker's code),
        it returns the plan, called once that code is imported: the zygote starts the
        workers the plan returns before the host asks (``take_prestarted``) and hands the
        host its other result (plain data, ``prestart_result``)."""
        if threading.active_count() > 1 or "grpc" in sys.modules:
            return cls()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        stderr_read, stderr_write = os.pipe()
        host = os.getpid()  # read before the fork: see ``die_with_parent``
        pid = os.fork()
        if pid == 0:  # the zygote
            code = 0
            try:
                ours.close()
                os.dup2(stderr_write, 2)
                os.close(stderr_write)
                os.close(stderr_read)
                serve(theirs, host, prestart)
            except BaseException:
                code = 1
                with contextlib.suppress(BaseException):
                    logging.getLogger(__name__).exception("the zygote failed")
            finally:
                os._exit(code)
        theirs.close()
        os.close(stderr_write)
        from devicehost.system.subprocesses import HELPERS

        HELPERS.add(pid)
        process = _Process(ours, pid, _waitpid_poll(pid), stderr_read)
        return cls(process, prestarting=prestart is not None)

    @staticmethod
    def _spawn() -> _Process:
        from devicehost.system.subprocesses import host_environment, start_helper

        ours, popen = start_helper(__name__, host_environment(), capture_stderr=True)
        assert popen.stderr is not None
        return _Process(ours, popen.pid, popen.poll, os.dup(popen.stderr.fileno()))

    @property
    def pid(self) -> int | None:
        """The current zygote's pid (None before the first start)."""
        return self._process.pid if self._process and not self._process.gone else None

    def _attach(self) -> _Process:
        import asyncio

        loop = asyncio.get_running_loop()
        if self._process is None or self._process.gone:
            self._process = self._spawn()
            self._loop = None
            log.debug("zygote started (pid %d)", self._process.pid)
        if self._loop is not loop:
            process = self._process
            process.control.setblocking(False)
            loop.add_reader(process.control.fileno(), self._on_readable, process)
            if process.output_open and process.output is not None:
                loop.add_reader(process.output.fd, self._on_output, process)
            self._loop = loop
            self._heartbeat = loop.create_task(self._beat(self._process), name="zygote-heartbeat")
        return self._process

    async def _beat(self, process: _Process) -> None:
        """Ping ``process`` until it is gone; kill it when it stops answering (frozen)."""
        import asyncio

        for beat in itertools.count():
            await asyncio.sleep(HEARTBEAT_SECONDS)
            if process.gone:
                return
            answered = self._pongs[beat] = asyncio.Event()
            self._ping_sent = time.monotonic()
            try:
                process.control.send(json.dumps({"ping": beat}).encode())
            except OSError:
                return  # gone: ``_lost`` has it
            try:
                await asyncio.wait_for(answered.wait(), HEARTBEAT_TIMEOUT_SECONDS)
            except TimeoutError:
                if not process.gone:
                    log.error(
                        "the zygote (pid %d) did not answer a heartbeat within %g s (frozen?); "
                        "killing it: its workers die with it and start again",
                        process.pid,
                        HEARTBEAT_TIMEOUT_SECONDS,
                    )
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(process.pid, signal.SIGKILL)
                return
            finally:
                self._pongs.pop(beat, None)

    def _on_output(self, process: _Process) -> None:
        assert process.output is not None
        if not process.output.read():
            process.output_open = False
            if self._loop is not None:
                self._loop.remove_reader(process.output.fd)

    async def start(self, argv: Sequence[str], env: dict[str, str], fds: Sequence[int]) -> Child:
        """Fork a worker running ``python -m devicehost.drivers.worker <argv>`` with ``env``;
        ``fds`` (its channel, its stderr) are passed to it. Raises ``ZygoteError``."""
        import asyncio

        process = self._attach()
        request = next(self._ids)
        started: asyncio.Future[Child] = asyncio.get_running_loop().create_future()
        self._starting[request] = started
        message = {"spawn": request, "argv": list(argv), "env": env}
        try:
            socket.send_fds(process.control, [json.dumps(message).encode()], list(fds))
            return await started
        except OSError as exc:
            raise ZygoteError(f"the zygote (pid {process.pid}) is not reachable: {exc}") from exc
        finally:
            self._starting.pop(request, None)

    def kill(self, pid: int) -> None:
        """SIGKILL the worker ``pid`` (through the zygote, which knows if it still runs)."""
        process = self._process
        if process is None or process.gone or pid not in self._children:
            return
        with contextlib.suppress(OSError):
            process.control.send(json.dumps({"kill": pid}).encode())

    async def take_prestarted(self, timeout: float) -> dict[str, Prestarted]:
        """The workers the zygote started at its fork, by driver name, once it has started
        them all (waiting at most ``timeout``); the caller owns them from here. Empty when
        the zygote was not forked with a plan, or has been asked before."""
        import asyncio

        if not self._prestarting:
            return {}
        self._attach()
        self._prestart_event = asyncio.Event()
        if not self._prestart_done:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._prestart_event.wait()
        self._prestarting = False  # any that still arrives is stopped (``_dispatch``)
        taken, self._prestarted = self._prestarted, {}
        return taken

    def discard(self, worker: Prestarted) -> None:
        """A prestarted worker nobody takes over: close its fds and kill it."""
        _close_fds(worker)
        self.kill(worker.child.pid)

    def _on_readable(self, process: _Process) -> None:
        while True:
            try:
                data, fds, _, _ = socket.recv_fds(process.control, MAX_DATAGRAM, 2)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data, fds = b"", []
            if not data:
                self._lost(process)
                return
            try:
                message = json.loads(data)
            except ValueError:
                message = {}
            if "prestarted" in message and len(fds) == 2:
                self._prestarted_one(message, fds)
                continue
            for fd in fds:
                os.close(fd)
            self._dispatch(message)

    def _prestarted_one(self, message: dict[str, Any], fds: list[int]) -> None:
        assert self._loop is not None
        child = Child(int(message["pid"]), self._loop.create_future())
        self._children[child.pid] = child
        worker = Prestarted(
            str(message["prestarted"]),
            child,
            [str(a) for a in message.get("argv", [])],
            fds[0],
            fds[1],
            list(message.get("sequence", [])),
        )
        if self._prestarting:
            self._prestarted[worker.name] = worker
        else:  # arrived after the host stopped waiting: it started its own
            self.discard(worker)

    def _dispatch(self, message: dict[str, Any]) -> None:
        if "pong" in message:
            self._ping_sent = None
            answered = self._pongs.get(message["pong"])
            if answered is not None:
                answered.set()
            return
        if "prestart_done" in message:
            self.prestart_result = message.get("result")
            self._prestart_done = True
            if self._prestart_event is not None:
                self._prestart_event.set()
            return
        if "exited" in message:
            child = self._children.pop(int(message["exited"]), None)
            if child is not None and not child.exit.done():
                child.exit.set_result(int(message.get("code", -signal.SIGKILL)))
            return
        started = self._starting.get(int(message.get("spawned", message.get("failed", -1))))
        if started is None or started.done():
            return
        if "spawned" in message:
            # Known at once: its exit may be the very next message, read before start()
            # resumes.
            child = Child(int(message["pid"]), started.get_loop().create_future())
            self._children[child.pid] = child
            started.set_result(child)
        else:
            started.set_exception(ZygoteError(str(message.get("message", "fork failed"))))

    def _lost(self, process: _Process) -> None:
        """The zygote died: its workers died with it (PR_SET_PDEATHSIG)."""
        process.gone = True
        if self._loop is not None:
            self._loop.remove_reader(process.control.fileno())
            if process.output_open and process.output is not None:
                self._loop.remove_reader(process.output.fd)
            self._loop = None
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        process.control.close()
        if self._children or self._starting:
            if self.on_death:
                self.on_death()
            _reap_later(process, _log_death)
        else:
            _reap_later(process, _close_output)
        self._prestart_done = True
        if self._prestart_event is not None:
            self._prestart_event.set()
        for worker in self._prestarted.values():
            _close_fds(worker)  # the worker died with the zygote
        self._prestarted.clear()
        for started in self._starting.values():
            if not started.done():
                started.set_exception(ZygoteError(f"the zygote (pid {process.pid}) died"))
        for child in self._children.values():
            if not child.exit.done():
                child.exit.set_result(-signal.SIGKILL)
        self._children.clear()

    async def close(self) -> None:
        """End the zygote: it kills the workers still running and exits."""
        import asyncio

        process, self._process = self._process, None
        if process is None or process.gone:
            return
        process.gone = True
        if self._loop is not None:
            self._loop.remove_reader(process.control.fileno())
            self._loop = None
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        process.control.close()
        _close_output(process)
        deadline = time.monotonic() + CLOSE_SECONDS
        if self._ping_sent is not None and deadline - self._ping_sent > FROZEN_SECONDS:
            deadline = 0.0  # it answers a ping within ms: frozen, so kill it now
        while process.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)
            await asyncio.sleep(0.05)
            process.poll()


def _close_fds(worker: Prestarted) -> None:
    for fd in (worker.channel, worker.stderr):
        with contextlib.suppress(OSError):
            os.close(fd)


def _waitpid_poll(pid: int) -> Callable[[], int | None]:
    """``Popen.poll`` for a child started with ``os.fork``."""
    code: list[int] = []

    def poll() -> int | None:
        if not code:
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                return -1
            if done:
                code.append(os.waitstatus_to_exitcode(status))
        return code[0] if code else None

    return poll


def _reap_later(
    process: _Process, then: Callable[[_Process, int | None], None], tries: int = 200
) -> None:
    """Collect a dead zygote's exit status (it may not be a zombie yet when EOF arrives),
    then call ``then`` with it (None if it never came)."""
    import asyncio

    code = process.poll()
    if code is None and tries:
        with contextlib.suppress(RuntimeError):
            asyncio.get_running_loop().call_later(0.01, _reap_later, process, then, tries - 1)
            return
    then(process, code)


def _close_output(process: _Process, code: int | None = None) -> None:
    """Read what is left of a zygote's stderr (logged), and close it."""
    if process.output_open and process.output is not None:
        process.output_open = False
        os.set_blocking(process.output.fd, False)
        if process.output.read():  # its keepers may hold the pipe a moment longer
            with contextlib.suppress(OSError):
                os.close(process.output.fd)


def _log_death(process: _Process, code: int | None) -> None:
    from devicehost.system.subprocesses import exit_description

    _close_output(process)
    log.error(
        "the zygote (pid %d) that starts driver workers died (%s)%s; its workers were "
        "killed with it and start again from a fresh one",
        process.pid,
        exit_description(code),
        process.output.text() if process.output else "",
    )


# -- the zygote's side -------------------------------------------------------------------


def serve(control: socket.socket, host: int, prestart: Prestart | None = None) -> None:
    """Start the planned workers (``prestart``), then fork workers on request until the
    host (pid ``host``) closes the channel; then kill them and return."""
    import selectors

    import devicehost.system.reaping as reaping
    from devicehost.drivers.protocol import encode
    from devicehost.system.subprocesses import become_subreaper, die_with_parent, name_process

    die_with_parent(host)
    # A group of its own: a signal to the host's process group (``timeout``, job control)
    # reaches the host alone, which stops the zygote and its workers itself.
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)
    name_process("dh-zygote")
    for signum in (signal.SIGINT, signal.SIGHUP):  # the host decides when workers stop
        signal.signal(signum, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    plan = None
    if prestart is not None:
        with contextlib.suppress(Exception):  # no plan: the host starts the workers itself
            plan = prestart()
    from devicehost.drivers import worker  # every worker's code, imported once for all

    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_read, False)
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write, warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    control.setblocking(True)
    selector = selectors.DefaultSelector()
    selector.register(control, selectors.EVENT_READ)
    selector.register(wake_read, selectors.EVENT_READ)
    #: worker pid → its keeper (the zygote's own child) and the read end of its report
    keepers: dict[int, tuple[int, int]] = {}
    become_subreaper()  # what a killed keeper's worker leaves is re-parented here

    def reply(message: dict[str, Any]) -> None:
        with contextlib.suppress(OSError):
            control.send(json.dumps(message).encode())

    def reap() -> None:
        """Report each worker whose keeper ended; stop whatever else was re-parented here
        (only what a killed keeper left: a live keeper holds all its worker's orphans)."""
        by_keeper = {keeper: (pid, report) for pid, (keeper, report) in keepers.items()}
        for child in reaping.children():
            if child.pid not in by_keeper:
                if not child.zombie:
                    reaping.kill(child.pid)
                reaping.reap(child.pid)
                continue
            code = reaping.reap(child.pid)
            if code is None:
                continue
            pid, report = by_keeper[child.pid]
            del keepers[pid]
            reply({"exited": pid, "code": _worker_code(report, code)})

    def fork_worker(
        argv: list[str], env: dict[str, str], fds: list[int], not_theirs: Sequence[int] = ()
    ) -> int:
        """Fork the worker's keeper, which forks the worker; return the worker's pid."""
        zygote = os.getpid()
        report_read, report_write = os.pipe()
        keeper = os.fork()
        if keeper == 0:
            try:
                selector.close()
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                for fd in (control.fileno(), wake_read, wake_write, report_read, *not_theirs):
                    os.close(fd)
                for held in keepers.values():
                    os.close(held[1])
                keep(worker.main, argv, env, fds, zygote, report_write)
            finally:
                os._exit(BROKEN_CHILD)
        os.close(report_write)
        line = _read_line(report_read)
        if not line.isdigit():  # the keeper could not fork the worker
            os.close(report_read)
            reaping.kill(keeper)
            raise OSError(f"the worker's keeper (pid {keeper}) could not start it")
        keepers[int(line)] = (keeper, report_read)
        return int(line)

    def start(message: dict[str, Any], fds: list[int]) -> None:
        try:
            pid = fork_worker(message["argv"], message["env"], fds)
        except OSError as exc:
            reply({"failed": message["spawn"], "message": f"fork failed: {exc}"})
            return
        reply({"spawned": message["spawn"], "pid": pid})

    def prestart_one(planned: Planned) -> bool:
        ours, theirs = socket.socketpair()
        stderr_read, stderr_write = os.pipe()
        try:
            pid = fork_worker(
                planned.argv,
                planned.env,
                [theirs.fileno(), stderr_write],
                not_theirs=(ours.fileno(), stderr_read),
            )
            ours.sendall(encode({"sequence": planned.sequence, "then_enumerate": True}))
            message = {
                "prestarted": planned.name,
                "pid": pid,
                "argv": planned.argv,
                "sequence": planned.sequence,
            }
            socket.send_fds(control, [json.dumps(message).encode()], [ours.fileno(), stderr_read])
            return True
        except OSError:
            return False  # the host starts it itself
        finally:
            ours.close()
            theirs.close()
            os.close(stderr_read)
            os.close(stderr_write)

    if prestart is not None:
        try:
            planned, result = plan() if plan else ([], None)
        except Exception:  # the host lists the drivers again, and says what is wrong
            planned, result = [], None
        started = [p.name for p in planned if prestart_one(p)]
        reply({"prestart_done": started, "result": result})

    while True:
        exited = False  # only a SIGCHLD (through the wakeup fd) means a child ended
        for key, _ in selector.select():
            if key.fd == wake_read:
                exited = True
                with contextlib.suppress(BlockingIOError):
                    while os.read(wake_read, 512):
                        pass
                continue
            try:
                data, fds, _, _ = socket.recv_fds(control, MAX_DATAGRAM, 2)
            except InterruptedError:
                continue
            if not data:  # the host closed its end, or died: everything below ends
                reaping.stop_all_children()
                return
            message = json.loads(data)
            if "spawn" in message and len(fds) == 2:
                start(message, fds)
            elif "ping" in message:
                reply({"pong": message["ping"]})
            elif "kill" in message and message["kill"] in keepers:
                # The keeper, never the worker's pid (the keeper may have reaped it, and
                # the pid be reused): the worker dies with it, and what it left is
                # re-parented here and stopped (``reap``).
                reaping.kill(keepers[message["kill"]][0])
            for fd in fds:
                os.close(fd)
        if exited:
            reap()


def _read_line(fd: int) -> str:
    data = b""
    while not data.endswith(b"\n"):
        try:
            chunk = os.read(fd, 32)
        except InterruptedError:
            continue
        if not chunk:
            break
        data += chunk
    return data.decode().strip()


def _worker_code(report: int, keeper_code: int) -> int:
    """The worker's exit code as its keeper reported it; a keeper that was killed (the
    host asked, or the keeper was killed from outside) took its worker with it."""
    try:
        os.set_blocking(report, False)
        line = _read_line(report)
    except OSError:
        line = ""
    finally:
        os.close(report)
    with contextlib.suppress(ValueError):
        return int(line)
    return keeper_code if keeper_code < 0 else -signal.SIGKILL


def keep(
    main: Callable[[list[str]], None],
    argv: list[str],
    env: dict[str, str],
    fds: list[int],
    zygote: int,
    report: int,
) -> None:
    """A worker's keeper: the small process between the zygote and one worker. It leads a
    session of its own and is the subreaper of everything the worker starts, so whatever
    a driver forks, daemons included, stays below it; it reaps those, and when the worker
    ends it stops and reaps what is left, then reports the worker's exit code on
    ``report`` (the worker's pid first, at once) and exits. Nothing a driver does reaches
    the zygote or another driver's processes."""
    import devicehost.system.reaping as reaping
    from devicehost.system.subprocesses import become_subreaper, die_with_parent, name_process

    die_with_parent(zygote)
    with contextlib.suppress(OSError):
        os.setsid()  # no terminal's signals; its own group and session
    become_subreaper()
    name_process("dh-keeper")
    keeper = os.getpid()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(report)
            for signum in (signal.SIGHUP, signal.SIGTERM):  # a driver's process as usual
                signal.signal(signum, signal.SIG_DFL)
            become_worker(main, [*argv, "--parent-pid", str(keeper)], env, fds)
        finally:
            os._exit(BROKEN_CHILD)
    for fd in fds:
        os.close(fd)
    os.write(report, f"{pid}\n".encode())
    code = -signal.SIGKILL
    while True:
        try:
            done, status = os.waitpid(-1, 0)  # the worker, and orphans re-parented here
        except InterruptedError:
            continue
        except ChildProcessError:
            break
        if done == pid:
            code = os.waitstatus_to_exitcode(status)
            break
    reaping.stop_all_children()
    with contextlib.suppress(OSError):
        os.write(report, f"{code}\n".encode())


def become_worker(
    main: Callable[[list[str]], None], argv: list[str], env: dict[str, str], fds: list[int]
) -> None:
    """In the forked child: take the worker's stderr and environment, then run it."""
    channel, stderr = fds
    os.dup2(stderr, 2)
    os.close(stderr)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.environ.clear()
    os.environ.update(env)
    if env.get("PYTHONFAULTHANDLER"):
        import faulthandler

        faulthandler.enable()  # what the variable does at an interpreter's start
    main([*argv, "--fd", str(channel)])


def main(argv: list[str] | None = None) -> None:
    import argparse

    from devicehost.system.subprocesses import add_parent_pid_argument

    parser = argparse.ArgumentParser(prog=f"python -m {__name__}")
    parser.add_argument("--fd", type=int, required=True, help="the channel's file descriptor")
    add_parent_pid_argument(parser)
    args = parser.parse_args(argv)
    serve(socket.socket(fileno=args.fd), args.parent_pid)


if __name__ == "__main__":
    main()
