"""Pools: which HCAs each selector takes, and what a pool that takes none says."""

from __future__ import annotations

from typing import Any

import pytest
from rdma_helpers import (
    IB_HCAS,
    IB_PFS,
    ROCE_HCAS,
    configured,
    exclusive_pool,
    listed,
    named,
)

from devicehost.testing import FakeRoot

ALL = sorted([*IB_HCAS, *ROCE_HCAS], key=lambda n: int(n.split("_")[1]))


@pytest.mark.parametrize(
    ("selectors", "expected"),
    [
        ({}, ALL),
        ({"vendors": ["15b3"]}, ALL),
        ({"vendors": ["8086"]}, []),
        ({"deviceIDs": ["0x1017"]}, ROCE_HCAS),
        ({"deviceIDs": ["101c"]}, ["mlx5_8", "mlx5_9"]),
        ({"drivers": ["mlx5_core"]}, ALL),
        ({"drivers": ["mlx4_core"]}, []),
        ({"ifNames": ["ib1", "ens2f0np0"]}, ["mlx5_1", "mlx5_6"]),
        ({"linkTypes": ["Ethernet"]}, ROCE_HCAS),
        ({"linkTypes": ["InfiniBand"]}, IB_HCAS),
        ({"pciAddresses": ["0000:4d:00.0", "0000:dd:00.1"]}, ["mlx5_0", "mlx5_7"]),
        ({"functionTypes": ["vf"]}, ["mlx5_8", "mlx5_9"]),
        ({"functionTypes": ["pf"]}, [*IB_PFS, *ROCE_HCAS]),
    ],
)
def test_each_selector(
    eight_hca_root: FakeRoot, selectors: dict[str, Any], expected: list[str]
) -> None:
    """A selector keeps the HCAs offering any of its values."""
    driver = configured(eight_hca_root, {"pools": [exclusive_pool(**selectors)]})
    assert list(named(driver, "rdma/hca")) == expected


def test_selectors_are_anded(eight_hca_root: FakeRoot) -> None:
    """An HCA must pass every given selector: IB and PF and on one switch's addresses."""
    driver = configured(
        eight_hca_root,
        {
            "pools": [
                exclusive_pool(
                    linkTypes=["infiniband"],
                    functionTypes=["pf"],
                    pciAddresses=["0000:ad:00.0", "0000:ad:00.1", "0000:dd:00.0"],
                )
            ]
        },
    )
    assert list(named(driver, "rdma/hca")) == ["mlx5_4"]


def test_pool_matching_nothing_is_served_empty_and_explained(eight_hca_root: FakeRoot) -> None:
    """A pool that selects nothing keeps its resource, lists no device, and a note says
    which selector excluded what."""
    driver = configured(
        eight_hca_root,
        {"pools": [exclusive_pool("rdma/hca_b", vendors=["15b3"], deviceIDs=["1021"])]},
    )
    assert [r.name for r in driver.devicehost_resources()] == ["rdma/hca_b"]
    assert listed(driver, "rdma/hca_b") == {}
    assert driver.devicehost_notes()[0] == (
        "pool 'rdma/hca_b' advertises nothing: none of the 10 HCAs matches every selector; "
        "vendors ['15b3'] matches 10 (this node has: 15b3); "
        "deviceIDs ['1021'] matches 0 (this node has: 1017, 101b, 101c)"
    )


def test_overlapping_pools_are_noted(eight_hca_root: FakeRoot) -> None:
    """An HCA in two pools gets a note: it could go to two pods at once."""
    driver = configured(
        eight_hca_root,
        {
            "pools": [
                exclusive_pool("rdma/a", ifNames=["ib0"]),
                exclusive_pool("rdma/b", pciAddresses=["0000:4d:00.0"]),
            ]
        },
    )
    assert driver.devicehost_notes()[-1] == (
        "mlx5_0 (0000:4d:00.0) is in pools rdma/a, rdma/b: it can be given to two pods at "
        "once; narrow the selectors so the pools do not overlap"
    )


def test_default_pools_split_hcas_by_link_layer(eight_hca_root: FakeRoot) -> None:
    """Without a pools key, InfiniBand HCAs are exclusive and RoCE HCAs shared: disjoint."""
    driver = configured(eight_hca_root)
    assert list(named(driver, "rdma/hca")) == IB_HCAS
    assert len(listed(driver, "rdma/hca_shared")) == 100
    assert driver.devicehost_notes() == []
