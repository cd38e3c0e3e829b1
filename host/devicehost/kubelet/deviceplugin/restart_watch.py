"""Notice kubelet restarts: wake subscribers whenever the device-plugin directory changes.

The kubelet deletes every socket in its directory when it starts and re-creates
``kubelet.sock``. Events are only *hints*: each subscriber re-checks the files it cares
about (``file_identity``), so a missed or duplicate event costs nothing and the polling
fallback (where inotify is unavailable) behaves the same, only slower.

inotify comes from the maintained ``asyncinotify`` binding. When the directory itself goes
away — removed, renamed, or replaced by a file — its watch ends; the watcher then polls
until a directory is back at the path and watches that one, with one inotify descriptor
open at a time and each closed exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from devicehost.system import supervision

if TYPE_CHECKING:
    from asyncinotify import Inotify

log = logging.getLogger(__name__)

FileIdentity = tuple[int, int, int]


def file_identity(path: Path) -> FileIdentity | None:
    """Identify a file across re-creation (inode numbers alone may be reused); None when
    there is none, including when a file stands where its directory should be."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return (st.st_dev, st.st_ino, st.st_ctime_ns)


class InotifyUnavailable(Exception):
    """This kernel or libc offers no inotify: poll instead."""


class DirectoryWatcher:
    """Sets every subscriber's event when ``directory`` changes (inotify or polling)."""

    def __init__(
        self,
        directory: Path,
        poll_interval: float = 0.2,
        safety_interval: float = 5.0,
        on_task_restart: Callable[[str], None] | None = None,
    ) -> None:
        self.directory = directory
        self.on_task_restart = on_task_restart
        self.poll_interval = poll_interval
        self.safety_interval = safety_interval
        #: "inotify", "polling" (no inotify here), or "stopped".
        self.mode = "stopped"
        self._subscribers: set[asyncio.Event] = set()
        self._inotify: Inotify | None = None
        self._tasks: list[asyncio.Task[None]] = []
        #: Why the directory cannot be watched now (logged once per outage), or None.
        self._unwatched: str | None = None

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
        mode, interval = "polling", self.poll_interval
        if use_inotify:
            try:
                self._inotify = self._watch()
            except InotifyUnavailable as exc:
                log.warning("inotify unavailable (%s); polling %s instead", exc, self.directory)
            else:
                mode, interval = "inotify", self.safety_interval
                self._tasks.append(
                    supervision.start("plugin-dir-events", self._events, self.on_task_restart)
                )
        self.mode = mode
        self._tasks.append(
            supervision.start(
                "plugin-dir-watch", functools.partial(self._tick, interval), self.on_task_restart
            )
        )
        log.info("watching %s for kubelet restarts (%s)", self.directory, self.mode)
        self._wake_all()  # whatever changed before the watch began is checked now

    def _watch(self) -> Inotify | None:
        """A new inotify descriptor watching the directory and, for its name, its parent;
        None when neither can be watched (the caller polls until one can)."""
        try:
            from asyncinotify import Inotify, Mask
        except (ImportError, OSError, RuntimeError) as exc:  # no inotify in this libc
            raise InotifyUnavailable(str(exc)) from None
        try:
            inotify = Inotify()
        except OSError as exc:
            raise InotifyUnavailable(os.strerror(exc.errno or 0)) from None
        with contextlib.suppress(OSError):  # the kubelet's own directory: re-create it
            self.directory.mkdir(parents=True, exist_ok=True)
        changes = Mask.CREATE | Mask.DELETE | Mask.MOVED_FROM | Mask.MOVED_TO | Mask.ONLYDIR
        watched = False
        with contextlib.suppress(OSError):
            # The directory's own DELETE_SELF never comes while a descriptor holds it open
            # (our lock does): its parent's events for its name say it went or came back.
            inotify.add_watch(self.directory.parent, changes)
            watched = True
        try:
            inotify.add_watch(
                self.directory, changes | Mask.ATTRIB | Mask.DELETE_SELF | Mask.MOVE_SELF
            )
        except OSError as exc:
            if self._unwatched is None:
                log.error(
                    "cannot watch %s (%s); waiting for it to be a directory again",
                    self.directory,
                    exc.strerror,
                )
            self._unwatched = exc.strerror or "unusable"
        else:
            watched = True
            if self._unwatched is not None:
                log.info("watching %s again", self.directory)
            self._unwatched = None
        if not watched:
            inotify.close()
            return None
        return inotify

    async def _events(self) -> None:
        """Wake subscribers on every event. An event about the directory itself (removed,
        moved, replaced, re-created) means watching it afresh; while nothing can be
        watched, poll."""
        try:
            while True:
                inotify = self._inotify
                if inotify is None:
                    await asyncio.sleep(self.poll_interval)
                    self._wake_all()
                    self._inotify = self._watch()
                    continue
                event = await inotify.get()
                if event.path == self.directory:
                    self._close_inotify()
                    self._inotify = self._watch()
                elif event.watch is not None and event.watch.path != self.directory:
                    continue  # a sibling in the parent directory: none of our business
                self._wake_all()
        finally:
            self._close_inotify()

    async def _tick(self, interval: float) -> None:
        """Polling: the only source in fallback mode, a safety net beside inotify."""
        while True:
            await asyncio.sleep(interval)
            self._wake_all()

    def _close_inotify(self) -> None:
        inotify, self._inotify = self._inotify, None
        if inotify is not None:
            inotify.close()  # closes its descriptor once, however often it is called

    async def close(self) -> None:
        """Stop watching: the event task lets go of the descriptor before it is closed."""
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._close_inotify()
        self.mode = "stopped"
