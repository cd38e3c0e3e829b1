"""The UID of the pod behind some devices — from the kubelet's device-manager checkpoint.

PodResources names the pod, its namespace and the container, but not the pod's UID, which
is what the kubelet's own spans are searched by (``k8s.pod.uid``). The kubelet's device
manager keeps every allocation in ``kubelet_internal_checkpoint`` in the device-plugin
directory, which devicehost mounts already, and which the kubelet keeps when it clears the
directory's sockets. The format (kubernetes ``pkg/kubelet/cm/devicemanager/checkpoint/
checkpoint.go``, the current ``Data`` type)::

    {"Data": {"PodDeviceEntries": [{"PodUID": "…", "ContainerName": "…",
                                    "ResourceName": "…", "DeviceIDs": {"<NUMA node>": ["…"]},
                                    "AllocResp": "<base64 ContainerAllocateResponse>"}],
              "RegisteredDevices": {"<resource>": ["…"]}},
     "Checksum": 123, "BootID": "…"}

``DeviceIDs`` is keyed by NUMA node, ``-1`` for devices without topology
(``nodeWithoutTopology`` in ``devicemanager/manager.go``). The kubelet rewrites the file
after every allocation (``writeCheckpoint``), through its checkpoint manager's file store,
which writes a temporary file and renames it, so a read never sees half a file.

The checksum is not verified: it is FNV-32a over a Go ``spew`` dump of ``Data``
(``pkg/kubelet/checkpointmanager/checksum``), which only Go reproduces. Nothing here acts
on the file beyond a span attribute, and an entry is believed only when it is the one
entry for the container holding those devices: any doubt leaves the UID out.

The file sits in a directory every device plugin of the node may write, so it is read as
untrusted input: opened without following a symlink and without blocking (a FIFO), read
only when the open descriptor is a regular file, never more than ``MAX_CHECKPOINT_BYTES``
(JSON of tiny objects parses to ~25 times its size: 2 MiB of ``{}`` entries peaked at
50 MiB), parsed by one caller at a time, and any parse failure — deep nesting, bytes that
are not UTF-8 — costs only the UID, with one log line per kind of refusal. Callers on the
event loop read it in a thread (``PodResolver``).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from devicehost.system.node_files import Refused, open_regular, read_at_most

log = logging.getLogger(__name__)

CHECKPOINT_FILE = "kubelet_internal_checkpoint"
#: A node's checkpoint is a few kB per pod with devices (110 pods of 8 containers with
#: 2 kB answers: 1.7 MB); past this it is not read.
MAX_CHECKPOINT_BYTES = 2 * 1024 * 1024


class DeviceCheckpoint:
    """Reads the kubelet's checkpoint at ``path``, again only when the file changed; safe
    to call from several threads (one reads, the others wait for its result)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._seen: tuple[int, int, int] | None = None
        self._entries: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._refusals: set[str] = set()

    def _load(self) -> list[dict[str, Any]]:
        with self._lock:
            try:
                with open_regular(self.path) as (fd, info):
                    return self._read(fd, info)
            except FileNotFoundError:
                self._seen, self._entries = None, []
            except Refused as exc:
                self._seen, self._entries = None, []
                self._refuse(str(exc))
            return []

    def _read(self, fd: int, info: os.stat_result) -> list[dict[str, Any]]:
        key = (info.st_ino, info.st_mtime_ns, info.st_size)
        if key == self._seen:
            return self._entries
        self._seen, self._entries = key, []
        try:
            entries = json.loads(read_at_most(fd, MAX_CHECKPOINT_BYTES))["Data"]
            entries = entries["PodDeviceEntries"] or []
        except Refused as exc:  # this version of the file stays refused: not read again
            self._refuse(str(exc))
            return []
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            self._refuse(f"is not a device-manager checkpoint ({type(exc).__name__})")
            return []
        if isinstance(entries, list):
            self._entries = [e for e in entries if isinstance(e, dict)]
        return self._entries

    def _refuse(self, why: str) -> None:
        """Say once per kind of refusal that the file is not read (spans lose the UID)."""
        if why not in self._refusals:
            self._refusals.add(why)
            log.warning("%s %s; not read: spans carry no pod UID from it", self.path, why)

    def pod_uid(self, resource: str, container: str, device_ids: Sequence[str]) -> str | None:
        """The UID of the pod whose ``container`` holds every one of ``device_ids`` of
        ``resource``; None when no entry, or more than one pod, says so."""
        wanted = set(device_ids)
        found = set()
        for entry in self._load():
            if entry.get("ResourceName") != resource or entry.get("ContainerName") != container:
                continue
            if wanted <= _device_ids(entry.get("DeviceIDs")):
                uid = entry.get("PodUID")
                if isinstance(uid, str) and uid:
                    found.add(uid)
        return found.pop() if len(found) == 1 else None


def _device_ids(per_numa: Any) -> set[str]:
    """Every ID of a ``DeviceIDs`` field (a map of NUMA node to IDs)."""
    if not isinstance(per_numa, dict):
        return set()
    return {i for ids in per_numa.values() if isinstance(ids, list) for i in ids}
