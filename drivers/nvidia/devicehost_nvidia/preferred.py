"""Which devices to give a container when the kubelet asks for a preference.

- Whole GPUs: the set with the most NVLink links among its members, then the closest
  PCIe paths, then the fewest NUMA nodes; ties go to the choice that leaves the fewest
  NVLink links dangling to GPUs still free (so a lone GPU comes from a broken pair and
  whole pairs stay together), then to advertising order. Small nodes are searched
  exhaustively, large ones greedily.
- Time-sliced replicas: ``distributed`` spreads a request over different GPUs, least used
  first; ``packed`` fills the most used GPU first. ``must_include`` is always kept.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Callable, Sequence

from devicehost_nvidia.topology import Topology

#: Above this many candidate sets, GPUs are added one at a time (greedily) instead.
MAX_COMBINATIONS = 5_000


def choose_gpus(
    available: Sequence[str],
    must_include: Sequence[str],
    size: int,
    gpu_of: Callable[[str], str],
    order: Callable[[str], int],
    topology: Topology,
) -> list[str]:
    """``size`` IDs from ``available`` (each a whole GPU), ``must_include`` among them."""
    must = list(dict.fromkeys(must_include))
    free = sorted(set(available) - set(must), key=order)
    need = size - len(must)
    if need <= 0:
        return must

    def rank(chosen: Sequence[str]) -> tuple[int, ...]:
        members = {gpu_of(i) for i in chosen}
        rest = {gpu_of(i) for i in free} - members
        dangling = sum(topology.nvlinks(a, b) for a in members for b in rest)
        return (*topology.rank(members), dangling)

    if math.comb(len(free), need) <= MAX_COMBINATIONS:
        best = min(itertools.combinations(free, need), key=lambda c: rank(must + list(c)))
        return must + list(best)
    chosen = list(must)
    while len(chosen) < size:
        pick = min((i for i in free if i not in chosen), key=lambda i: rank([*chosen, i]))
        chosen.append(pick)
    return chosen


def choose_replicas(
    available: Sequence[str],
    must_include: Sequence[str],
    size: int,
    unit_of: Callable[[str], str],
    order: Callable[[str], int],
    packed: bool,
) -> list[str]:
    """``size`` replica IDs: spread over units (``packed`` False) or filling one first."""
    chosen = list(dict.fromkeys(must_include))
    taken = Counter(unit_of(i) for i in chosen)
    pools: dict[str, list[str]] = {}
    for device_id in sorted(set(available) - set(chosen), key=order):
        pools.setdefault(unit_of(device_id), []).append(device_id)
    units = list(pools)
    position = {u: n for n, u in enumerate(units)}

    def spread(unit: str) -> tuple[int, int, int]:
        return taken[unit], -len(pools[unit]), position[unit]

    def fill(unit: str) -> tuple[int, int, int]:
        return 0 if taken[unit] else 1, len(pools[unit]), position[unit]

    key = fill if packed else spread
    while len(chosen) < size:
        unit = min((u for u in units if pools[u]), key=key)
        chosen.append(pools[unit].pop(0))
        taken[unit] += 1
    return chosen
