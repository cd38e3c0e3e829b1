"""Simulated machines (``--node``), MIG naming and changes, labels and host paths."""

import threading

import pytest
from devicehost_nvidia import NvidiaDriver, default_node
from devicehost_nvidia.simtree import TOOLKIT_SPEC
from devicehost_nvidia.simulated import DGX_H100_GPU_BUSES, dgx_h100_node
from nvidia_helpers import MakeDriver

from devicehost import DriverUnavailable, Health
from devicehost.testing import FakeRoot

GPU = "nvidia.com/gpu"


def _simulated(fake_root: FakeRoot, node: str, config=None) -> NvidiaDriver:
    driver = NvidiaDriver()
    driver.devicehost_simulate(root=fake_root.path, config=config or {}, node=node)
    driver.devicehost_configure(config=config or {}, root=fake_root.path, simulated=True)
    return driver


def test_dgx_h100_is_eight_h100s_on_two_numa_nodes(fake_root: FakeRoot) -> None:
    """--node dgx-h100: 8 H100 80GB HBM3 at the DGX's PCI addresses, GPUs 0-3 on NUMA 0 and
    4-7 on NUMA 1, all joined through NVSwitch (18 links each), the modeset node present."""
    driver = _simulated(fake_root, "dgx-h100")
    try:
        devices = driver.devicehost_enumerate(resource=GPU)
        assert [d.numa_nodes for d in devices] == [(0,)] * 4 + [(1,)] * 4
        assert [g.bus_id for g in driver.found.gpus] == [
            f"0000:{b:02x}:00.0" for b in DGX_H100_GPU_BUSES
        ]
        assert {g.name for g in driver.found.gpus} == {"NVIDIA H100 80GB HBM3"}
        uuids = [g.uuid for g in driver.found.gpus]
        assert driver.topology.nvlinks(uuids[0], uuids[7]) == 18
        assert fake_root.at("/dev/nvidia-modeset").exists()
        assert fake_root.at(TOOLKIT_SPEC).exists()
    finally:
        driver.devicehost_shutdown()


def test_default_node_is_unchanged(fake_root: FakeRoot) -> None:
    """--node "" keeps the default simulation: 8 A100s in NVLink pairs."""
    driver = _simulated(fake_root, "")
    try:
        assert {g.name for g in driver.found.gpus} == {"NVIDIA A100-SXM4-80GB"}
        assert len(driver.devicehost_enumerate(resource=GPU)) == 8
    finally:
        driver.devicehost_shutdown()


def test_machine_without_gpus_is_unavailable(fake_root: FakeRoot) -> None:
    """A machine with no NVIDIA GPU (an Atlas server) has no NVIDIA driver: nothing is
    built and configure says the driver is unavailable, as on that machine (and as the
    Ascend and RDMA drivers say on a machine without their hardware)."""
    driver = NvidiaDriver()
    driver.devicehost_simulate(root=fake_root.path, config={}, node="atlas-800-9000")
    with pytest.raises(DriverUnavailable, match="'atlas-800-9000' has no NVIDIA GPU"):
        driver.devicehost_configure(config={}, root=fake_root.path, simulated=True)
    assert not fake_root.at("/dev/nvidiactl").exists()


def test_labels_describe_the_dgx_gpus(fake_root: FakeRoot) -> None:
    """Labels in the shared vocabulary: product, count, memory, family, versions, MIG."""
    driver = _simulated(fake_root, "dgx-h100")
    try:
        assert driver.devicehost_labels() == {
            "present": "true",
            "count": "8",
            "product": "NVIDIA-H100-80GB-HBM3",
            "memory-mib": "81559",
            "driver-version": "570.148.08",
            "cuda-driver-version": "12.8",
            "mig-capable": "true",
            "family": "hopper",
            "compute-capability": "9.0",
            "firmware-version": "96.00.00.00.01",
            "interconnect": "nvswitch",
        }
    finally:
        driver.devicehost_shutdown()


def test_host_paths_need_no_configure() -> None:
    """host_paths answers before configure and names what the driver reads."""
    paths = {p.path for p in NvidiaDriver().devicehost_host_paths()}
    assert {"/dev", "/sys/bus/pci/devices", "/proc/driver/nvidia", "/etc/cdi"} <= paths
    assert {"/var/run/cdi", "/run/nvidia/driver"} <= paths


# -- MIG --------------------------------------------------------------------------------------

VARIANTS = {0: ("1g.10gb+me", "1g.10gb", "1g.10gb-me", "1g.10gb+me.all", "2g.20gb")}


def test_mig_resources_follow_the_profile_id_with_variants(make_driver: MakeDriver) -> None:
    """Mixed: 1g.10gb and 1g.10gb+me (same slices and memory) are different resources, named
    from the GPU-instance profile, '+' written as '.'."""
    driver = make_driver({"migStrategy": "mixed"}, node=default_node(gpus=2, mig=VARIANTS))
    names = {s.name for s in driver.devicehost_resources()}
    assert {
        "nvidia.com/mig-1g.10gb",
        "nvidia.com/mig-1g.10gb.me",
        "nvidia.com/mig-1g.10gb-me",
        "nvidia.com/mig-1g.10gb.me.all",
        "nvidia.com/mig-2g.20gb",
    } <= names


def test_partial_compute_instances_are_not_advertised(make_driver: MakeDriver) -> None:
    """A MIG device whose compute instance is smaller than its GPU instance (1c.2g.20gb) is
    not advertised, as NVIDIA's plugin does, and a note says so."""
    driver = make_driver(
        {"migStrategy": "mixed"}, node=default_node(gpus=1, mig={0: ("1c.2g.20gb", "3g.40gb")})
    )
    assert {s.name for s in driver.devicehost_resources()} == {"nvidia.com/mig-3g.40gb"}
    assert any("1c.2g.20gb" in n for n in driver.devicehost_notes())


def test_deleted_mig_instance_disappears(make_driver: MakeDriver) -> None:
    """MIG devices are listed again on every scan: a deleted instance is gone, not Healthy."""
    node = default_node(gpus=1, mig={0: ("1g.10gb", "1g.10gb", "2g.20gb")})
    driver = make_driver({"migStrategy": "mixed"}, node=node)
    before = driver.devicehost_enumerate(resource="nvidia.com/mig-1g.10gb")
    assert len(before) == 2
    driver.simulator.destroy_mig(0, 2)  # the second 1g.10gb
    after = driver.devicehost_enumerate(resource="nvidia.com/mig-1g.10gb")
    assert [d.id for d in after] == [before[0].id]


MIG_1G = "nvidia.com/mig-1g.10gb"


def test_mig_event_matches_the_compute_instance(make_driver: MakeDriver) -> None:
    """An Xid naming GPU instance 1 and compute instance 1 marks no MIG device whose compute
    instance is 0 (the event belongs to another compute instance)."""
    node = default_node(gpus=1, mig={0: ("1g.10gb", "1g.10gb")})
    driver = make_driver({"migStrategy": "mixed", "quietPeriodSeconds": 3600}, node=node)
    driver.simulator.xid(0, 94, gpu_instance=1, compute_instance=1)
    driver.monitor.pump(threading.Event(), wait_ms=10)
    health = {
        d.id: d.health for d in driver.devicehost_enumerate(resource="nvidia.com/mig-1g.10gb")
    }
    assert set(health.values()) == {Health.HEALTHY}
    driver.simulator.xid(0, 94, gpu_instance=1, compute_instance=0)
    driver.monitor.pump(threading.Event(), wait_ms=10)
    health = {
        d.id: d.health for d in driver.devicehost_enumerate(resource="nvidia.com/mig-1g.10gb")
    }
    assert sorted(health.values()) == [Health.HEALTHY, Health.UNHEALTHY]


def test_dgx_mig_layout_from_config(fake_root: FakeRoot) -> None:
    """simulation.mig shapes the DGX H100 too: GPU 0 in MIG with one 7g.80gb device."""
    config = {"migStrategy": "mixed", "simulation": {"mig": {"0": ["7g.80gb"]}}}
    driver = _simulated(fake_root, "dgx-h100", config)
    try:
        names = {s.name for s in driver.devicehost_resources()}
        assert names == {"nvidia.com/gpu", "nvidia.com/mig-7g.80gb"}
        assert len(driver.devicehost_enumerate(resource=GPU)) == 7
    finally:
        driver.devicehost_shutdown()
    assert dgx_h100_node().gpus[0].memory_mib == 81559
