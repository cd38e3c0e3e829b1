"""Topology-aware choice of several exclusive HCAs: one NUMA node, one PCIe switch.

Each HCA has a *locality path*: its NUMA node, then the directories of its resolved
``/sys/devices`` path down to its parent bridge (``pci0000:4a`` → root port → switch
upstream port → downstream port). Two HCAs are close when their paths share a long
prefix: same parent bridge (the two functions of one card, a PF and its VFs), then the
same switch, then the same root complex, then the same NUMA node.

The choice walks that tree from the top, always best-fit: the groups holding
``must_include`` first, then the smallest group that can take all that is still needed
(keeping larger groups whole for larger requests), else the largest groups whole. So a
request that fits under one switch stays under one switch, and one that fits in one NUMA
node stays in one NUMA node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from devicehost import natural_key
from devicehost_rdma.hca import Hca

UNKNOWN_NUMA = "numa-unknown"


def locality(hca: Hca) -> tuple[str, ...]:
    """The HCA's place in the tree: NUMA node first, then its PCIe ancestry."""
    numa = UNKNOWN_NUMA if hca.numa_node is None else f"numa-{hca.numa_node}"
    return (numa, *hca.pci_path)


@dataclass
class _Group:
    """A subtree: every candidate ID under it, its child subtrees, IDs ending here."""

    ids: list[str] = field(default_factory=list)
    children: dict[str, _Group] = field(default_factory=dict)
    leaves: list[str] = field(default_factory=list)

    def units(self) -> list[_Group]:
        """What this group splits into: child subtrees and single IDs, in natural order."""
        units = list(self.children.values()) + [_Group(ids=[i], leaves=[i]) for i in self.leaves]
        return sorted(units, key=lambda u: natural_key(u.ids[0]))


def _tree(paths: Mapping[str, tuple[str, ...]], candidates: Sequence[str]) -> _Group:
    root = _Group()
    for device_id in sorted(candidates, key=natural_key):
        node = root
        node.ids.append(device_id)
        for part in paths.get(device_id, (UNKNOWN_NUMA,)):
            node = node.children.setdefault(part, _Group())
            node.ids.append(device_id)
        node.leaves.append(device_id)
    return root


def _fill(group: _Group, need: int, must: set[str]) -> list[str]:
    """``need`` IDs from ``group``, every one of ``must`` (all under ``group``) included."""
    if need <= 0:
        return []
    if need >= len(group.ids):
        return list(group.ids)
    chosen: list[str] = []
    units = group.units()
    with_must = sorted(
        (u for u in units if must & set(u.ids)), key=lambda u: -len(must & set(u.ids))
    )
    still_needed = set(must)
    for unit in with_must:
        mine = must & set(unit.ids)
        still_needed -= mine
        room = need - len(chosen) - len(still_needed)
        take = max(len(mine), min(len(unit.ids), room))
        chosen += _fill(unit, take, mine)
    rest = [u for u in units if not must & set(u.ids)]
    while len(chosen) < need and rest:
        left = need - len(chosen)
        fitting = [u for u in rest if len(u.ids) >= left]
        if fitting:
            best = min(fitting, key=lambda u: len(u.ids))
            chosen += _fill(best, left, set())
            break
        largest = max(rest, key=lambda u: len(u.ids))
        rest.remove(largest)
        chosen += largest.ids
    return chosen


def preferred(
    paths: Mapping[str, tuple[str, ...]],
    available: Sequence[str],
    must_include: Sequence[str],
    size: int,
) -> list[str]:
    """``size`` IDs from ``available`` (all of ``must_include``), packed as tightly as
    the locality ``paths`` allow; IDs without a path count as one unknown NUMA node."""
    must = list(dict.fromkeys(must_include))
    if len(must) >= size:
        return must[:size]
    candidates = list(dict.fromkeys([*must, *available]))
    chosen = _fill(_tree(paths, candidates), size, set(must))
    return sorted(chosen, key=natural_key)
