"""Node feature labels for the GPUs found, in the project's shared vocabulary.

``firmware-version`` is the first GPU's VBIOS (``nvmlDeviceGetVbiosVersion``, go-nvml
``gen/nvml/nvml.h``), the GPU's firmware as ``nvidia-smi -q`` shows it. The values follow
NVIDIA's GPU feature discovery where it has one: the product name with
spaces as ``-`` and the architecture family from the CUDA compute capability
(k8s-device-plugin ``internal/lm/resource.go``, ``getArchFamily``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from devicehost_nvidia.discovery import Discovery
from devicehost_nvidia.topology import Topology

#: CUDA compute capability major → family (minor splits volta/turing and ampere/ada).
_FAMILIES = {1: "tesla", 2: "fermi", 3: "kepler", 5: "maxwell", 6: "pascal", 9: "hopper"}


def family(major: int, minor: int) -> str:
    if major == 7:
        return "volta" if minor < 5 else "turing"
    if major == 8:
        return "ampere" if minor < 9 else "ada-lovelace"
    if major in (10, 12):
        return "blackwell"
    if major == 13:
        return "rubin"
    return _FAMILIES.get(major, "undefined")


def _value(text: str) -> str:
    """A label value: [A-Za-z0-9._-], at most 63 characters."""
    return re.sub(r"[^A-Za-z0-9._-]", "-", text.strip())[:63].strip("-._") or "unknown"


def gpu_labels(found: Discovery, topology: Topology) -> Mapping[str, str]:
    """Labels describing the node's GPUs (the first GPU's model when they differ) and
    how they are joined (``interconnect``, the key the Ascend driver uses for HCCS)."""
    if not found.gpus:
        return {}
    first = found.gpus[0]
    labels = {
        "present": "true",
        "count": str(len(found.gpus)),
        "interconnect": topology.interconnect,
        "product": _value(first.name),
        "memory-mib": str(first.memory_bytes // (1024 * 1024)),
        "driver-version": _value(found.driver_version),
        "mig-capable": "true" if any(g.mig_capable for g in found.gpus) else "false",
    }
    if first.compute_capability is not None:
        major, minor = first.compute_capability
        labels["family"] = family(major, minor)
        labels["compute-capability"] = f"{major}.{minor}"
    if first.vbios_version:
        labels["firmware-version"] = _value(first.vbios_version)
    if found.cuda_driver_version:
        version = found.cuda_driver_version
        labels["cuda-driver-version"] = f"{version // 1000}.{version % 1000 // 10}"
    return labels
