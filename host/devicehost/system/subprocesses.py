"""The host's helper processes (the zygote, the span exporter): how they are started, and
what each does first."""

from __future__ import annotations

import collections
import contextlib
import ctypes
import logging
import os
import signal
import socket
import subprocess
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse


def host_environment(**extra: str) -> dict[str, str]:
    """The host's environment with its import path, so a child finds the same packages and
    drivers (an editable or ``--target`` install is on ``sys.path`` only)."""
    env = {**os.environ, **extra}
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return env


#: The pids of the helpers this process started (each reaped by its owner): the host's
#: reaper (``reaping.HostReaper``) leaves these alone.
HELPERS: set[int] = set()


def start_helper(
    module: str, env: dict[str, str], capture_stderr: bool = False
) -> tuple[socket.socket, subprocess.Popen[bytes]]:
    """Start ``python -m <module> --fd N --parent-pid P``, a fresh interpreter whose end of
    a new ``SOCK_SEQPACKET`` pair is fd N and whose parent is P (this process); return the
    host's end and the process. It leads a process group of its own: a signal to the
    host's group (``timeout``, a shell's job control) reaches the host alone, which then
    stops its helpers itself (a stop is a stop, not a helper's crash)."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        process = subprocess.Popen(
            [
                *(sys.executable, "-m", module),
                *("--fd", str(theirs.fileno()), "--parent-pid", str(os.getpid())),
            ],
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
            stderr=subprocess.PIPE if capture_stderr else None,
            env=env,
            process_group=0,
        )
    except BaseException:
        ours.close()
        raise
    finally:
        theirs.close()
    HELPERS.add(process.pid)
    return ours, process


def exit_description(code: int | None) -> str:
    """An exit code as ``subprocess`` gives it (-N: signal N), in words for a log line."""
    if code is None:
        return "exit status unknown"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class OutputTail:
    """A helper's stderr, read from a pipe on the host's loop: each line is logged, and the
    last ``TAIL_LINES`` are kept for the log line that reports its death."""

    TAIL_LINES = 5
    #: a line longer than this is cut (a progress bar without newlines included)
    MAX_LINE = 1000

    def __init__(self, fd: int, name: str, log: logging.Logger) -> None:
        self.fd = fd
        self.name = name
        self.log = log
        self.lines: collections.deque[str] = collections.deque(maxlen=self.TAIL_LINES)
        self._partial = b""
        os.set_blocking(fd, False)

    def read(self) -> bool:
        """Read what is there; False at end of file (the pipe is closed then)."""
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                return True
            except OSError:
                data = b""
            if not data:
                self._line(self._partial)
                self._partial = b""
                with contextlib.suppress(OSError):
                    os.close(self.fd)
                return False
            *lines, self._partial = (self._partial + data).split(b"\n")
            for line in lines:
                self._line(line)
            if len(self._partial) > self.MAX_LINE:
                self._line(self._partial)
                self._partial = b""

    def _line(self, raw: bytes) -> None:
        line = raw.decode(errors="replace").rstrip()[: self.MAX_LINE]
        if line:
            self.lines.append(line)
            self.log.warning("%s: %s", self.name, line)

    def text(self) -> str:
        """``; last output: a | b`` for a log line, or nothing."""
        return ("; last output: " + " | ".join(self.lines)) if self.lines else ""


#: Linux keeps 15 bytes of a process's name (``/proc/<pid>/comm``, what ``top`` shows).
MAX_NAME_BYTES = 15


def name_process(name: str) -> None:
    """Name this process for ``ps -o comm``, ``top`` and ``/proc/<pid>/comm``: a forked
    worker's command line is still the host's, so its name is what tells them apart."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(15, name.encode()[:MAX_NAME_BYTES])  # PR_SET_NAME


def die_with_parent(parent_pid: int) -> None:
    """Ask Linux to SIGKILL this process when its parent dies, even by ``kill -9``;
    ``parent_pid`` is the parent's pid as the parent read it before it forked.

    The parent may have died before the request took effect: then this process has been
    re-parented already, and its parent pid is no longer ``parent_pid``. Comparing with
    the pid the parent gave (not with 1) is what lets the host be PID 1, as it is in its
    container: a helper whose parent is PID 1 is then a helper whose host is alive."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(0)


def become_subreaper() -> bool:
    """Make this process the child subreaper of its descendants (``PR_SET_CHILD_SUBREAPER``):
    a process whose parent dies is re-parented to it instead of to init, so it can reap
    and stop what a dead child left behind. False where Linux refuses."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(36, 1, 0, 0, 0) == 0)  # PR_SET_CHILD_SUBREAPER
    except Exception:
        return False


def add_parent_pid_argument(parser: argparse.ArgumentParser) -> None:
    """The ``--parent-pid`` every helper is started with (``start_helper``)."""
    parser.add_argument(
        "--parent-pid",
        type=int,
        required=True,
        help="the pid of the process that started this one (it dies with it)",
    )
