"""Notice kubelet restarts: wake subscribers whenever the device-plugin directory changes.

The kubelet deletes every socket in its directory when it starts and re-creates
``kubelet.sock``. Events are only *hints*: each subscriber re-checks the files it cares
about (``file_identity``), so a missed or duplicate event costs nothing and the polling
fallback (where inotify is unavailable) behaves the same, only slower.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import logging
import os
import struct
from pathlib import Path

log = logging.getLogger(__name__)

FileIdentity = tuple[int, int, int]

_IN_NONBLOCK = 0o4000
_IN_CLOEXEC = 0o2000000
# IN_ATTRIB | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF
_IN_MASK = 0x4 | 0x40 | 0x80 | 0x100 | 0x200 | 0x400 | 0x800
_IN_IGNORED = 0x8000
_EVENT_HEADER = struct.Struct("iIII")


def file_identity(path: Path) -> FileIdentity | None:
    """Identify a file across re-creation (inode numbers alone may be reused); None when
    there is none, including when a file stands where its directory should be."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return (st.st_dev, st.st_ino, st.st_ctime_ns)


class DirectoryWatcher:
    """Sets every subscriber's event when ``directory`` changes (inotify or polling)."""

    def __init__(
        self, directory: Path, poll_interval: float = 0.2, safety_interval: float = 5.0
    ) -> None:
        self.directory = directory
        self.poll_interval = poll_interval
        self.safety_interval = safety_interval
        self.mode = "stopped"
        self._subscribers: set[asyncio.Event] = set()
        self._fd: int | None = None
        self._task: asyncio.Task[None] | None = None

    def subscribe(self) -> asyncio.Event:
        event = asyncio.Event()
        self._subscribers.add(event)
        return event

    def unsubscribe(self, event: asyncio.Event) -> None:
        self._subscribers.discard(event)

    def _wake_all(self) -> None:
        for event in self._subscribers:
            event.set()

    def start(self, use_inotify: bool = True) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        if use_inotify:
            self._fd = _inotify_open(self.directory)
        loop = asyncio.get_running_loop()
        if self._fd is not None:
            loop.add_reader(self._fd, self._on_inotify)
            self.mode = "inotify"
            interval = self.safety_interval
        else:
            self.mode = "polling"
            interval = self.poll_interval
        self._task = asyncio.create_task(self._tick(interval), name="plugin-dir-watch")
        log.info("watching %s for kubelet restarts (%s)", self.directory, self.mode)

    def _on_inotify(self) -> None:
        assert self._fd is not None
        try:
            data = os.read(self._fd, 65536)
        except BlockingIOError:
            return
        offset, rewatch = 0, False
        while offset + _EVENT_HEADER.size <= len(data):
            _wd, mask, _cookie, length = _EVENT_HEADER.unpack_from(data, offset)
            rewatch |= bool(mask & _IN_IGNORED)
            offset += _EVENT_HEADER.size + length
        if rewatch:  # the directory itself was removed: watch the new one
            self._reopen()
        self._wake_all()

    def _reopen(self) -> None:
        loop = asyncio.get_running_loop()
        if self._fd is not None:
            loop.remove_reader(self._fd)
            os.close(self._fd)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._fd = _inotify_open(self.directory)
        if self._fd is not None:
            loop.add_reader(self._fd, self._on_inotify)

    async def _tick(self, interval: float) -> None:
        """Polling: the only source in fallback mode, a safety net beside inotify."""
        while True:
            await asyncio.sleep(interval)
            if self._fd is None and self.mode == "inotify":
                self._reopen()
            self._wake_all()

    def close(self) -> None:
        if self._task:
            self._task.cancel()
        if self._fd is not None:
            with contextlib.suppress(RuntimeError):
                asyncio.get_running_loop().remove_reader(self._fd)
            os.close(self._fd)
            self._fd = None
        self.mode = "stopped"


def _inotify_open(directory: Path) -> int | None:
    """An inotify descriptor watching ``directory``, or None where inotify is unavailable."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name, use_errno=True)
        fd = libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
    except (OSError, AttributeError):
        fd = -1
    if fd < 0:
        log.warning("inotify unavailable; polling %s instead", directory)
        return None
    if libc.inotify_add_watch(fd, os.fsencode(directory), _IN_MASK) < 0:
        err = ctypes.get_errno()
        os.close(fd)
        log.warning(
            "cannot watch %s with inotify (%s); polling instead", directory, os.strerror(err)
        )
        return None
    return int(fd)
