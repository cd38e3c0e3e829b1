"""Checks on the device-plugin directory that need no gRPC: ``devicehost run`` makes them
before importing the rest of the host, so a wrong path is one clear line, at once."""

from __future__ import annotations

import os
from pathlib import Path

from devicehost.system.sockets import socket_path_problem

#: The shortest socket file name the host uses, for checking the directory up front.
_SHORTEST_SOCKET = "devicehost-x.sock"


def plugin_dir_problem(plugin_dir: Path) -> str | None:
    """Why sockets cannot be created in ``plugin_dir``, with what to do; None when they can.

    A missing directory is fine when it can be created (the kubelet may start later).
    """
    existing = plugin_dir
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing != plugin_dir and not existing.is_dir():
        return f"plugin directory {plugin_dir} cannot be created: {existing} is not a directory"
    if existing == plugin_dir and not plugin_dir.is_dir():
        return f"plugin directory {plugin_dir} is not a directory"
    if not os.access(existing, os.W_OK | os.X_OK):
        why = _not_writable_because(existing)
        if existing == plugin_dir:
            return f"cannot create sockets in {plugin_dir}: {why}"
        return (
            f"plugin directory {plugin_dir} does not exist and cannot be created "
            f"({existing}: {why})"
        )
    return socket_path_problem(plugin_dir / _SHORTEST_SOCKET)


def _not_writable_because(directory: Path) -> str:
    """Why ``directory`` is not writable, with what to do: a read-only filesystem is not
    fixed by running as root, and a process that already overrides file permissions (root
    with its capabilities) learns nothing from being told to run as root."""
    other = (
        "point --plugin-dir at a directory you may write (the kubelet's own is "
        "/var/lib/kubelet/device-plugins)"
    )
    try:
        read_only = bool(os.statvfs(directory).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False
    if read_only:
        return f"the filesystem is mounted read-only; remount it read-write, or {other}"
    if _overrides_permissions():
        return f"permission denied even to root (an ACL or a security module?); or {other}"
    return f"permission denied; run as root (the DaemonSet does), or {other}"


#: CAP_DAC_OVERRIDE's bit in /proc/self/status CapEff (linux/capability.h)
_CAP_DAC_OVERRIDE = 1


def _overrides_permissions() -> bool:
    """Whether this process holds CAP_DAC_OVERRIDE (root's, unless dropped)."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return os.geteuid() == 0
    for line in status.splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> _CAP_DAC_OVERRIDE & 1)
    return os.geteuid() == 0
