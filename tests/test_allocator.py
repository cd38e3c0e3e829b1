"""The host's default preferred allocation: must-include first, fewest NUMA nodes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from devicehost import Device, natural_key
from devicehost.kubelet.deviceplugin.preferred import numa_map, preferred_allocation


def node(numa_of: dict[str, int]) -> dict[str, int]:
    """A snapshot's NUMA map, built the way the servicer builds it."""
    return numa_map(Device(id=i, numa_nodes=(n,)) for i, n in numa_of.items())


def test_natural_order():
    """gpu-2 sorts before gpu-10."""
    assert sorted(["gpu-10", "gpu-2", "gpu-1"], key=natural_key) == ["gpu-1", "gpu-2", "gpu-10"]


def test_natural_order_reads_pci_addresses_as_hex():
    """PCI addresses sort in bus order: their parts are hex digit runs, not decimal ones
    (0x33 < 0x3b < 0x4d), in sysfs's, NVML's and a device ID's dashed spelling."""
    addresses = ["0000:4d:00.0", "0000:9a:00.0", "0000:33:00.1", "0000:3b:00.0", "0000:33:00.0"]
    assert sorted(addresses, key=natural_key) == [
        "0000:33:00.0", "0000:33:00.1", "0000:3b:00.0", "0000:4d:00.0", "0000:9a:00.0",
    ]  # fmt: skip
    assert sorted(["0000-4d-00.0", "0000-40-00.0", "0000-2f-00.0"], key=natural_key) == [
        "0000-2f-00.0", "0000-40-00.0", "0000-4d-00.0",
    ]  # fmt: skip
    assert natural_key("00000000:3B:00.0") == natural_key("0000:3b:00.0")


def test_default_preference_takes_pci_addresses_in_bus_order():
    """On one NUMA node the default preference takes the lowest PCI addresses first."""
    devices = node({"0000:4d:00.0": 0, "0000:33:00.0": 0, "0000:9a:00.0": 0})
    assert preferred_allocation(devices, list(devices), [], 2) == ["0000:33:00.0", "0000:4d:00.0"]


def test_fills_the_must_include_numa_node_first():
    """The rest of a request comes from the NUMA node of the must-include device."""
    devices = node({"a0": 0, "a1": 0, "b0": 1, "b1": 1, "b2": 1})
    assert preferred_allocation(devices, list(devices), ["b2"], 3) == ["b2", "b0", "b1"]


def test_best_fit_keeps_the_larger_node_whole():
    """A request that fits in the smaller node goes there, keeping the larger node free."""
    devices = node({"a0": 0, "a1": 0, "b0": 1, "b1": 1, "b2": 1, "b3": 1})
    assert preferred_allocation(devices, list(devices), [], 2) == ["a0", "a1"]


def test_spills_over_largest_nodes_first():
    """A request larger than any node takes the largest nodes first."""
    devices = node({"a0": 0, "b0": 1, "b1": 1, "b2": 1, "c0": 2, "c1": 2})
    assert preferred_allocation(devices, list(devices), [], 5) == ["b0", "b1", "b2", "c0", "c1"]


@given(
    numa=st.lists(st.integers(0, 3), min_size=1, max_size=24),
    data=st.data(),
)
def test_answer_is_always_valid(numa, data):
    """Any possible request gets exactly `size` distinct available IDs including must-include."""
    devices = node({f"d{i}": n for i, n in enumerate(numa)})
    available = data.draw(st.lists(st.sampled_from(sorted(devices)), min_size=1, unique=True))
    size = data.draw(st.integers(1, len(available)))
    must = data.draw(st.lists(st.sampled_from(available), max_size=size, unique=True))
    chosen = preferred_allocation(devices, available, must, size)
    assert len(chosen) == size == len(set(chosen))
    assert set(must) <= set(chosen) <= set(available)
