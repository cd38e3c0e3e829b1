"""Enumeration: conformance, device IDs, NUMA nodes from sysfs, nodes without NVML or GPUs."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from devicehost_nvidia import NvidiaDriver, SimNode, SimulatedNvml, default_node
from devicehost_nvidia.nvml import NvmlError
from devicehost_nvidia.nvml_real import PynvmlLibrary
from devicehost_nvidia.simulated import sim_uuid
from nvidia_helpers import MakeDriver, composed

from devicehost import DriverUnavailable, Health
from devicehost.drivers.discovery import DriverStatus
from devicehost.testing import FakeRoot, check_driver

ALL_STRATEGIES = {"deviceListStrategy": ["envvar", "cdi", "device-nodes"]}


def _nvml_loads() -> bool:
    try:
        PynvmlLibrary().init()
    except NvmlError:
        return False
    return True


def test_conformance_on_simulated_node(fake_root: FakeRoot) -> None:
    """The default simulated node: 8 healthy GPUs, each allocating alone, preferences valid."""
    report = check_driver("nvidia", fake_root, simulated=True, config=ALL_STRATEGIES)
    assert report.devices == {"nvidia.com/gpu": 8}
    assert report.healthy == {"nvidia.com/gpu": 8}


def test_conformance_with_mig_and_time_slicing(fake_root: FakeRoot) -> None:
    """Mixed MIG plus shared replicas still pass the battery on every resource."""
    config = {
        **ALL_STRATEGIES,
        "migStrategy": "mixed",
        "simulation": {"mig": {"0": ["1g.10gb", "1g.10gb", "2g.20gb"], "1": ["3g.40gb"]}},
        "timeSlicing": {
            "renameByDefault": True,
            "resources": [
                {"name": "nvidia.com/gpu", "replicas": 4},
                {"name": "nvidia.com/mig-1g.10gb", "replicas": 2},
            ],
        },
    }
    report = check_driver("nvidia", fake_root, simulated=True, config=config)
    assert report.devices == {
        "nvidia.com/gpu.shared": 24,
        "nvidia.com/mig-1g.10gb.shared": 4,
        "nvidia.com/mig-2g.20gb": 1,
        "nvidia.com/mig-3g.40gb": 1,
    }


def _hand_laid_node(fake_root: FakeRoot) -> None:
    """A node laid out as the kernel shows it, by hand: NUMA node 1 for GPUs 0-3, unknown
    (-1) for 4-7, and no /dev/nvidia-uvm-tools yet."""
    node = default_node()
    for gpu in node.gpus:
        address = "0000:" + gpu.bus_id.split(":", 1)[1].lower()
        fake_root.pci_device(
            address,
            vendor="0x10de",
            device="0x20b2",
            driver="nvidia",
            numa_node=1 if gpu.index < 4 else -1,
            device_class="0x030200",
            bus=f"pci0000:{gpu.index // 4 * 0x80:02x}",
        )
        fake_root.char_device(f"/dev/nvidia{gpu.minor}")
    fake_root.char_device("/dev/nvidiactl")
    fake_root.char_device("/dev/nvidia-uvm")


def test_conformance_on_a_hand_laid_real_layout(fake_root: FakeRoot) -> None:
    """A tree in the kernel's layout, laid out by hand, passes: simulate only fills gaps."""
    _hand_laid_node(fake_root)
    report = check_driver("nvidia", fake_root, simulated=True, config=ALL_STRATEGIES)
    assert report.healthy == {"nvidia.com/gpu": 8}


def test_numa_and_device_nodes_come_from_the_tree(
    fake_root: FakeRoot, make_driver: MakeDriver
) -> None:
    """NUMA nodes are read from sysfs (-1 means none), device nodes only passed where present."""
    _hand_laid_node(fake_root)
    driver = make_driver({"deviceListStrategy": "device-nodes"}, lay_out=False)
    numa = {d.id: d.numa_nodes for d in driver.devicehost_enumerate(resource="nvidia.com/gpu")}
    assert numa[sim_uuid(0)] == (1,)
    assert numa[sim_uuid(5)] == ()
    assert any(
        "no NUMA node in sysfs for PCI device 0000:57:00.0" in n for n in driver.devicehost_notes()
    )
    paths = [d.host_path for d in composed(driver, "nvidia.com/gpu", [sim_uuid(0)]).devices]
    assert paths == ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia0"]


def test_ids_are_gpu_uuids_with_numa_nodes(make_driver: MakeDriver) -> None:
    """Default IDs are the GPUs' 40-character UUIDs; GPUs 0-3 on NUMA 0, 4-7 on NUMA 1."""
    devices = make_driver().devicehost_enumerate(resource="nvidia.com/gpu")
    assert [d.id for d in devices] == [sim_uuid(i) for i in range(8)]
    assert all(len(d.id) == 40 and d.health is Health.HEALTHY for d in devices)
    assert [d.numa_nodes for d in devices] == [(0,)] * 4 + [(1,)] * 4


def test_index_ids_when_configured(make_driver: MakeDriver) -> None:
    """``deviceIdStrategy: index`` advertises "0".."7" and hands indexes to the runtime."""
    driver = make_driver({"deviceIdStrategy": "index"})
    assert [d.id for d in driver.devicehost_enumerate(resource="nvidia.com/gpu")] == [
        str(i) for i in range(8)
    ]
    allocation = composed(driver, "nvidia.com/gpu", ["3", "5"])
    assert allocation.envs == {"NVIDIA_VISIBLE_DEVICES": "3,5"}


def test_without_nvml_the_driver_is_unavailable(fake_root: FakeRoot) -> None:
    """No NVIDIA driver on the node: configure raises DriverUnavailable saying NVML cannot load."""
    if _nvml_loads():
        pytest.skip("NVML loads on this node")
    with pytest.raises(
        DriverUnavailable, match=r"^NVML cannot be loaded: .*; no NVIDIA driver on this node$"
    ):
        NvidiaDriver().devicehost_configure(config={}, root=fake_root.path, simulated=False)


def test_a_node_that_is_not_simulated_never_loads_the_simulator(tmp_path: Path) -> None:
    """A worker on a real node imports the driver and configures it against real NVML:
    the simulated NVML, the tree builder and the testing kit they use stay unloaded."""
    probe = (
        "import json, sys\n"
        "from devicehost import DriverUnavailable\n"
        "from devicehost_nvidia.driver import NvidiaDriver\n"
        "try:\n"
        f"    NvidiaDriver().devicehost_configure(config={{}}, root={str(tmp_path)!r}, "
        "simulated=False)\n"
        "except DriverUnavailable:\n"
        "    pass\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    loaded = set(json.loads(run.stdout.splitlines()[-1]))
    simulation = {
        "devicehost_nvidia.simulated",
        "devicehost_nvidia.simtree",
        "devicehost.testing",
    }
    assert "devicehost_nvidia.driver" in loaded
    assert not simulation & loaded


def test_without_nvml_the_host_advertises_nothing(kubelet, run_host) -> None:
    """Through the host: the driver is listed unavailable with the reason, nothing registers."""
    if _nvml_loads():
        pytest.skip("NVML loads on this node")
    host = run_host(enabled_drivers=("nvidia",))
    assert host.host.resources == {}
    info = next(i for i in host.host.plugins.infos if i.name == "nvidia")
    assert info.status is DriverStatus.UNAVAILABLE
    assert "NVML cannot be loaded" in info.reason
    assert kubelet.registrations == []


def test_no_gpu_advertises_nothing(make_driver: MakeDriver) -> None:
    """NVML loads but finds no GPU: no resource, and a note that says so."""
    driver = make_driver(node=SimNode(gpus=[]))
    assert driver.devicehost_resources() == []
    assert any("finds no GPU" in n for n in driver.devicehost_notes())


def test_gpu_lost_before_start_is_left_out(fake_root: FakeRoot) -> None:
    """A GPU NVML cannot describe at start is skipped with a note; the others are served."""
    library = SimulatedNvml(default_node(gpus=3))
    library.lose(1)
    driver = NvidiaDriver(nvml=library)
    driver.devicehost_configure(config={}, root=fake_root.path, simulated=True)
    ids = [d.id for d in driver.devicehost_enumerate(resource="nvidia.com/gpu")]
    assert ids == [sim_uuid(0), sim_uuid(2)]
    assert any(
        n.startswith("GPU 1: NVML cannot describe it (GPU is lost")
        for n in driver.devicehost_notes()
    )


def test_simulate_lays_out_the_default_node(fake_root: FakeRoot) -> None:
    """The simulate hook writes 8 NVIDIA PCI functions on two NUMA nodes and their /dev nodes."""
    NvidiaDriver().devicehost_simulate(root=fake_root.path, config={}, node="")
    functions = sorted(Path(fake_root.at("/sys/bus/pci/devices")).iterdir())
    assert len(functions) == 8
    assert {(f / "vendor").read_text().strip() for f in functions} == {"0x10de"}
    assert sorted((f / "numa_node").read_text().strip() for f in functions) == ["0"] * 4 + ["1"] * 4
    for name in ("nvidia0", "nvidia7", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"):
        assert fake_root.at(f"/dev/{name}").exists()


def test_simulation_section_shapes_the_simulated_node(fake_root: FakeRoot) -> None:
    """``simulation.gpus`` and ``numaNodes`` change the node the demo serves."""
    report = check_driver(
        "nvidia", fake_root, simulated=True, config={"simulation": {"gpus": 4, "numaNodes": 1}}
    )
    assert report.devices == {"nvidia.com/gpu": 4}
