"""What a running devicehost reports about its drivers, for ``devicehost drivers``.

A daemon holds an exclusive lock on the plugin directory it serves
(``kubelet.deviceplugin.plugin_dir_lock``); a command that finds the lock taken knows one
runs, and reads the daemon's live state from its status server (``GET /drivers`` on
``metrics.address``, the same config the daemon reads). When none runs, or its status
server is off or does not answer, the caller probes the drivers itself.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import urllib.request
from typing import Any

from devicehost.config.host_config import HostConfig

log = logging.getLogger(__name__)

READ_SECONDS = 3.0


def daemon_serves(config: HostConfig) -> bool:
    """True when another process holds the plugin directory's lock (a running daemon)."""
    try:
        fd = os.open(config.plugin_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing it drops a lock taken here
    return False


def status_url(address: str, path: str) -> str:
    """The URL of ``path`` on a status server listening on ``address`` (``host:port``);
    a wildcard host is reached on loopback."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"http://{f'[{host}]' if ':' in host else host}:{port}{path}"


def daemon_drivers(config: HostConfig) -> list[dict[str, Any]] | None:
    """The running daemon's rows (each with ``"source": "daemon"``), or None when no
    daemon serves the plugin directory or its state cannot be read."""
    if not config.metrics_address or not daemon_serves(config):
        return None
    url = status_url(config.metrics_address, "/drivers")
    try:
        with urllib.request.urlopen(url, timeout=READ_SECONDS) as answer:
            rows = json.loads(answer.read())
    except (OSError, ValueError) as exc:
        log.warning(
            "a devicehost serves %s, but its state could not be read from %s (%s); "
            "probing the drivers here instead",
            config.plugin_dir,
            url,
            exc,
        )
        return None
    if not isinstance(rows, list):
        return None
    with contextlib.suppress(TypeError):
        return [{**row, "source": "daemon"} for row in rows]
    return None
