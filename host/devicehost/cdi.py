"""Write Container Device Interface (CDI) spec files for a driver's devices.

A runtime with CDI enabled (containerd, CRI-O) turns ``cdi_devices`` names in an
AllocateResponse into container edits by reading these files. Drivers describe each
device with the same ``Allocation`` they return from ``devicehost_allocate``; this module
turns it into a spec and writes it atomically (a reader never sees half a file), and only
when the content changed.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from devicehost.model import Allocation

CDI_VERSION = "0.6.0"
DEFAULT_CDI_DIR = Path("/var/run/cdi")


def container_edits(allocation: Allocation) -> dict[str, Any]:
    """The CDI ``containerEdits`` equivalent to an Allocation (envs, device nodes, mounts)."""
    edits: dict[str, Any] = {}
    if allocation.envs:
        edits["env"] = [f"{k}={v}" for k, v in sorted(allocation.envs.items())]
    if allocation.devices:
        edits["deviceNodes"] = [
            {"path": d.container_path, "hostPath": d.host_path, "permissions": d.permissions}
            for d in allocation.devices
        ]
    if allocation.mounts:
        edits["mounts"] = [
            {
                "hostPath": m.host_path,
                "containerPath": m.container_path,
                "options": ["ro", "nosuid", "nodev", "bind"]
                if m.read_only
                else ["nosuid", "nodev", "bind"],
            }
            for m in allocation.mounts
        ]
    return edits


def cdi_name(kind: str, device: str) -> str:
    """The fully qualified CDI device name: ``vendor.com/class=device``."""
    return f"{kind}={device}"


def build_spec(
    kind: str, devices: Mapping[str, Allocation], common: Allocation | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "cdiVersion": CDI_VERSION,
        "kind": kind,
        "devices": [
            {"name": name, "containerEdits": container_edits(allocation)}
            for name, allocation in devices.items()
        ],
    }
    if common is not None:
        spec["containerEdits"] = container_edits(common)
    return spec


def write_spec(
    directory: Path, kind: str, devices: Mapping[str, Allocation], common: Allocation | None = None
) -> Path:
    """Write (or refresh) ``<directory>/devicehost-<vendor>-<class>.json``; return its path.

    The file is replaced atomically and left alone when its content is unchanged.
    """
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / ("devicehost-" + kind.replace("/", "-") + ".json")
    text = json.dumps(build_spec(kind, devices, common), indent=2) + "\n"
    try:
        if path.read_text() == text:
            return path
    except OSError:
        pass
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".json")
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    return path
