"""The unix-socket path limit, which both kubelet faces and the driver side's name checks
respect: a socket whose path is too long cannot be bound at all."""

from __future__ import annotations

import os
from pathlib import Path

#: sun_path of a unix socket address holds 108 bytes, the last one a NUL.
MAX_SOCKET_PATH_BYTES = 107


def socket_path_problem(path: Path) -> str | None:
    """Why no unix socket can be bound at ``path`` (too long), or None."""
    size = len(os.fsencode(path))
    if size <= MAX_SOCKET_PATH_BYTES:
        return None
    return (
        f"socket path {path} is {size} bytes, over the {MAX_SOCKET_PATH_BYTES}-byte limit "
        "of unix socket paths: use a shorter --plugin-dir (or a shorter resource name)"
    )
