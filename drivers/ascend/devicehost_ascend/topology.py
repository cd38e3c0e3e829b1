"""HCCS topology and the choice of chips for one container.

Which servers have rings, from Huawei's own scheduler (github.com/Ascend/mind-cluster,
``component/ascend-for-volcano``; English text in github.com/Ascend/ascend-for-volcano,
``docs/design/affinity910-design.md``, "Affinity Policies"):

- An 8-chip Ascend 910 server (Atlas 800 training server, model 9000; chips named ``910A``
  and kin, matched by ``^910`` without a digit after ``910B``) has two HCCS rings of four,
  physical IDs 0-3 and 4-7. Chips of different rings cannot talk over HCCS, so a job of
  four or fewer chips must get them from one ring, "otherwise the job fails".
- An Ascend 910B server (Atlas 800T A2; chip names ``910B<digit>``, the plugin's
  ``Ascend910BPattern`` in ``ascend-common/api/default_name.go``) is one HCCS full mesh of
  eight: the scheduler's ``module910bx8`` handler has no rings. Nothing to keep together.

The order rings are chosen in is the published priority, for the ring's free chips:
1 chip: a ring with 1 free, then 3, then 2, then 4; 2 chips: 2, then 4, then 3; 4 chips: a
whole free ring; 8: all. It keeps whole rings free for the 4- and 8-chip jobs. (3 chips has
no published order; the same best fit is used: 3, then 4.)
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

#: Published preference among rings by their free chips, per request size.
RING_PRIORITY: Mapping[int, tuple[int, ...]] = {1: (1, 3, 2, 4), 2: (2, 4, 3), 3: (3, 4), 4: (4,)}
#: Chips per ring and chips per server of the ring layout.
RING_SIZE = 4
RING_SERVER_CHIPS = 8

_910B = re.compile(r"^(910B\d|A2G\d)")
_910 = re.compile(r"^910")

RULE = (
    "HCCS rule: on an 8-chip Ascend 910 server a job of 4 or fewer chips must stay within one "
    "HCCS ring (physical IDs 0-3 or 4-7), or HCCL fails "
    "(Ascend ascend-for-volcano, docs/design/affinity910-design.md)"
)


def chip_type(chip_name: str) -> str:
    """``910B3`` → ``Ascend910B``, ``910A`` → ``Ascend910A``; other names unchanged."""
    name = chip_name.strip().upper().removeprefix("ASCEND")
    if _910B.match(name):
        return "Ascend910B"
    if _910.match(name):
        return "Ascend910A"
    return ""


def ring_size(chip_names: Iterable[str]) -> int:
    """Chips per HCCS ring for a node whose Ascend 910 chips have these names; 0: no rings.

    Rings only on a server of exactly eight first-generation 910 chips; a 910B server is a
    full mesh, and single cards (Atlas 300T) have no HCCS between them.
    """
    names = list(chip_names)
    if len(names) == RING_SERVER_CHIPS and all(chip_type(n) == "Ascend910A" for n in names):
        return RING_SIZE
    return 0


def spans_rings(positions: Iterable[int], size: int) -> bool:
    """True when chips at these physical IDs lie in more than one ring of ``size``."""
    return len({p // size for p in positions}) > 1


def _rings(ids: Iterable[str], positions: Mapping[str, int], size: int) -> dict[int, list[str]]:
    rings: dict[int, list[str]] = {}
    for device_id in sorted(ids, key=lambda d: (positions[d], d)):
        rings.setdefault(positions[device_id] // size, []).append(device_id)
    return rings


def choose(
    available: Sequence[str],
    must_include: Sequence[str],
    size: int,
    positions: Mapping[str, int],
    group_size: int,
) -> list[str]:
    """``size`` IDs from ``available``: ``must_include`` first, then whole rings as published.

    ``positions`` maps each ID to its chip's physical ID; the ring is ``phys // group_size``.
    A request of at most one ring's size never spans rings when one ring can hold it; when
    none can, the answer spans the fewest rings (a preference must never fail a pod; with
    ``hccsStrict`` the Allocate then refuses). Fewer than ``size`` IDs come back only when
    there are not enough to choose from.
    """
    chosen = list(dict.fromkeys(must_include))
    free = _rings(set(available) - set(chosen), positions, group_size)
    touched = {positions[d] // group_size for d in chosen}
    wanted = size - len(chosen)
    if wanted <= 0:
        return chosen[:size]
    if size <= group_size:
        ring = _ring_for(free, touched, size, wanted)
        if ring is not None:
            return chosen + free[ring][:wanted]
    # More than a ring, or no single ring holds the request: fill touched rings first,
    # then the rings with most free chips, so as few rings as possible are crossed.
    order = sorted(free, key=lambda r: (r not in touched, -len(free[r]), r))
    for ring in order:
        take = free[ring][:wanted]
        chosen.extend(take)
        wanted -= len(take)
        if wanted == 0:
            break
    return chosen


def _ring_for(
    free: Mapping[int, list[str]], touched: set[int], size: int, wanted: int
) -> int | None:
    """The ring to draw ``wanted`` chips from for a request of ``size``, or None."""
    if len(touched) > 1:
        return None  # must_include already spans rings
    if touched:
        (ring,) = touched
        return ring if len(free.get(ring, ())) >= wanted else None
    priority = RING_PRIORITY.get(size, tuple(range(size, RING_SIZE + 1)))
    fitting = [r for r, ids in free.items() if len(ids) >= wanted]
    if not fitting:
        return None

    def rank(ring: int) -> tuple[int, int]:
        count = len(free[ring])
        place = priority.index(count) if count in priority else len(priority) + count
        return place, ring

    return min(fitting, key=rank)
