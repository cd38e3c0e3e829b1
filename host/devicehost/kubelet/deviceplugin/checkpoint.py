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
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

CHECKPOINT_FILE = "kubelet_internal_checkpoint"
#: A node's checkpoint is a few kB per pod with devices; past this it is not read.
MAX_CHECKPOINT_BYTES = 16 * 1024 * 1024


class DeviceCheckpoint:
    """Reads the kubelet's checkpoint at ``path``, again only when the file changed."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._seen: tuple[int, int, int] | None = None
        self._entries: list[dict[str, Any]] = []

    def _load(self) -> list[dict[str, Any]]:
        try:
            info = os.stat(self.path)
        except OSError:
            self._seen, self._entries = None, []
            return []
        key = (info.st_ino, info.st_mtime_ns, info.st_size)
        if key == self._seen:
            return self._entries
        self._seen, self._entries = key, []
        if info.st_size > MAX_CHECKPOINT_BYTES:
            log.debug("%s is %d bytes; not read for pod UIDs", self.path, info.st_size)
            return []
        try:
            document = json.loads(self.path.read_bytes())
            entries = document["Data"]["PodDeviceEntries"] or []
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.debug("%s is not a device-manager checkpoint (%s)", self.path, exc)
            return []
        if isinstance(entries, list):
            self._entries = [e for e in entries if isinstance(e, dict)]
        return self._entries

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
