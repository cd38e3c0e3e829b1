"""Preferred allocation: several exclusive HCAs kept to one PCIe switch and NUMA node."""

from __future__ import annotations

import pytest
from devicehost_rdma.discovery import discover
from devicehost_rdma.driver import RdmaDriver
from devicehost_rdma.topology import locality, preferred
from hypothesis import given, settings
from hypothesis import strategies as st
from rdma_helpers import IB_HCAS, configured, id_of, shared_pool

from devicehost.testing import FakeRoot


@pytest.fixture
def driver(eight_hca_root: FakeRoot) -> RdmaDriver:
    return configured(eight_hca_root)


def choose(
    driver: RdmaDriver, size: int, available: list[str] = IB_HCAS, must: list[str] | None = None
) -> list[str]:
    """The preferred choice, with IDs (PCI addresses) given and read as RDMA names."""
    to_id = {name: id_of(driver, name) for name in IB_HCAS}
    to_name = {v: k for k, v in to_id.items()}
    result = driver.devicehost_preferred_allocation(
        resource="rdma/hca",
        available=[to_id[n] for n in available],
        must_include=[to_id[n] for n in must or []],
        size=size,
    )
    assert result is not None
    return [to_name[i] for i in result]


def test_two_hcas_come_from_one_pcie_switch(driver: RdmaDriver) -> None:
    """A pair is taken from behind one switch (mlx5_0 and mlx5_1 share 0000:4b:00.0)."""
    assert choose(driver, 2) == ["mlx5_0", "mlx5_1"]


def test_four_hcas_stay_on_one_numa_node(driver: RdmaDriver) -> None:
    """Four HCAs fit in NUMA node 0, so all four come from there."""
    assert choose(driver, 4) == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]


def test_a_taken_hca_moves_the_pair_to_a_whole_switch(driver: RdmaDriver) -> None:
    """With mlx5_1 taken, the pair is the other switch of node 0, not mlx5_0 plus one."""
    available = [i for i in IB_HCAS if i != "mlx5_1"]
    assert choose(driver, 2, available) == ["mlx5_2", "mlx5_3"]


def test_must_include_is_honoured_and_its_neighbours_preferred(driver: RdmaDriver) -> None:
    """must_include mlx5_5 (NUMA 1) is kept, and its partner comes from the same switch."""
    assert choose(driver, 2, must=["mlx5_5"]) == ["mlx5_4", "mlx5_5"]


def test_vfs_beside_their_pf_are_closest(driver: RdmaDriver) -> None:
    """Three with must_include mlx5_4: its two VFs, which sit behind the same port."""
    assert choose(driver, 3, must=["mlx5_4"]) == ["mlx5_4", "mlx5_8", "mlx5_9"]


def test_request_larger_than_a_node_spans_the_fewest(driver: RdmaDriver) -> None:
    """Five: a whole NUMA node plus one HCA that splits no group of the other node."""
    chosen = choose(driver, 5)
    assert chosen[:4] == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    assert chosen[4] == "mlx5_5"


def test_shared_pool_leaves_the_choice_to_the_host(eight_hca_root: FakeRoot) -> None:
    """Slots are interchangeable: the driver answers None (the host's default)."""
    driver = configured(eight_hca_root, {"pools": [shared_pool(slots=4)]})
    assert (
        driver.devicehost_preferred_allocation(
            resource="rdma/hca_shared", available=["slot-0", "slot-1"], must_include=[], size=1
        )
        is None
    )


@pytest.fixture(scope="module")
def paths(eight_hca_root: FakeRoot) -> dict[str, tuple[str, ...]]:
    return {h.name: locality(h) for h in discover(eight_hca_root.path)}


ids = st.lists(st.sampled_from([f"mlx5_{i}" for i in range(10)]), min_size=1, unique=True)


@settings(max_examples=100, deadline=None)
@given(available=ids, data=st.data())
def test_choice_is_always_valid(
    paths: dict[str, tuple[str, ...]], available: list[str], data: st.DataObject
) -> None:
    """Any request gets exactly size distinct available IDs including every must_include."""
    size = data.draw(st.integers(1, len(available)))
    must = data.draw(st.lists(st.sampled_from(available), max_size=size, unique=True))
    chosen = preferred(paths, available, must, size)
    assert len(chosen) == len(set(chosen)) == size
    assert set(must) <= set(chosen) <= set(available)


@settings(max_examples=100, deadline=None)
@given(available=ids, data=st.data())
def test_choice_stays_on_one_numa_node_when_one_can_hold_it(
    paths: dict[str, tuple[str, ...]], available: list[str], data: st.DataObject
) -> None:
    """Without must_include, a request that fits in one NUMA node uses only that node."""
    size = data.draw(st.integers(1, len(available)))
    per_node: dict[str, int] = {}
    for device_id in available:
        per_node[paths[device_id][0]] = per_node.get(paths[device_id][0], 0) + 1
    chosen = preferred(paths, available, [], size)
    if max(per_node.values()) >= size:
        assert len({paths[i][0] for i in chosen}) == 1
