"""The kubelet's device-manager checkpoint, written as the kubelet writes it.

After each Allocate the kubelet records which pod (by UID) and container got which devices
in ``kubelet_internal_checkpoint`` in the device-plugin directory, replacing the file
whole (a temporary file renamed over it). The layout follows kubernetes
``pkg/kubelet/cm/devicemanager/checkpoint/checkpoint.go``: ``Data.PodDeviceEntries`` with
``PodUID``, ``ContainerName``, ``ResourceName``, ``DeviceIDs`` (IDs by NUMA node, ``-1``
without topology) and ``AllocResp`` (the container's answer, protobuf in base64), and
``Data.RegisteredDevices`` (healthy IDs by resource).

One difference: ``Checksum`` is 0, not the kubelet's FNV-32a over a Go ``spew`` dump of
``Data``, which only Go reproduces; a kubelet would refuse this file, devicehost does not
check the sum (``devicehost.kubelet.deviceplugin.checkpoint``).
"""

from __future__ import annotations

import base64
import json
import os
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from devicehost.model import Device

#: The file's name in the device-plugin directory (devicemanager's
#: ``kubeletDeviceManagerCheckpoint``); the host reads it by the same name.
CHECKPOINT_FILE = "kubelet_internal_checkpoint"
#: The kubelet's key for devices without NUMA topology (devicemanager ``nodeWithoutTopology``).
NO_TOPOLOGY = -1


class CheckpointWriter:
    """Keeps the entries of one stand-in kubelet and rewrites the file on each change."""

    def __init__(self, plugin_dir: Path) -> None:
        self.path = plugin_dir / CHECKPOINT_FILE
        self._entries: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def allocated(
        self,
        pod_uid: str,
        container: str,
        resource: str,
        devices: Mapping[str, Device],
        device_ids: Sequence[str],
        answer: bytes,
        registered: Mapping[str, Sequence[str]],
    ) -> None:
        """Record that ``container`` of pod ``pod_uid`` got ``device_ids`` (``devices``:
        the latest list, for their NUMA nodes) with ``answer`` (its serialized
        ContainerAllocateResponse); rewrite the file."""
        per_numa: dict[str, list[str]] = {}
        for device_id in device_ids:
            device = devices.get(device_id)
            nodes = device.numa_nodes if device is not None and device.numa_nodes else ()
            for node in nodes or (NO_TOPOLOGY,):
                per_numa.setdefault(str(node), []).append(device_id)
        entry = {
            "PodUID": pod_uid,
            "ContainerName": container,
            "ResourceName": resource,
            "DeviceIDs": per_numa,
            "AllocResp": base64.b64encode(answer).decode(),
        }
        with self._lock:
            self._entries = [
                e
                for e in self._entries
                if (e["PodUID"], e["ContainerName"], e["ResourceName"])
                != (pod_uid, container, resource)
            ] + [entry]
            self._write(registered)

    def forget(self, pod_uid: str, registered: Mapping[str, Sequence[str]]) -> None:
        """Drop a pod's entries, as the kubelet does once the pod is gone."""
        with self._lock:
            self._entries = [e for e in self._entries if e["PodUID"] != pod_uid]
            self._write(registered)

    def _write(self, registered: Mapping[str, Sequence[str]]) -> None:
        document = {
            "Data": {
                "PodDeviceEntries": self._entries,
                "RegisteredDevices": {r: list(ids) for r, ids in registered.items()},
            },
            "Checksum": 0,
        }
        fd, temporary = tempfile.mkstemp(prefix=".", dir=self.path.parent)
        with os.fdopen(fd, "w") as out:
            json.dump(document, out)
        os.replace(temporary, self.path)
