"""The host's default GetPreferredAllocation: must-include first, then fewest NUMA nodes.

Drivers with better topology knowledge (NVLink, HCCS, PCIe switches) implement
``devicehost_preferred_allocation``; every other driver gets this.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence

from devicehost.model import Device, natural_key


def numa_map(devices: Iterable[Device]) -> dict[str, int]:
    """Each device's first NUMA node (-1 when unknown); callers cache it per snapshot."""
    return {d.id: d.numa_nodes[0] if d.numa_nodes else -1 for d in devices}


def preferred_allocation(
    numa_of: Mapping[str, int],
    available: Sequence[str],
    must_include: Sequence[str],
    size: int,
) -> list[str]:
    """Choose ``size`` IDs: all of ``must_include``, then pack onto the fewest NUMA nodes.

    The caller has checked that the request is possible. Within that, the NUMA nodes of the
    must-include devices are filled first; then the smallest node that can take the rest
    whole (keeping larger nodes free for larger requests); else the largest nodes first.
    """
    chosen = list(dict.fromkeys(must_include))
    need = size - len(chosen)
    if need <= 0:
        return chosen[:size]
    taken = set(chosen)
    groups: dict[int, list[str]] = {}
    for device_id in available:
        if device_id not in taken:
            groups.setdefault(numa_of.get(device_id, -1), []).append(device_id)
    order: list[int] = []
    for node in dict.fromkeys(numa_of.get(i, -1) for i in chosen):
        if node in groups:
            order.append(node)
    rest = [n for n in groups if n not in order]
    order_need = need - sum(len(groups[n]) for n in order)
    if order_need > 0:
        fitting = sorted(
            (n for n in rest if len(groups[n]) >= order_need), key=lambda n: (len(groups[n]), n)
        )
        if fitting:
            order.append(fitting[0])
        else:
            order.extend(sorted(rest, key=lambda n: (-len(groups[n]), n)))
    for node in order:
        chosen.extend(heapq.nsmallest(size - len(chosen), groups[node], key=natural_key))
        if len(chosen) >= size:
            break
    return chosen
