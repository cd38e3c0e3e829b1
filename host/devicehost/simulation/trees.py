"""Where a simulated node's tree lives: one fresh temporary directory per host process.

Made before the host imports the rest of itself (``drivers/early.py``), so each worker can
build its part of the node while the host is still starting.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

SIM_PREFIX = "devicehost-sim-"
#: The file in a simulated tree naming the host process that owns it.
SIM_OWNER_FILE = ".owner-pid"
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
        try:
            pid = int((stale / SIM_OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue
        if not _alive(pid):
            shutil.rmtree(stale, ignore_errors=True)
    root = Path(tempfile.mkdtemp(prefix=SIM_PREFIX, dir=tmp))
    (root / SIM_OWNER_FILE).write_text(str(os.getpid()))
    return root


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
