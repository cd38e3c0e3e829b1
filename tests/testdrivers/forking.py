"""A driver that starts a daemon from a hook, as a careless vendor integration does.

Config (``drivers.<name>``), beside ``Scripted``'s:
  daemon: NAME            configure starts a daemon named NAME (for ps; 15 bytes at most)
  daemonSeconds: S        the daemon exits after S seconds (default: it never does)

The daemon is started the classic way: fork, ``setsid`` in the child, fork again, and the
child exits, so the daemon is an orphan in a session of its own from its first moment. It
keeps every descriptor the worker had (its channel included), as careless daemons do.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from devicehost import hookimpl
from devicehost.system.subprocesses import name_process
from testdrivers.scripted import Scripted


def start_daemon(name: str, seconds: float) -> None:
    """Double-fork a process named ``name`` that sleeps ``seconds`` (0: for ever)."""
    child = os.fork()
    if child == 0:
        try:
            os.setsid()
            if os.fork() == 0:
                name_process(name)
                deadline = time.monotonic() + seconds if seconds else None
                while deadline is None or time.monotonic() < deadline:
                    time.sleep(0.05)
        finally:
            os._exit(0)
    os.waitpid(child, 0)


class Forking(Scripted):
    """``Scripted``, whose configure starts a daemon (``daemon: NAME``)."""

    @hookimpl
    def devicehost_configure(self, config: Mapping[str, Any], root: Path) -> None:
        super().devicehost_configure(config=config, root=root)
        if config.get("daemon"):
            start_daemon(str(config["daemon"]), float(config.get("daemonSeconds", 0)))
