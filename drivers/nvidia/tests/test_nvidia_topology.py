"""Preferred allocation of whole GPUs: NVLink first, then PCIe proximity, then NUMA."""

from devicehost_nvidia import SimNode, default_node, sim_gpu
from devicehost_nvidia.simulated import sim_uuid
from nvidia_helpers import MakeDriver

GPU = "nvidia.com/gpu"


def _prefer(driver, size: int, must: tuple[int, ...] = (), available=None) -> set[int]:
    """The GPU indexes the driver prefers among ``available`` (default: all)."""
    indexes = available or range(len(driver.simulator.node.gpus))
    index_of = {sim_uuid(i): i for i in indexes}
    chosen = driver.devicehost_preferred_allocation(
        resource=GPU,
        available=list(index_of),
        must_include=[sim_uuid(i) for i in must],
        size=size,
    )
    assert len(chosen) == size and len(set(chosen)) == size
    return {index_of[c] for c in chosen}


def test_nvlink_pairs_are_read_from_nvml(make_driver: MakeDriver) -> None:
    """The default node's NVLink pairs (4 links each) and PCIe levels come from NVML."""
    driver = make_driver()
    topology = driver.topology
    assert topology.nvlinks(sim_uuid(0), sim_uuid(1)) == 4
    assert topology.nvlinks(sim_uuid(1), sim_uuid(2)) == 0
    assert topology.level(sim_uuid(0), sim_uuid(1)) == 10  # same PCIe switch
    assert topology.level(sim_uuid(0), sim_uuid(2)) == 40  # same NUMA node
    assert topology.level(sim_uuid(0), sim_uuid(4)) == 50  # across the system


def test_pair_request_gets_an_nvlink_pair(make_driver: MakeDriver) -> None:
    """Two GPUs: an NVLink pair, and the one including must_include's partner."""
    driver = make_driver()
    assert _prefer(driver, 2) == {0, 1}
    assert _prefer(driver, 2, must=(5,)) == {4, 5}


def test_four_gpus_stay_on_one_numa_node(make_driver: MakeDriver) -> None:
    """Four GPUs: two NVLink pairs on the same NUMA node beat pairs across the system."""
    assert _prefer(make_driver(), 4, must=(6,)) == {4, 5, 6, 7}


def test_single_gpu_comes_from_a_broken_pair(make_driver: MakeDriver) -> None:
    """One GPU: taken where its NVLink partner is already gone, so whole pairs stay free."""
    assert _prefer(make_driver(), 1, available=[0, 1, 2, 4, 5]) == {2}


def test_nvlink_beats_pcie_proximity(make_driver: MakeDriver) -> None:
    """A pair joined by NVLink across PCIe switches beats a pair sharing a switch."""
    node = SimNode(
        gpus=[sim_gpu(0, pcie_switch=0), sim_gpu(1, pcie_switch=0), sim_gpu(2, pcie_switch=1)],
        nvlinks=[(0, 2, 2)],
    )
    _check(make_driver, node, size=2, must=(0,), expected={0, 2})


def test_pcie_proximity_beats_numa(make_driver: MakeDriver) -> None:
    """Without NVLink, GPUs behind one PCIe switch are chosen over others on the NUMA node."""
    node = SimNode(
        gpus=[
            sim_gpu(0, pcie_switch=0),
            sim_gpu(1, pcie_switch=1),
            sim_gpu(2, pcie_switch=0),
            sim_gpu(3, numa_node=1),
        ]
    )
    _check(make_driver, node, size=2, must=(0,), expected={0, 2})


def test_numa_decides_when_nothing_else_does(make_driver: MakeDriver) -> None:
    """With no NVLink and no shared switch, the GPUs come from one NUMA node."""
    node = SimNode(gpus=[sim_gpu(0), sim_gpu(1, numa_node=1), sim_gpu(2, numa_node=1), sim_gpu(3)])
    _check(make_driver, node, size=2, must=(1,), expected={1, 2})


def test_nvswitch_joins_every_gpu(make_driver: MakeDriver) -> None:
    """Links whose remote end is an NVSwitch (not a GPU) join every GPU on that switch."""
    node = default_node(gpus=4)
    node.nvlinks, node.nvswitches, node.nvswitch_links = [], 2, 3
    topology = make_driver(node=node).topology
    assert topology.nvlinks(sim_uuid(0), sim_uuid(3)) == 6
    assert topology.nvlinks(sim_uuid(1), sim_uuid(2)) == 6


def test_interconnect_label_names_how_the_gpus_are_joined(make_driver: MakeDriver) -> None:
    """The interconnect label: nvswitch when links end at a switch, nvlink for direct
    links only (the default node's pairs), pcie without NVLink."""
    switched = default_node(gpus=2)
    switched.nvlinks, switched.nvswitches, switched.nvswitch_links = [], 1, 2
    plain = default_node(gpus=2)
    plain.nvlinks = []
    for node, expected in ((switched, "nvswitch"), (default_node(gpus=2), "nvlink")):
        assert make_driver(node=node).devicehost_labels()["interconnect"] == expected
    assert make_driver(node=plain).devicehost_labels()["interconnect"] == "pcie"


def test_must_include_is_always_kept(make_driver: MakeDriver) -> None:
    """must_include GPUs are in the answer even when they are far apart."""
    assert _prefer(make_driver(), 3, must=(0, 7)) >= {0, 7}


def test_large_nodes_are_chosen_greedily(make_driver: MakeDriver) -> None:
    """16 GPUs, 8 wanted: too many sets to try, yet the answer is four whole NVLink pairs."""
    driver = make_driver(node=default_node(gpus=16, numa_nodes=2))
    chosen = _prefer(driver, 8)
    assert chosen == set(range(8))


def test_mig_devices_use_the_hosts_default(make_driver: MakeDriver) -> None:
    """For MIG resources the driver defers to the host's NUMA packing (None)."""
    node = default_node(gpus=1, mig={0: ["1g.10gb", "1g.10gb"]})
    driver = make_driver({"migStrategy": "mixed"}, node=node)
    ids = [m.uuid for m in node.gpus[0].mig_devices()]
    assert (
        driver.devicehost_preferred_allocation(
            resource="nvidia.com/mig-1g.10gb", available=ids, must_include=[], size=1
        )
        is None
    )


def _check(
    make_driver: MakeDriver, node: SimNode, size: int, must: tuple[int, ...], expected: set[int]
) -> None:
    assert _prefer(make_driver(node=node), size, must=must) == expected
