"""Reading a file other processes of the node can write, as untrusted input.

Opened without following a symlink (a link to ``/dev/zero`` would read without end) and
without blocking (a FIFO's open blocks until a writer comes), accepted only when the open
descriptor is a regular file — checked on the descriptor, so nothing changes between the
check and the read — and read up to a bound the caller sizes to what it can parse.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class Refused(Exception):
    """The file at the path is not one to read (a link, not a regular file, too large):
    the message says which."""


@contextlib.contextmanager
def open_regular(path: Path) -> Iterator[tuple[int, os.stat_result]]:
    """The open descriptor of the regular file at ``path`` and its ``fstat``.
    ``FileNotFoundError`` when there is none; ``Refused`` for anything else there."""
    try:
        fd = os.open(path, _FLAGS)
    except FileNotFoundError:
        raise
    except OSError as exc:  # ELOOP for a symlink; EACCES, ENXIO, ...
        raise Refused(f"cannot be opened without following a link ({exc.strerror})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise Refused("is not a regular file")
        yield fd, info
    finally:
        os.close(fd)


def read_at_most(fd: int, limit: int) -> bytes:
    """The open file's bytes; ``Refused`` when it holds more than ``limit``."""
    parts: list[bytes] = []
    left = limit + 1
    while left > 0:
        part = os.read(fd, min(left, 1 << 20))
        if not part:
            break
        parts.append(part)
        left -= len(part)
    data = b"".join(parts)
    if len(data) > limit:
        raise Refused(f"is over {limit} bytes")
    return data
