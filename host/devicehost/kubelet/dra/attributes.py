"""What is known about one device, in the attributes and capacities of a ResourceSlice.

``DeviceFacts`` is DRA's view of a device, filled from its snapshot: the attributes the
driver gave (``Device.attributes``, checked by the host) and its NUMA node. The API's rules, from
k8s.io/api v0.37.2 ``resource/v1/types.go``: an attribute is exactly one of int, bool,
string or version; strings and versions at most 64 characters (``DeviceAttributeMaxValue
Length``); a version is SemVer 2.0.0, and one that is not makes the API server refuse the
whole slice; names without a domain are the driver's own. The standard names and formats
come from k8s.io/dynamic-resource-allocation v0.37.2 ``deviceattribute``:
``resource.kubernetes.io/pciBusID`` (``dddd:bb:dd.f``, lower-case hex),
``resource.kubernetes.io/pcieRoot`` (the first directory under ``/sys/devices`` of the
device's sysfs path, ``pci0000:00``) and ``resource.kubernetes.io/numaNode`` (an int; left
out for a device without NUMA affinity).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from devicehost.model import NO_ATTRIBUTES, Device, DeviceAttributes
from devicehost.sysfs import pcie_root as pcie_root

STANDARD = "resource.kubernetes.io/"
PCI_BUS_ID = STANDARD + "pciBusID"
PCIE_ROOT = STANDARD + "pcieRoot"
NUMA_NODE = STANDARD + "numaNode"
#: The extended resource a device belongs to (``nvidia.com/gpu``): what a DeviceClass with
#: ``extendedResourceName`` selects on, so a pod asking for the resource by name gets
#: devices of that resource only, never another of the same driver (a MIG slice for a GPU).
RESOURCE = "devicehost.io/resource"
MAX_VALUE_LENGTH = 64

_BDF_RE = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]$")
# semver.org 2.0.0, the regular expression it suggests (numbered groups left out).
_SEMVER_RE = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$"
)


def is_semver(text: str) -> bool:
    """Whether ``text`` is a SemVer 2.0.0 version (``535.104.05`` is not: leading zero)."""
    return len(text) <= MAX_VALUE_LENGTH and _SEMVER_RE.match(text) is not None


@dataclass(frozen=True, kw_only=True, slots=True)
class DeviceFacts:
    """One device as a ResourceSlice describes it: what its driver says of it (checked by
    the host) and its NUMA node. Empty or None: not known, left out."""

    attributes: DeviceAttributes = NO_ATTRIBUTES
    numa_node: int | None = None


def facts_from_snapshot(device: Device) -> DeviceFacts:
    """What the snapshot tells: the attributes the driver gave (checked by the host), and
    the NUMA node when the device has exactly one."""
    numa = device.numa_nodes[0] if len(device.numa_nodes) == 1 else None
    return DeviceFacts(attributes=device.attributes, numa_node=numa)


def _string(value: str) -> dict[str, Any]:
    return {"string": value}


def attributes_and_capacity(
    facts: DeviceFacts, resource: str = ""
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]], list[str]]:
    """The device's ``attributes`` and ``capacity`` as the API spells them (with
    ``resource``, the one it belongs to), and a note for each fact left out because the
    API would refuse it."""
    given = facts.attributes
    attributes: dict[str, dict[str, Any]] = {}
    notes: list[str] = []
    strings = {
        RESOURCE: resource,
        "productName": given.product,
        "model": given.model,
        "chipType": given.chip_type,
        "migProfile": given.mig_profile,
        "interconnectGroup": given.interconnect_group,
    }
    for name, value in strings.items():
        if not value:
            continue
        if len(value) > MAX_VALUE_LENGTH:
            notes.append(f"{name} {value!r:.80} is longer than {MAX_VALUE_LENGTH} characters")
            continue
        attributes[name] = _string(value)
    if given.driver_version:
        if is_semver(given.driver_version):
            attributes["driverVersion"] = {"version": given.driver_version}
        else:
            notes.append(f"driverVersion {given.driver_version!r:.80} is not SemVer 2.0.0")
    if given.pci_address:
        if _BDF_RE.match(given.pci_address):
            attributes[PCI_BUS_ID] = _string(given.pci_address)
        else:
            notes.append(f"PCI address {given.pci_address!r:.80} is not dddd:bb:dd.f")
    if given.pcie_root:
        attributes[PCIE_ROOT] = _string(given.pcie_root)
    if facts.numa_node is not None and facts.numa_node >= 0:
        attributes[NUMA_NODE] = {"int": facts.numa_node}
    capacity: dict[str, dict[str, Any]] = {}
    if given.memory_bytes is not None and given.memory_bytes > 0:
        capacity["memory"] = {"value": str(given.memory_bytes)}
    return attributes, capacity, notes
