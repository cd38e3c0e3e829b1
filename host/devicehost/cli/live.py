"""What a running devicehost reports about its drivers, for ``devicehost drivers``.

A daemon holds an exclusive lock on the plugin directory it serves
(``kubelet.deviceplugin.plugin_dir_lock``); a command that finds the lock taken knows one
runs, and reads the daemon's live state from its status server (``GET /drivers`` on
``metrics.address``, the same config the daemon reads). When none runs, or its status
server is off or does not answer, the caller probes the drivers itself.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import time
import urllib.request
from typing import Any

from devicehost.config.host_config import HostConfig

log = logging.getLogger(__name__)

READ_SECONDS = 3.0
#: A daemon's rows are a few kB a driver; an answer past this is not a devicehost's.
MAX_ANSWER_BYTES = 1024 * 1024
#: The fields of a row the command shows, and their types.
ROW_FIELDS: dict[str, type | tuple[type, ...]] = {
    "name": str,
    "kind": str,
    "distribution": str,
    "version": str,
    "status": str,
    "reason": str,
    "notes": list,
    "restarts": int,
    "hung": list,
    "resources": list,
    "nodeFileErrors": list,
}


class NotADaemon(ValueError):
    """What answered on the metrics address is not a devicehost's /drivers."""


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
    daemon serves the plugin directory or its state cannot be read. What answers on the
    metrics address is read within ``READ_SECONDS`` in all and ``MAX_ANSWER_BYTES``, and
    believed only when every row has the fields a devicehost sends."""
    if not config.metrics_address or not daemon_serves(config):
        return None
    url = status_url(config.metrics_address, "/drivers")
    try:
        rows = _rows(json.loads(_read_bounded(url)))
    except (OSError, ValueError) as exc:
        log.warning(
            "a devicehost serves %s, but its state could not be read from %s (%s); "
            "probing the drivers here instead",
            config.plugin_dir,
            url,
            exc,
        )
        return None
    return [{**row, "source": "daemon"} for row in rows]


def _read_bounded(url: str) -> bytes:
    """The body at ``url``, read within ``READ_SECONDS`` in all (a trickling answer is
    cut off) and refused past ``MAX_ANSWER_BYTES``."""
    deadline = time.monotonic() + READ_SECONDS
    parts: list[bytes] = []
    size = 0
    with urllib.request.urlopen(url, timeout=READ_SECONDS) as answer:
        while True:
            if time.monotonic() > deadline:
                raise NotADaemon(f"the answer took over {READ_SECONDS:g} s")
            part = answer.read1(64 * 1024)
            if not part:
                return b"".join(parts)
            size += len(part)
            if size > MAX_ANSWER_BYTES:
                raise NotADaemon(f"the answer is over {MAX_ANSWER_BYTES} bytes")
            parts.append(part)


def _rows(answer: Any) -> list[dict[str, Any]]:
    """The rows of a devicehost's /drivers answer; ``NotADaemon`` for anything else."""
    if not isinstance(answer, list):
        raise NotADaemon("the answer is not a list of drivers")
    for row in answer:
        if not isinstance(row, dict):
            raise NotADaemon("a row is not an object")
        for field, kind in ROW_FIELDS.items():
            if not isinstance(row.get(field), kind) or isinstance(row.get(field), bool):
                raise NotADaemon(
                    f"a row has no {field!r} of a devicehost's ({str(row)[:80]}); "
                    "is another program listening on metrics.address?"
                )
    return answer
