"""The NVIDIA Container Toolkit's CDI spec: which ``nvidia.com/gpu=<name>`` devices exist.

The toolkit writes a complete spec (device nodes, the driver's libraries and binaries, an
ldcache hook) of kind ``nvidia.com/gpu``: ``nvidia-ctk cdi generate`` (vendor ``nvidia.com``,
class ``gpu``; names by index and by UUID, MIG devices as ``<gpu>:<mig>`` and by MIG UUID,
plus ``all``), run at boot by the ``nvidia-cdi-refresh`` unit into
``/var/run/cdi/nvidia.yaml`` (nvidia-container-toolkit ``cmd/nvidia-ctk/cdi/generate``,
``pkg/nvcdi/namer.go``, ``deployments/systemd/nvidia-cdi-refresh.service``); its README
shows ``/etc/cdi/nvidia.yaml``. This driver never writes that kind (a second definition of
a device makes the runtime's CDI cache drop it); it only reads the specs to name devices
that exist. Specs in the CDI directories are YAML or JSON (JSON is YAML).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

KIND = "nvidia.com/gpu"
DEFAULT_SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")
_SUFFIXES = (".yaml", ".yml", ".json")


@dataclass(frozen=True)
class ToolkitSpec:
    """The device names the toolkit's spec(s) define, and where they were read."""

    names: frozenset[str] = frozenset()
    files: tuple[str, ...] = ()
    problems: tuple[str, ...] = field(default=())

    def qualified(self, name: str) -> str | None:
        return f"{KIND}={name}" if name in self.names else None


def _devices(yaml: Any, path: Path) -> list[str] | None:
    """The device names of a spec of kind ``nvidia.com/gpu`` at ``path``, None for others."""
    data = yaml.safe_load(path.read_text())
    if not isinstance(data, dict) or data.get("kind") != KIND:
        return None
    names = []
    for device in data.get("devices") or []:
        if isinstance(device, dict) and isinstance(device.get("name"), str | int):
            names.append(str(device["name"]))
    return names


def read_toolkit_spec(root: Path, directories: Sequence[str]) -> ToolkitSpec:
    """Every ``nvidia.com/gpu`` device defined in ``directories`` (host paths, read under
    ``root``). A spec that cannot be read is reported, never fatal."""
    names: set[str] = set()
    files: list[str] = []
    problems: list[str] = []
    for directory in directories:
        base = root / directory.lstrip("/")
        try:
            entries = sorted(p for p in base.iterdir() if p.suffix in _SUFFIXES)
        except OSError:
            continue
        if entries:  # imported only when there is a spec to read: a worker's memory
            import yaml
        for path in entries:
            host_path = f"{directory.rstrip('/')}/{path.name}"
            try:
                found = _devices(yaml, path)
            except (OSError, yaml.YAMLError) as exc:
                problems.append(f"{host_path}: {exc}")
                continue
            if found is not None:
                files.append(host_path)
                names.update(found)
    return ToolkitSpec(frozenset(names), tuple(files), tuple(problems))
