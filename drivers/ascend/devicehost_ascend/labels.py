"""The node's NPUs as node feature labels, in the keys every devicehost driver shares.

``driver-version`` and ``firmware-version`` come from the ``Version=`` line of the driver
and firmware packages' ``version.info`` files (``/usr/local/Ascend/driver/version.info``,
``/usr/local/Ascend/firmware/version.info``), which Huawei's installers write and CANN
reads; chip names and memory come from DCMI.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from devicehost_ascend.inventory import Inventory, chip_family
from devicehost_ascend.topology import chip_type

DRIVER_VERSION_FILE = "/usr/local/Ascend/driver/version.info"
FIRMWARE_VERSION_FILE = "/usr/local/Ascend/firmware/version.info"
_VALUE = re.compile(r"[^A-Za-z0-9._-]")


def _clean(value: str) -> str:
    """A label value: the characters labels allow, at most 63."""
    return _VALUE.sub("-", value.strip())[:63].strip("-._")


def read_version(root: Path, path: str) -> str:
    """The ``Version=`` value of a version.info file under root; "" when absent."""
    try:
        text = (root / path.lstrip("/")).read_text(errors="replace")
    except OSError:
        return ""
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key.strip().lower() == "version":
            return _clean(value)
    return ""


def _chip_type(name: str) -> str:
    """``910B3`` → ``Ascend910B``, ``910A`` → ``Ascend910A``, ``310P3`` → ``Ascend310P``."""
    return chip_type(name) or chip_family(name) or name


def node_labels(found: Inventory, root: Path, ring_size: int) -> dict[str, str]:
    """``present``, ``count`` (chips), ``family``, ``chip-type``, ``product`` (the chip
    name), ``memory-mib``, ``vnpu-count``, ``interconnect``, ``driver-version``,
    ``firmware-version``; keys whose value is unknown are left out.

    ``family`` is the chip generation (``910A``, ``910B``, ``310P``), as the shared
    vocabulary has it (NVIDIA's is ``hopper``): what tells a 910B mesh from a 910 server
    with rings. Without DCMI's chip names it is the resource family's (``910``)."""
    devices = found.all()
    if not devices:
        return {}
    chips = {d.phys_id for d in devices if d.phys_id is not None} or {
        d.visible_id for d in devices if not d.virtual
    }
    names = Counter(found.chip_names.values())
    generations = {_chip_type(n) for n in names} or {d.family for d in devices}
    labels = {
        "present": "true",
        "count": str(len(chips)),
        "family": _clean(".".join(sorted(g.removeprefix("Ascend") for g in generations))),
        "vnpu-count": str(sum(d.virtual for d in devices)),
    }
    if names:
        name = names.most_common(1)[0][0]
        labels["product"] = _clean(f"Ascend{name}")
        labels["chip-type"] = _clean(_chip_type(name))
    if found.memory_mib:
        labels["memory-mib"] = str(min(found.memory_mib.values()))
    if any(d.family == "Ascend910" for d in devices) and found.chip_names:
        # Named as the NVIDIA driver's interconnect label (nvswitch, nvlink, pcie).
        labels["interconnect"] = f"hccs-ring-{ring_size}" if ring_size else "hccs-mesh"
    for key, path in (
        ("driver-version", DRIVER_VERSION_FILE),
        ("firmware-version", FIRMWARE_VERSION_FILE),
    ):
        version = read_version(root, path)
        if version:
            labels[key] = version
    return labels
