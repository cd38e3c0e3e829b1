"""HCCS-aware preferred allocation on 8-chip Ascend 910 servers."""

from __future__ import annotations

from ascend_helpers import open_simulated
from devicehost_ascend.dcmi_sim import SimulatedDcmi
from devicehost_ascend.topology import choose
from hypothesis import given
from hypothesis import strategies as st

from devicehost.testing import FakeRoot

NPU = "huawei.com/Ascend910"
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


def test_best_fit_uses_the_partly_used_group() -> None:
    """With chip 0 busy, 1 or 2 chips come from group 0-3, leaving 4-7 whole."""
    free = [1, 2, 3, 4, 5, 6, 7]
    assert pick(free, 1) == [1]
    assert pick(free, 2) == [1, 2]
    assert pick(free, 3) == [1, 2, 3]


def test_four_chips_take_the_whole_free_group() -> None:
    """4 chips go to the group that is entirely free, not across the two groups."""
    assert pick([1, 2, 3, 4, 5, 6, 7], 4) == [4, 5, 6, 7]


def test_best_fit_prefers_the_fuller_group_from_either_side() -> None:
    """Whichever group has fewer free chips (but enough) is used first."""
    assert pick([0, 1, 2, 3, 6, 7], 2) == [6, 7]
    assert pick([2, 3, 4, 5, 6], 1) == [2]


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


@given(st.sets(st.integers(0, 7), min_size=1), st.data())
def test_choices_are_valid_and_single_group_whenever_possible(
    free: set[int], data: st.DataObject
) -> None:
    """Any request: exactly ``size`` distinct free chips including must_include; and when a
    group (must_include's, if any) has room for the whole request, only that group is used,
    and without must_include it is the fullest group with room (best fit)."""
    size = data.draw(st.integers(1, len(free)))
    must = data.draw(st.lists(st.sampled_from(sorted(free)), max_size=size, unique=True))
    chosen = pick(sorted(free), size, must)
    assert len(chosen) == size == len(set(chosen))
    assert set(must) <= set(chosen) <= free
    room = {g: len([f for f in free if f // 4 == g]) for g in (0, 1)}
    must_groups = {m // 4 for m in must}
    if len(must_groups) == 1:
        fitting = [g for g in must_groups if room[g] >= size]
    else:
        fitting = [] if must_groups else [g for g in room if room[g] >= size]
    if fitting:
        assert {c // 4 for c in chosen} == {min(fitting, key=lambda g: (room[g], g))}


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


def test_group_size_zero_turns_hccs_packing_off(fake_root: FakeRoot) -> None:
    """hccsGroupSize 0 (full-mesh servers): the host's default applies."""
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
