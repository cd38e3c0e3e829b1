"""The host's helper processes (the zygote, the span exporter): how they are started, and
what each does first."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys


def host_environment(**extra: str) -> dict[str, str]:
    """The host's environment with its import path, so a child finds the same packages and
    drivers (an editable or ``--target`` install is on ``sys.path`` only)."""
    env = {**os.environ, **extra}
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return env


def start_helper(module: str, env: dict[str, str]) -> tuple[socket.socket, subprocess.Popen[bytes]]:
    """Start ``python -m <module> --fd N``, a fresh interpreter whose end of a new
    ``SOCK_SEQPACKET`` pair is fd N; return the host's end and the process."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", module, "--fd", str(theirs.fileno())],
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
            env=env,
        )
    except BaseException:
        ours.close()
        raise
    finally:
        theirs.close()
    return ours, process


#: Linux keeps 15 bytes of a process's name (``/proc/<pid>/comm``, what ``top`` shows).
MAX_NAME_BYTES = 15


def name_process(name: str) -> None:
    """Name this process for ``ps -o comm``, ``top`` and ``/proc/<pid>/comm``: a forked
    worker's command line is still the host's, so its name is what tells them apart."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(15, name.encode()[:MAX_NAME_BYTES])  # PR_SET_NAME


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when the host dies, even by ``kill -9``."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() == 1:  # the host died before prctl took effect
            os._exit(0)
