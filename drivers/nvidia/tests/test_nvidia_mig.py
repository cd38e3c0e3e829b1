"""MIG strategies: none, single, mixed; and what a MIG device's container gets."""

from devicehost_nvidia import default_node
from nvidia_helpers import MakeDriver, composed

from devicehost.sysfs import normalise_pci_address
from devicehost.testing import FakeRoot

MIXED_LAYOUT = {0: ["1g.10gb", "1g.10gb", "2g.20gb"], 1: ["3g.40gb", "3g.40gb"]}


def _ids(driver, resource: str) -> list[str]:
    return [d.id for d in driver.devicehost_enumerate(resource=resource)]


def _migs(driver, gpu: int) -> list:
    return driver.simulator.node.gpus[gpu].mig_devices()


def test_none_advertises_whole_gpus_even_with_mig_enabled(make_driver: MakeDriver) -> None:
    """migStrategy none ignores MIG: every GPU is one nvidia.com/gpu device."""
    driver = make_driver(node=default_node(gpus=2, mig=MIXED_LAYOUT))
    assert [r.name for r in driver.devicehost_resources()] == ["nvidia.com/gpu"]
    assert len(_ids(driver, "nvidia.com/gpu")) == 2


def test_single_advertises_mig_devices_as_gpus(make_driver: MakeDriver) -> None:
    """All GPUs MIG-enabled with one profile: nvidia.com/gpu lists the MIG device UUIDs."""
    layout = {0: ["1g.10gb"] * 7, 1: ["1g.10gb"] * 7}
    driver = make_driver({"migStrategy": "single"}, node=default_node(gpus=2, mig=layout))
    assert [r.name for r in driver.devicehost_resources()] == ["nvidia.com/gpu"]
    ids = _ids(driver, "nvidia.com/gpu")
    assert ids == [m.uuid for g in (0, 1) for m in _migs(driver, g)]
    assert len(ids) == 14 and all(i.startswith("MIG-") and len(i) == 40 for i in ids)


def test_single_without_mig_advertises_whole_gpus(make_driver: MakeDriver) -> None:
    """No GPU MIG-enabled under single: whole GPUs are served, and a note says so."""
    driver = make_driver({"migStrategy": "single"}, node=default_node(gpus=2))
    assert len(_ids(driver, "nvidia.com/gpu")) == 2
    assert any("no GPU has MIG enabled" in n for n in driver.devicehost_notes())


def test_single_with_several_profiles_advertises_nothing(make_driver: MakeDriver) -> None:
    """Single cannot describe a mixed layout: nothing is advertised, the note says why."""
    driver = make_driver({"migStrategy": "single"}, node=default_node(gpus=2, mig=MIXED_LAYOUT))
    assert driver.devicehost_resources() == []
    assert any(
        "several profiles (1g.10gb, 2g.20gb, 3g.40gb)" in n and "use migStrategy mixed" in n
        for n in driver.devicehost_notes()
    )


def test_single_with_some_gpus_not_mig_advertises_nothing(make_driver: MakeDriver) -> None:
    """Single with a MIG-disabled GPU among MIG ones refuses, naming the GPU."""
    driver = make_driver({"migStrategy": "single"}, node=default_node(gpus=2, mig={0: ["7g.80gb"]}))
    assert driver.devicehost_resources() == []
    assert any("GPUs 1 have MIG disabled" in n for n in driver.devicehost_notes())


def test_mixed_advertises_one_resource_per_profile(make_driver: MakeDriver) -> None:
    """Mixed: MIG-disabled GPUs stay nvidia.com/gpu; each profile is its own resource."""
    driver = make_driver({"migStrategy": "mixed"}, node=default_node(gpus=3, mig=MIXED_LAYOUT))
    assert [r.name for r in driver.devicehost_resources()] == [
        "nvidia.com/gpu",
        "nvidia.com/mig-1g.10gb",
        "nvidia.com/mig-2g.20gb",
        "nvidia.com/mig-3g.40gb",
    ]
    migs0, migs1 = _migs(driver, 0), _migs(driver, 1)
    assert _ids(driver, "nvidia.com/gpu") == [driver.simulator.node.gpus[2].uuid]
    assert _ids(driver, "nvidia.com/mig-1g.10gb") == [migs0[0].uuid, migs0[1].uuid]
    assert _ids(driver, "nvidia.com/mig-2g.20gb") == [migs0[2].uuid]
    assert _ids(driver, "nvidia.com/mig-3g.40gb") == [m.uuid for m in migs1]


def test_mig_devices_carry_their_gpus_numa_node(make_driver: MakeDriver) -> None:
    """A MIG device is on its parent GPU's NUMA node."""
    driver = make_driver({"migStrategy": "mixed"}, node=default_node(gpus=8, mig={6: ["7g.80gb"]}))
    (device,) = driver.devicehost_enumerate(resource="nvidia.com/mig-7g.80gb")
    assert device.numa_nodes == (1,)


def test_mig_devices_name_their_profile_and_share_their_gpus_pci_facts(
    make_driver: MakeDriver,
) -> None:
    """A MIG device's attributes name its profile and carry its GPU's product and PCI
    address; its own memory is left unknown (the profile's name rounds it)."""
    driver = make_driver({"migStrategy": "mixed"}, node=default_node(gpus=8, mig={6: ["7g.80gb"]}))
    (device,) = driver.devicehost_enumerate(resource="nvidia.com/mig-7g.80gb")
    attributes = device.attributes
    assert attributes.mig_profile == "7g.80gb"
    assert attributes.memory_bytes is None
    assert attributes.pci_address == normalise_pci_address(driver.simulator.node.gpus[6].bus_id)
    assert attributes.product == driver.simulator.node.gpus[6].name


def test_mig_index_ids(make_driver: MakeDriver) -> None:
    """With index IDs a MIG device is "<gpu>:<mig index>", as the NVIDIA runtime reads it."""
    driver = make_driver(
        {"migStrategy": "mixed", "deviceIdStrategy": "index"},
        node=default_node(gpus=2, mig=MIXED_LAYOUT),
    )
    assert _ids(driver, "nvidia.com/mig-3g.40gb") == ["1:0", "1:1"]
    allocation = composed(driver, "nvidia.com/mig-3g.40gb", ["1:1"])
    assert allocation.envs == {"NVIDIA_VISIBLE_DEVICES": "1:1"}


def test_mig_allocation_passes_capability_nodes(
    fake_root: FakeRoot, make_driver: MakeDriver
) -> None:
    """Device nodes for a MIG device: the resource's control nodes, then the parent GPU and
    its GPU- and compute-instance caps (minors read from /proc/driver/nvidia/capabilities);
    its CDI name is the toolkit spec's MIG UUID name."""
    driver = make_driver(
        {"migStrategy": "mixed", "deviceListStrategy": ["envvar", "cdi", "device-nodes"]},
        node=default_node(gpus=2, mig=MIXED_LAYOUT),
    )
    mig = _migs(driver, 1)[1]  # GPU 1 (minor 1), GPU instance 2, compute instance 0
    caps = "/proc/driver/nvidia/capabilities/gpu1/mig/gi2"
    fake_root.write(f"{caps}/access", "DeviceFileMinor: 201\nDeviceFileMode: 292")
    fake_root.write(f"{caps}/ci0/access", "DeviceFileMinor: 202\nDeviceFileMode: 292")
    allocation = composed(driver, "nvidia.com/mig-3g.40gb", [mig.uuid])
    assert allocation.envs == {"NVIDIA_VISIBLE_DEVICES": mig.uuid}
    assert allocation.cdi_devices == (f"nvidia.com/gpu={mig.uuid}",)
    assert [d.host_path for d in allocation.devices] == [
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
        "/dev/nvidia1",
        "/dev/nvidia-caps/nvidia-cap201",
        "/dev/nvidia-caps/nvidia-cap202",
    ]
