"""One devicehost per device-plugin directory: made if missing, locked while served, and
locked anew whenever it is re-created.

Two hosts on one directory would delete and re-create each other's sockets. The lock is on
the directory itself: a lock file in it would be deleted by the kubelet's clean-up. During
a rolling update with surge the new pod waits for the old one's lock (``wait_to_lock``).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import time
from pathlib import Path

from devicehost.errors import ConfigError
from devicehost.kubelet.deviceplugin.restart_watch import DirectoryWatcher

log = logging.getLogger(__name__)

#: How often a waiting host tries the lock again (``wait_to_lock``).
HANDOVER_POLL_SECONDS = 0.2


class PluginDirInUse(ConfigError):
    """Another devicehost already serves this device-plugin directory.

    Two hosts on one directory would delete and re-create each other's sockets. Stop the
    other one (or point this one at another ``pluginDir``).
    """


class PluginDirLock:
    """The exclusive lock on the plugin directory this host serves."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._fd: int | None = None

    def make(self) -> None:
        """Create the plugin directory when the kubelet has not made it yet, before any
        socket is bound in it (and said once), so every resource serves at its first try;
        the kubelet keeps a directory it finds. One that cannot be made is left to the
        runners, which report it and retry."""
        directory = self.directory
        if directory.is_dir():
            return
        try:
            directory.mkdir(mode=0o750, parents=True)
        except OSError as exc:
            log.error("cannot create the plugin directory %s: %s", directory, exc.strerror)
            return
        log.info("created the plugin directory %s (the kubelet has not made it yet)", directory)

    async def wait_to_lock(self, seconds: float) -> None:
        """Lock the directory once the devicehost holding it lets it go: the old pod of a
        rolling update with surge, which releases it as the last step of its stop. Still
        held after ``seconds``: ``PluginDirInUse``, naming the wait."""
        deadline = time.monotonic() + seconds
        while True:
            try:
                self.lock()
                return
            except PluginDirInUse:
                if time.monotonic() >= deadline:
                    raise PluginDirInUse(
                        "config",
                        "pluginDirHandoverSeconds",
                        f"another devicehost still serves {self.directory} after "
                        f"{seconds:g} s of waiting for it to stop; stop it, or use another "
                        "--plugin-dir",
                    ) from None
            await asyncio.sleep(HANDOVER_POLL_SECONDS)

    def lock(self) -> None:
        """Hold an exclusive lock on the plugin directory itself, so a second host refuses
        to start. Called again on every change of the directory: one created late or
        re-created after it was removed is locked anew (a lock on the old one guards
        nothing)."""
        directory = self.directory
        if self._fd is not None:
            held = os.fstat(self._fd)
            with contextlib.suppress(OSError):
                now = os.stat(directory)
                if (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino):
                    return
            os.close(self._fd)
            self._fd = None
        try:
            fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return  # not there yet: the runners report it and retry
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise PluginDirInUse(
                "config",
                "pluginDir",
                f"another devicehost already serves {directory}; stop it, or use another "
                "--plugin-dir",
            ) from None
        self._fd = fd

    async def keep_locked(self, watcher: DirectoryWatcher) -> None:
        """Lock the plugin directory again whenever it is created or replaced."""
        changed = watcher.subscribe()
        refused = False
        try:
            while True:
                await changed.wait()
                changed.clear()
                try:
                    self.lock()
                    refused = False
                except PluginDirInUse as exc:
                    if not refused:
                        log.error("%s", exc)
                    refused = True
        finally:
            watcher.unsubscribe(changed)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
