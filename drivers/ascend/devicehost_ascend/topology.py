"""HCCS-aware choice of chips for one container.

On an 8-chip Ascend 910 server the chips form two HCCS groups of four (physical IDs 0-3
and 4-7); traffic between the groups crosses PCIe. So a request is packed into as few
groups as possible, and among groups that can hold it the fullest one is used first
(best fit): the remaining whole groups stay free for the 4- and 8-chip jobs that need
them. ``must_include`` is always honoured; its groups are filled before any other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def _pick(groups: Mapping[int, list[str]], wanted: int) -> int:
    """The group to draw from next: the smallest that holds ``wanted``, else the largest."""
    fitting = [g for g, free in groups.items() if len(free) >= wanted]
    if fitting:
        return min(fitting, key=lambda g: (len(groups[g]), g))
    return max(groups, key=lambda g: (len(groups[g]), -g))


def choose(
    available: Sequence[str],
    must_include: Sequence[str],
    size: int,
    positions: Mapping[str, int],
    group_size: int,
) -> list[str]:
    """``size`` IDs from ``available``: ``must_include`` first, then best-fit HCCS groups.

    ``positions`` maps each ID to its chip's physical ID; the group is ``phys // group_size``.
    Fewer than ``size`` IDs come back only when there are not enough to choose from.
    """
    chosen = list(dict.fromkeys(must_include))
    taken = set(chosen)
    groups: dict[int, list[str]] = {}
    for device_id in sorted(set(available) - taken, key=lambda d: (positions[d], d)):
        groups.setdefault(positions[device_id] // group_size, []).append(device_id)
    touched = {positions[d] // group_size for d in chosen}
    while len(chosen) < size:
        wanted = size - len(chosen)
        open_touched = {g: groups[g] for g in touched if groups.get(g)}
        candidates = open_touched or {g: free for g, free in groups.items() if free}
        if not candidates:
            break
        group = _pick(candidates, wanted)
        chosen.extend(groups[group][:wanted])
        groups[group] = groups[group][wanted:]
        touched.add(group)
    return chosen
