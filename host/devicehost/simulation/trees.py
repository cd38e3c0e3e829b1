"""Where a simulated node's tree lives: one fresh temporary directory per host process.

Made before the host imports the rest of itself (``drivers/early.py``), so each worker can
build its part of the node while the host is still starting.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from pathlib import Path

SIM_PREFIX = "devicehost-sim-"
#: The file in a simulated tree naming the host process that owns it.
SIM_OWNER_FILE = ".owner-pid"
#: The file whose lock the owning host holds while it lives: a lock is seen across PID
#: namespaces, where a pid is not (a host in its container is PID 1, which looks alive to
#: everyone, and its pids mean other processes outside).
SIM_LOCK_FILE = ".owner.lock"
#: the lock descriptor of each tree this process made, released when it is removed
_held: dict[Path, int] = {}
SHARED_MEMORY_DIR = "/dev/shm"


def simulation_dir() -> Path:
    """Where simulated trees go: ``$TMPDIR`` when set, else ``/dev/shm`` (memory) when
    writable, else the temp directory. A simulated node is hundreds of small files and
    directories; on a disk-backed temp directory creating them took 20 to 300 ms of CPU,
    varying with the disk, against 12 ms in memory (docs/performance.md)."""
    if os.environ.get("TMPDIR"):
        return Path(os.environ["TMPDIR"])
    if os.access(SHARED_MEMORY_DIR, os.W_OK | os.X_OK):
        return Path(SHARED_MEMORY_DIR)
    return Path(tempfile.gettempdir())


def make_sim_root(directory: Path | None = None) -> Path:
    """A fresh temporary tree for this process (never inside ``--root``) in ``directory``
    (``simulateDir``; default ``simulation_dir()``), after removing any left by a host
    that died without cleaning up.

    Allocate answers and CDI specs name host paths inside this tree (``simulated_paths``),
    so the container runtime must see it at the same path: on the node itself that holds
    for ``/dev/shm``; in a pod, ``directory`` must be a hostPath mounted at its own path."""
    tmp = directory or simulation_dir()
    tmp.mkdir(parents=True, exist_ok=True)
    for stale in tmp.glob(SIM_PREFIX + "*"):
        if _abandoned(stale):
            shutil.rmtree(stale, ignore_errors=True)
    root = Path(tempfile.mkdtemp(prefix=SIM_PREFIX, dir=tmp))
    fd = os.open(root / SIM_LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    _held[root] = fd
    # Written once the lock is held: a tree without it is still being made, and left alone.
    (root / SIM_OWNER_FILE).write_text(str(os.getpid()))
    return root


def remove_sim_root(root: Path) -> None:
    """Remove a tree this process made, and let go of its lock."""
    shutil.rmtree(root, ignore_errors=True)
    fd = _held.pop(root, None)
    if fd is not None:
        os.close(fd)


def _abandoned(tree: Path) -> bool:
    """Whether no live host owns ``tree``: its lock can be taken (the owner is gone, in
    whatever PID namespace it ran). A tree still being made is not; one from before the
    lock existed is judged by its owner's pid."""
    try:
        pid = int((tree / SIM_OWNER_FILE).read_text())
    except (OSError, ValueError):
        return False
    try:
        fd = os.open(tree / SIM_LOCK_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return not _alive(pid)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


def driver_root(sim_root: Path | None, root: Path, driver: str) -> Path:
    """The host's ``/`` as ``driver`` sees it: its own directory of the simulated tree, or
    ``root`` (``--root``) when nothing is simulated."""
    if sim_root is None:
        return root
    path = sim_root / driver
    path.mkdir(exist_ok=True)
    return path


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
