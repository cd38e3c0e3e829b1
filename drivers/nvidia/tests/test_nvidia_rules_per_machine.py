"""Issue 13's NVIDIA rules (items 1-4) on each simulated machine, reached through the
simulate hook exactly as ``devicehost run --simulate --node NAME`` reaches it: the default
node (no recovery-action field) and ``dgx-h100`` (NVSwitch, an R570 driver that offers the
field, ``/dev/nvidia-modeset``)."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
import yaml
from devicehost_nvidia import NvidiaDriver
from devicehost_nvidia.discovery import MigDevice
from devicehost_nvidia.simtree import TOOLKIT_SPEC
from nvidia_helpers import composed

from devicehost import DeviceNode, Health
from devicehost.testing import FakeRoot

GPU = "nvidia.com/gpu"
MACHINES = ["", "dgx-h100"]


@pytest.fixture
def on_machine(fake_root: FakeRoot) -> Iterator[Any]:
    """``on_machine(node, config)``: the driver configured on simulated machine ``node``."""
    made: list[NvidiaDriver] = []

    def make(node: str, config: Mapping[str, Any] | None = None) -> NvidiaDriver:
        driver = NvidiaDriver()
        driver.devicehost_simulate(root=fake_root.path, config=dict(config or {}), node=node)
        driver.devicehost_configure(config=dict(config or {}), root=fake_root.path, simulated=True)
        made.append(driver)
        return driver

    yield make
    for driver in made:
        driver.devicehost_shutdown()


def _uuids(driver: NvidiaDriver) -> list[str]:
    return [gpu.uuid for gpu in driver.found.gpus]


def _unhealthy(driver: NvidiaDriver, resource: str = GPU) -> set[str]:
    devices = driver.devicehost_enumerate(resource=resource)
    return {d.id for d in devices if d.health is Health.UNHEALTHY}


def _mig(driver: NvidiaDriver, uuid: str) -> MigDevice:
    return next(m for m in driver.found.migs if m.uuid == uuid)


def _pump(driver: NvidiaDriver) -> None:
    for _ in range(4):
        driver.monitor.pump(threading.Event(), wait_ms=10)


# -- item 1: the toolkit's CDI devices, named, never written ------------------------------------


@pytest.mark.parametrize("node", MACHINES)
def test_cdi_names_only_devices_the_toolkit_spec_defines(
    fake_root: FakeRoot, on_machine: Any, node: str
) -> None:
    """Every GPU's CDI name is a device of the toolkit's nvidia.com/gpu spec, and the CDI
    directories hold that spec alone (the old driver wrote a second nvidia.com/gpu spec)."""
    driver = on_machine(node, {"deviceListStrategy": ["cdi"]})
    spec = yaml.safe_load(fake_root.at(TOOLKIT_SPEC).read_text())
    defined = {f"{spec['kind']}={d['name']}" for d in spec["devices"]}
    devices = driver.devicehost_enumerate(resource=GPU)
    assert {name for d in devices for name in d.edits.cdi_devices} == {
        f"nvidia.com/gpu={u}" for u in _uuids(driver)
    }
    assert {name for d in devices for name in d.edits.cdi_devices} <= defined
    assert [p.name for p in fake_root.at("/var/run/cdi").iterdir()] == ["nvidia.yaml"]
    assert not fake_root.at("/etc/cdi").exists()


# -- item 2: health that recovers only when it should -------------------------------------------


@pytest.mark.parametrize("node", MACHINES)
def test_reset_class_fault_is_held_until_the_gpu_is_reset(on_machine: Any, node: str) -> None:
    """Xid 48 with a GPU reset needed: Unhealthy however many scans pass with no quiet
    period (the old driver released it after the quiet period); Healthy after the reset.
    On the DGX the recovery-action field says so, on the default node the Xid catalog."""
    driver = on_machine(node, {"quietPeriodSeconds": 0})
    uuid = _uuids(driver)[2]
    driver.simulator.fault(2)
    _pump(driver)
    for _ in range(3):
        assert _unhealthy(driver) == {uuid}
    driver.simulator.reset(2)
    assert _unhealthy(driver) == set()


@pytest.mark.parametrize("node", MACHINES)
def test_application_xids_and_a_pending_remap_leave_the_gpu_healthy(
    on_machine: Any, node: str
) -> None:
    """Xids 13, 31, 43, 45, 68, 109 change nothing, and a row remap pending without any
    event is no fault (the old driver called a pending remap Unhealthy)."""
    driver = on_machine(node, {"quietPeriodSeconds": 0})
    for xid in (13, 31, 43, 45, 68, 109):
        driver.simulator.xid(1, xid)
    _pump(driver)
    driver.simulator.double_bit_ecc(3)  # delivered, not pumped: only the pending remap
    assert _unhealthy(driver) == set()


@pytest.mark.parametrize("node", MACHINES)
def test_failed_remap_makes_the_gpu_unhealthy(on_machine: Any, node: str) -> None:
    """A failed row remap is a fault on every machine, with no event read."""
    driver = on_machine(node)
    driver.simulator.remap_failure(6)
    assert _unhealthy(driver) == {_uuids(driver)[6]}


# -- item 3: MIG names, changes and events ------------------------------------------------------

MIG = {"0": ["1g.10gb", "1g.10gb+me", "1g.10gb", "2g.20gb"]}


@pytest.mark.parametrize("node", MACHINES)
def test_mig_profiles_with_variants_and_a_deleted_instance(on_machine: Any, node: str) -> None:
    """Mixed: 1g.10gb and 1g.10gb+me are separate resources ('+' as '.'); deleting one
    1g.10gb instance takes it off the list at the next scan (the old driver named both
    1g.10gb and kept a deleted instance Healthy)."""
    driver = on_machine(node, {"migStrategy": "mixed", "simulation": {"mig": MIG}})
    names = {s.name for s in driver.devicehost_resources()}
    assert {"nvidia.com/mig-1g.10gb", "nvidia.com/mig-1g.10gb.me"} <= names
    before = driver.devicehost_enumerate(resource="nvidia.com/mig-1g.10gb")
    assert len(before) == 2
    kept, deleted = (_mig(driver, d.id) for d in before)
    driver.simulator.destroy_mig(0, deleted.gpu_instance)
    after = driver.devicehost_enumerate(resource="nvidia.com/mig-1g.10gb")
    assert [d.id for d in after] == [kept.uuid]


@pytest.mark.parametrize("node", MACHINES)
def test_mig_event_of_another_compute_instance_marks_nothing(on_machine: Any, node: str) -> None:
    """An Xid naming GPU instance G and compute instance 1 leaves G's device (compute
    instance 0) alone; compute instance 0 marks it."""
    config = {"migStrategy": "mixed", "quietPeriodSeconds": 3600, "simulation": {"mig": MIG}}
    driver = on_machine(node, config)
    mig = _mig(driver, driver.devicehost_enumerate(resource="nvidia.com/mig-1g.10gb")[0].id)
    driver.simulator.xid(0, 94, gpu_instance=mig.gpu_instance, compute_instance=1)
    _pump(driver)
    assert _unhealthy(driver, "nvidia.com/mig-1g.10gb") == set()
    driver.simulator.xid(0, 94, gpu_instance=mig.gpu_instance, compute_instance=0)
    _pump(driver)
    assert _unhealthy(driver, "nvidia.com/mig-1g.10gb") == {mig.uuid}


# -- item 4: /dev/nvidia-modeset where present, a driver root -----------------------------------


def test_dgx_passes_its_modeset_node_and_the_default_node_does_not(on_machine: Any) -> None:
    """device-nodes: the DGX (which has /dev/nvidia-modeset) passes it once per container;
    the default node has no modeset module loaded and passes no such node."""
    config = {"deviceListStrategy": ["device-nodes"]}
    dgx = on_machine("dgx-h100", config)
    nodes = composed(dgx, GPU, _uuids(dgx)[:2]).devices
    assert nodes.count(DeviceNode(host_path="/dev/nvidia-modeset")) == 1


def test_default_node_has_no_modeset_node(fake_root: FakeRoot, on_machine: Any) -> None:
    """Without the module's node the shared nodes are the control and UVM ones only."""
    driver = on_machine("", {"deviceListStrategy": ["device-nodes"]})
    paths = [d.host_path for d in composed(driver, GPU, _uuids(driver)[:1]).devices]
    assert "/dev/nvidia-modeset" not in paths
    assert not fake_root.at("/dev/nvidia-modeset").exists()


def test_dgx_in_a_driver_container_passes_nodes_from_the_driver_root(on_machine: Any) -> None:
    """driverRoot /run/nvidia/driver on the DGX: the GPU, control and modeset nodes are
    passed from under it and appear at /dev in the container."""
    config = {"driverRoot": "/run/nvidia/driver", "deviceListStrategy": ["device-nodes"]}
    driver = on_machine("dgx-h100", config)
    nodes = composed(driver, GPU, _uuids(driver)[:1]).devices
    for name in ("nvidia0", "nvidiactl", "nvidia-modeset"):
        node = DeviceNode(host_path=f"/run/nvidia/driver/dev/{name}", container_path=f"/dev/{name}")
        assert node in nodes
