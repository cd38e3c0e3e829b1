"""Find, stop and reap the processes a driver left behind.

Linux re-parents an orphan to its nearest ancestor that is a child subreaper
(``PR_SET_CHILD_SUBREAPER``), or to PID 1 of its PID namespace. Each worker's keeper, the
zygote and the host are subreapers (``docs/reliability.md``, "Containment"), so whatever a
driver forks stays below them: this module lists a process's children from ``/proc`` and
ends them. It imports only a few standard modules: the zygote and every keeper use it.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Collection
from dataclasses import dataclass


@dataclass(frozen=True)
class Proc:
    """One child, as ``/proc/<pid>/stat`` shows it."""

    pid: int
    state: str
    pgid: int
    name: str

    @property
    def zombie(self) -> bool:
        return self.state in ("Z", "X")


def _stat(pid: int) -> tuple[int, Proc] | None:
    """(parent pid, the process) from ``/proc/<pid>/stat``; None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode(errors="replace")
    except OSError:
        return None
    name = data[data.find("(") + 1 : data.rfind(")")]
    fields = data[data.rfind(")") + 2 :].split()
    try:
        return int(fields[1]), Proc(pid, fields[0], int(fields[2]), name)
    except (IndexError, ValueError):
        return None


def children(parent: int | None = None) -> list[Proc]:
    """The live and dead (zombie) children of ``parent`` (default: this process)."""
    parent = os.getpid() if parent is None else parent
    listed = _listed_children(parent)
    pids = listed if listed is not None else _scanned_children(parent)
    found = []
    for pid in pids:
        stat = _stat(pid)
        if stat is not None and stat[0] == parent:
            found.append(stat[1])
    return found


def _listed_children(parent: int) -> set[int] | None:
    """The kernel's own list (``/proc/<pid>/task/<tid>/children``, one per thread: an
    orphan is re-parented to one of the subreaper's threads); None where the kernel was
    built without it."""
    pids: set[int] = set()
    try:
        tasks = os.listdir(f"/proc/{parent}/task")
        for task in tasks:
            path = f"/proc/{parent}/task/{task}/children"
            with contextlib.suppress(FileNotFoundError, ProcessLookupError), open(path) as listing:
                pids.update(int(pid) for pid in listing.read().split())
    except OSError:
        return None
    if not pids and not os.path.exists(f"/proc/{parent}/task/{parent}/children"):
        return None
    return pids


def _scanned_children(parent: int) -> list[int]:
    """Every process whose parent is ``parent``, from a walk over ``/proc``."""
    pids = []
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                stat = _stat(int(entry.name))
                if stat is not None and stat[0] == parent:
                    pids.append(stat[1].pid)
    return pids


def zombies_below(pid: int, limit: int = 100_000) -> int:
    """Dead, unreaped processes below ``pid`` (its children, their children, ...): each
    holds a process-table slot until its parent waits for it. Stops counting at
    ``limit`` processes walked, so a fork storm costs a bounded walk."""
    zombies, walked, parents = 0, 0, [pid]
    while parents and walked < limit:
        for child in children(parents.pop()):
            walked += 1
            if child.zombie:
                zombies += 1
            else:
                parents.append(child.pid)
    return zombies


def kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)


def reap(pid: int) -> int | None:
    """Collect ``pid``'s exit if it has ended: its exit code as ``subprocess`` gives it."""
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return None
    return os.waitstatus_to_exitcode(status) if done else None


def stop_all_children(keep: Collection[int] = (), rounds: int = 1000) -> list[Proc]:
    """SIGKILL and reap every child but ``keep``, and every process re-parented here as
    they die (their own children), until none is left; return those stopped. Blocking:
    for a process with nothing else to do (a keeper whose worker ended, a zygote told to
    stop). ``rounds`` bounds it against a fork bomb outrunning the kills."""
    stopped: list[Proc] = []
    for _ in range(rounds):
        left = [c for c in children() if c.pid not in keep]
        if not left:
            break
        for child in left:
            if not child.zombie:
                kill(child.pid)
                stopped.append(child)
        for child in left:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(child.pid, 0)
    return stopped


def stop_strays(helpers: Collection[int]) -> list[Proc]:
    """The host's sweep: reap every child that is not one of its ``helpers`` and not of its
    own process group (what the host itself runs for a moment, which its caller waits
    for), stopping it first if it still runs. Such a child was re-parented to the host:
    what a killed zygote's tree left, or, with the host as PID 1 of its container, any
    orphan there. Never blocks; returns those stopped or reaped."""
    own_group = os.getpgrp()
    handled = []
    for child in children():
        if child.pid in helpers or child.pgid == own_group:
            continue
        if not child.zombie:
            kill(child.pid)
        reap(child.pid)
        handled.append(child)
    return handled
