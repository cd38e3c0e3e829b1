"""HCCS rings on 8-chip Ascend 910 servers: the published priority, detection by chip
name, and the strict refusal."""

from __future__ import annotations

import pytest
from ascend_helpers import open_simulated
from devicehost_ascend.dcmi_sim import SimulatedDcmi
from devicehost_ascend.node import HccsViolation
from devicehost_ascend.topology import choose, ring_size
from hypothesis import given
from hypothesis import strategies as st

from devicehost.testing import FakeRoot

NPU = "huawei.com/Ascend910"


def published(node: str) -> SimulatedDcmi:
    sim = SimulatedDcmi.published(node)
    assert sim is not None
    return sim


ALL = [f"Ascend910-{i}" for i in range(8)]
POSITIONS = {f"Ascend910-{i}": i for i in range(8)}


def pick(free: list[int], size: int, must: list[int] | None = None) -> list[int]:
    chosen = choose(
        [f"Ascend910-{i}" for i in free], [f"Ascend910-{i}" for i in must or []], size, POSITIONS, 4
    )
    return [POSITIONS[c] for c in chosen]


def test_small_requests_stay_inside_one_group() -> None:
    """On an idle server, 1, 2 and 4 chips come from a single group of four."""
    for size in (1, 2, 4):
        assert pick(list(range(8)), size) == list(range(size))


def test_one_chip_prefers_a_ring_with_1_then_3_then_2_then_4_free() -> None:
    """The published order for 1 chip, whichever side each ring is on."""
    assert pick([3, 4, 5, 6, 7], 1) == [3]  # rings free: 1 and 4
    assert pick([2, 3, 4, 5, 6], 1) == [4]  # 2 and 3
    assert pick([2, 3, 4, 5, 6, 7], 1) == [2]  # 2 and 4
    assert pick(list(range(8)), 1) == [0]  # 4 and 4


def test_two_chips_prefer_a_ring_with_2_then_4_then_3_free() -> None:
    """The published order for 2 chips: 2 free, then 4, then 3 (a whole ring before a
    ring of 3, unlike a best fit)."""
    assert pick([0, 1, 2, 3, 6, 7], 2) == [6, 7]  # 4 and 2
    assert pick([1, 2, 3, 4, 5, 6, 7], 2) == [4, 5]  # 3 and 4
    assert pick([1, 2, 3, 5, 6, 7], 2) == [1, 2]  # 3 and 3


def test_four_chips_take_the_whole_free_group() -> None:
    """4 chips go to the group that is entirely free, not across the two groups."""
    assert pick([1, 2, 3, 4, 5, 6, 7], 4) == [4, 5, 6, 7]


def test_eight_takes_all() -> None:
    """A request for eight chips gets all eight."""
    assert sorted(pick(list(range(8)), 8)) == list(range(8))


def test_must_include_is_honoured_and_its_group_filled_first() -> None:
    """must_include chips are always chosen, and the rest comes from their group."""
    assert pick(list(range(8)), 2, must=[6]) == [6, 4]
    assert pick(list(range(8)), 4, must=[5]) == [5, 4, 6, 7]


def test_when_no_group_has_room_the_fewest_groups_are_spanned() -> None:
    """Fragmented: 3 chips with 2 free per group use one group fully, then the other."""
    assert pick([0, 1, 4, 5], 3) == [0, 1, 4]


PRIORITY = {1: [1, 3, 2, 4], 2: [2, 4, 3], 3: [3, 4], 4: [4]}


@given(st.sets(st.integers(0, 7), min_size=1), st.data())
def test_choices_are_valid_and_stay_in_one_ring_whenever_possible(
    free: set[int], data: st.DataObject
) -> None:
    """Any request: exactly ``size`` distinct free chips including must_include; a request
    of at most 4 that one ring (must_include's, if any) can hold never spans rings, and
    without must_include the ring is the first in the published order."""
    size = data.draw(st.integers(1, len(free)))
    must = data.draw(st.lists(st.sampled_from(sorted(free)), max_size=size, unique=True))
    chosen = pick(sorted(free), size, must)
    assert len(chosen) == size == len(set(chosen))
    assert set(must) <= set(chosen) <= free
    if size > 4:
        return
    room = {g: len([f for f in free if f // 4 == g]) for g in (0, 1)}
    must_groups = {m // 4 for m in must}
    if len(must_groups) == 1:
        fitting = [g for g in must_groups if room[g] >= size]
    else:
        fitting = [] if must_groups else [g for g in room if room[g] >= size]
    if fitting:
        best = min(fitting, key=lambda g: (PRIORITY[size].index(room[g]), g))
        assert {c // 4 for c in chosen} == {best}


def test_node_applies_hccs_to_whole_910_chips(fake_root: FakeRoot) -> None:
    """The driver's preferred allocation for Ascend910 is the HCCS choice."""
    node = open_simulated(fake_root, SimulatedDcmi.preset("ascend910x8"))
    assert node.preferred(NPU, ALL[1:], [], 4) == ALL[4:]


def test_other_resources_use_the_host_default(fake_root: FakeRoot) -> None:
    """310P chips and vNPUs have no HCCS groups: None lets the host pack by NUMA."""
    node = open_simulated(fake_root, SimulatedDcmi.preset("mixed"))
    assert node.preferred("huawei.com/Ascend310P", ["Ascend310P-4", "Ascend310P-5"], [], 1) is None
    other_node = FakeRoot(fake_root.path.parent / "vnpu-node")
    vnpus = open_simulated(other_node, SimulatedDcmi.preset("ascend910x8-vnpu"))
    ids = [d.id for d in vnpus.enumerate("huawei.com/Ascend910-4c")]
    assert vnpus.preferred("huawei.com/Ascend910-4c", ids, [], 2) is None


def test_a_910b_server_is_a_full_mesh(fake_root: FakeRoot) -> None:
    """Atlas 800T A2 (eight 910B3): no rings, so no ring packing; the host's NUMA default
    chooses (before, every 8-chip 910-family node was split into groups of four)."""
    node = open_simulated(fake_root, published("atlas-800t-a2"))
    assert node.ring_size == 0
    assert node.preferred(NPU, ALL, [], 2) is None


def test_rings_come_from_the_chip_names() -> None:
    """Eight first-generation 910 chips: rings of 4; 910B, fewer chips or no names: none."""
    assert ring_size(["910A"] * 8) == 4
    assert ring_size(["910ProB"] * 8) == 4
    assert ring_size(["910B3"] * 8) == 0
    assert ring_size(["910A"] * 4) == 0
    assert ring_size([]) == 0


def test_strict_refuses_a_small_job_across_rings(fake_root: FakeRoot) -> None:
    """hccsStrict: 2 chips from rings 0 and 1 are refused naming the rule; within a ring,
    or 8 chips, pass; without hccsStrict everything passes."""
    strict = open_simulated(fake_root, SimulatedDcmi.preset("ascend910x8"), hccsStrict=True)
    with pytest.raises(HccsViolation, match=r"^HCCS rule: .* must stay within one HCCS ring"):
        strict.check_allocation(NPU, ["Ascend910-3", "Ascend910-4"])
    strict.check_allocation(NPU, ["Ascend910-4", "Ascend910-5"])
    strict.check_allocation(NPU, ALL)
    other = FakeRoot(fake_root.path.parent / "lenient")
    lenient = open_simulated(other, SimulatedDcmi.preset("ascend910x8"))
    lenient.check_allocation(NPU, ["Ascend910-3", "Ascend910-4"])


def test_group_size_zero_turns_hccs_packing_off(fake_root: FakeRoot) -> None:
    """hccsGroupSize 0: no rings, whatever the chips; the host's default applies."""
    node = open_simulated(fake_root, SimulatedDcmi.preset("ascend910x8"), hccsGroupSize=0)
    assert node.preferred(NPU, ALL, [], 2) is None


def test_unknown_ids_leave_the_choice_to_the_host(fake_root: FakeRoot) -> None:
    """IDs the driver does not know: no guess, the host decides."""
    node = open_simulated(fake_root, SimulatedDcmi.preset("ascend910x8"))
    assert node.preferred(NPU, [*ALL, "Ascend910-9"], [], 2) is None


def test_impossible_requests_leave_the_choice_to_the_host(fake_root: FakeRoot) -> None:
    """More must_include than size, or fewer chips than asked: None, never a wrong answer."""
    node = open_simulated(fake_root, SimulatedDcmi.preset("ascend910x8"))
    assert node.preferred(NPU, ALL[:2], ALL[:2], 1) is None
    assert node.preferred(NPU, ALL[:2], [], 3) is None
