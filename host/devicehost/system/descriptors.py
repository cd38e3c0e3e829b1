"""The host's file-descriptor budget: resources take descriptors, recovery keeps a reserve.

Each served resource holds a few descriptors (its listening socket, the kubelet's
connection to it, a registration channel while it registers, its streams), so resources
are only claimed while that leaves ``RESERVE`` free; what restarts a driver — a worker's
socket pair and stderr pipe, a fresh zygote, the modules recovery imports — must never
find the process out of descriptors (docs/reliability.md, "Limits").
"""

from __future__ import annotations

import importlib
import os
import resource

#: Descriptors kept free for supervision and restarts: a worker's channel and stderr pipe,
#: a fresh zygote's, a log handler's reopen, and headroom for the kubelet's connections.
RESERVE = 64
#: What one served resource holds at most: listening socket, the kubelet's connection, a
#: registration channel while it registers, and one more for a stream being replaced.
PER_RESOURCE = 4
#: Modules the restart paths use, imported once start-up is over (off the critical path)
#: so that recovery never needs to open a file: an import in a process out of descriptors
#: fails with EMFILE, and the restart with it.
RECOVERY_MODULES = ("tenacity", "tenacity.wait", "devicehost.system.subprocesses")


def raise_soft_limit() -> int:
    """Raise this process's descriptor soft limit to its hard limit (allowed without
    privilege; workers inherit it). Returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return int(soft)


def open_count() -> int:
    """Descriptors this process has open now."""
    try:
        return len(os.listdir("/proc/self/fd")) - 1  # the listing's own
    except OSError:
        return 0


def resource_problem(name: str, unserved: int) -> str | None:
    """Why resource ``name`` cannot be served without eating into the reserve, or None.
    ``unserved``: resources claimed whose descriptors are not open yet (not counted)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return None
    used = open_count()
    if used + (unserved + 1) * PER_RESOURCE + RESERVE <= soft:
        return None
    return (
        f"resource {name!r} refused: {used} descriptors are open of this process's limit of "
        f"{soft}; a resource needs up to {PER_RESOURCE} and {RESERVE} are kept for supervision "
        "and restarts (raise the container's RLIMIT_NOFILE)"
    )


def preload_recovery_modules() -> None:
    """Import ``RECOVERY_MODULES`` now, while descriptors are to be had."""
    for module in RECOVERY_MODULES:
        importlib.import_module(module)
