"""Config parsing: defaults, normalised values, and exact errors naming the key."""

from __future__ import annotations

from typing import Any

import pytest
from devicehost_rdma.config import DEFAULT_POOLS, Mode, Selectors, parse_config
from devicehost_rdma.simulated import two_port_hca

from devicehost.drivers.discovery import DriverStatus
from devicehost.testing import FakeRoot


def test_defaults_without_config() -> None:
    """No keys: the two default pools (Mellanox only, split by link layer), a 1 s poll."""
    config = parse_config({})
    assert config.pools == DEFAULT_POOLS
    assert [
        (p.resource_name, p.mode, p.slots, p.selectors.vendors, p.selectors.link_types)
        for p in config.pools
    ] == [
        ("rdma/hca", Mode.EXCLUSIVE, 0, ("15b3",), ("infiniband",)),
        ("rdma/hca_shared", Mode.SHARED, 100, ("15b3",), ("ethernet",)),
    ]
    assert config.poll_interval == 1.0


def test_full_config_is_parsed_and_normalised() -> None:
    """IDs lose 0x and case, link type aliases and short PCI addresses are normalised."""
    config = parse_config(
        {
            "pollIntervalSeconds": 0.5,
            "pools": [
                {
                    "resourceName": "rdma/hca_shared_devices_a",
                    "mode": "shared",
                    "slots": 8,
                    "selectors": {
                        "vendors": ["0x15B3"],
                        "deviceIDs": ["1017", "0x101B"],
                        "drivers": ["mlx5_core"],
                        "ifNames": ["ib0"],
                        "linkTypes": ["ether", "IB"],
                        "pciAddresses": ["3D:00.1"],
                        "functionTypes": ["VF"],
                    },
                }
            ],
        }
    )
    assert config.pools[0].selectors == Selectors(
        vendors=("15b3",),
        device_ids=("1017", "101b"),
        drivers=("mlx5_core",),
        if_names=("ib0",),
        link_types=("ethernet", "infiniband"),
        pci_addresses=("0000:3d:00.1",),
        function_types=("vf",),
    )
    assert config.poll_interval == 0.5


def test_shared_pool_slots_default_to_100() -> None:
    """A shared pool without slots advertises 100."""
    config = parse_config({"pools": [{"resourceName": "rdma/s", "mode": "shared"}]})
    assert config.pools[0].slots == 100


def test_empty_pool_list_serves_nothing() -> None:
    """pools: [] is allowed and means no resource at all."""
    assert parse_config({"pools": []}).pools == ()


POOL = {"resourceName": "rdma/x", "mode": "exclusive"}


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"pool": []}, "pool: unknown key; expected one of pools, pollIntervalSeconds"),
        ({"pools": {"a": 1}}, "pools: expected a list of pools, got {'a': 1}"),
        (
            {"pools": [{"mode": "shared"}]},
            "pools[0].resourceName: required (e.g. rdma/hca_shared_devices_a)",
        ),
        (
            {"pools": [{"resourceName": "hca", "mode": "shared"}]},
            "pools[0].resourceName: resource name 'hca' is not of the form 'domain/name'",
        ),
        (
            {"pools": [{"resourceName": "rdma/x", "mode": "dedicated"}]},
            "pools[0].mode: expected one of shared, exclusive, got 'dedicated'",
        ),
        (
            {"pools": [{**POOL, "slots": 4}]},
            "pools[0].slots: only a shared pool has slots; an exclusive pool advertises one device "
            "per HCA",
        ),
        (
            {"pools": [{"resourceName": "rdma/x", "mode": "shared", "slots": 0}]},
            "pools[0].slots: expected an integer from 1 to 1000, got 0",
        ),
        (
            {"pools": [{"resourceName": "rdma/x", "mode": "shared", "slots": True}]},
            "pools[0].slots: expected an integer from 1 to 1000, got True",
        ),
        (
            {"pools": [{**POOL, "selectors": {"vendor": ["15b3"]}}]},
            "pools[0].selectors.vendor: unknown key; expected one of vendors, deviceIDs, drivers, "
            "ifNames, pfNames, linkTypes, pciAddresses, functionTypes",
        ),
        (
            {"pools": [{**POOL, "selectors": {"vendors": ["15b3", "mellanox"]}}]},
            "pools[0].selectors.vendors[1]: expected a hex ID such as 15b3 or 0x15b3, "
            "got 'mellanox'",
        ),
        (
            {"pools": [{**POOL, "selectors": {"vendors": "15b3"}}]},
            "pools[0].selectors.vendors: expected a non-empty list, got '15b3'",
        ),
        (
            {"pools": [{**POOL, "selectors": {"ifNames": []}}]},
            "pools[0].selectors.ifNames: expected a non-empty list, got []",
        ),
        (
            {"pools": [{**POOL, "selectors": {"linkTypes": ["iwarp"]}}]},
            "pools[0].selectors.linkTypes[0]: expected one of InfiniBand, Ethernet (or ib, ether, "
            "eth, roce), got 'iwarp'",
        ),
        (
            {"pools": [{**POOL, "selectors": {"pciAddresses": ["3b:00"]}}]},
            "pools[0].selectors.pciAddresses[0]: expected a PCI address such as 0000:3b:00.0, "
            "got '3b:00'",
        ),
        (
            {"pools": [{**POOL, "selectors": {"functionTypes": ["sf"]}}]},
            "pools[0].selectors.functionTypes[0]: expected one of pf, vf, got 'sf'",
        ),
        (
            {"pools": [POOL, POOL]},
            "pools[1].resourceName: 'rdma/x' is used by an earlier pool; each pool needs its own "
            "resource name",
        ),
        (
            {"pollIntervalSeconds": 0},
            "pollIntervalSeconds: expected a number of seconds above 0, at most 60, got 0",
        ),
        (
            {"cdi": {"enabled": True}},
            "cdi: removed; the driver no longer writes CDI specs: the host writes one per "
            "resource (the host config's `cdi:` section), under the project's own CDI vendor",
        ),
    ],
)
def test_bad_config_names_the_key(config: dict[str, Any], message: str) -> None:
    """Each bad value raises ValueError with the key path and what was expected."""
    with pytest.raises(ValueError) as caught:
        parse_config(config)
    assert str(caught.value) == message


def test_bad_config_fails_the_driver_naming_the_key(fake_root: FakeRoot, run_host) -> None:
    """Through the host, a bad rdma section fails the rdma driver (not the host), and its
    reason names drivers.rdma and the key."""
    two_port_hca(fake_root)
    host = run_host(
        enabled_drivers=("rdma",),
        drivers={"rdma": {"pools": [{"resourceName": "rdma/x", "mode": "x"}]}},
    )
    [info] = [i for i in host.host.plugins.infos if i.name == "rdma"]
    assert info.status is DriverStatus.FAILED
    assert info.reason == (
        "config drivers.rdma: pools[0].mode: expected one of shared, exclusive, got 'x'"
    )
