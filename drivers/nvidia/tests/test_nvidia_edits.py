"""Container edits as data: what each unit and each resource declares, composed by the host's
own composition, and the NVIDIA Container Toolkit's CDI spec named, never written."""

import pytest
from devicehost_nvidia import NvidiaDriver, default_node
from devicehost_nvidia.driver import nvml_library
from devicehost_nvidia.simtree import TOOLKIT_SPEC, build_tree
from devicehost_nvidia.simulated import SimulatedNvml, sim_uuid
from nvidia_helpers import MakeDriver, composed

from devicehost import DeviceNode, DriverUnavailable, Health
from devicehost.testing import FakeRoot

GPU = "nvidia.com/gpu"
CDI = {"deviceListStrategy": ["cdi"]}


def _allocate(driver, *indexes: int):
    return composed(driver, GPU, [sim_uuid(i) for i in indexes])


def test_envvar_one_two_and_every_gpu(make_driver: MakeDriver) -> None:
    """Default: NVIDIA_VISIBLE_DEVICES joins the requested GPUs' UUIDs in request order, for
    one, two and all eight GPUs; nothing else is passed."""
    driver = make_driver()
    assert _allocate(driver, 3).envs == {"NVIDIA_VISIBLE_DEVICES": sim_uuid(3)}
    two = _allocate(driver, 1, 0)
    assert two.envs == {"NVIDIA_VISIBLE_DEVICES": f"{sim_uuid(1)},{sim_uuid(0)}"}
    assert two.devices == () and two.cdi_devices == ()
    every = _allocate(driver, *range(8))
    assert every.envs["NVIDIA_VISIBLE_DEVICES"].split(",") == [sim_uuid(i) for i in range(8)]


def test_resources_declare_joined_env_and_the_driver_has_no_allocate(
    make_driver: MakeDriver,
) -> None:
    """Each resource declares NVIDIA_VISIBLE_DEVICES as joined; Allocate needs no driver call
    (the driver implements no allocate hook at all)."""
    driver = make_driver()
    (spec,) = driver.devicehost_resources()
    assert spec.joined_envs == ("NVIDIA_VISIBLE_DEVICES",)
    assert not hasattr(NvidiaDriver, "devicehost_allocate")


def test_cdi_names_the_toolkits_devices_and_voids_the_env(make_driver: MakeDriver) -> None:
    """CDI alone: each GPU is named as the toolkit's spec names it (nvidia.com/gpu=<uuid>),
    and the resource sets NVIDIA_VISIBLE_DEVICES=void once."""
    allocation = _allocate(make_driver(CDI), 2, 3)
    assert allocation.cdi_devices == (
        f"nvidia.com/gpu={sim_uuid(2)}",
        f"nvidia.com/gpu={sim_uuid(3)}",
    )
    assert allocation.envs == {"NVIDIA_VISIBLE_DEVICES": "void"}


def test_the_driver_writes_no_cdi_spec(fake_root: FakeRoot, make_driver: MakeDriver) -> None:
    """With cdi on, no spec file is written by the driver: the CDI directories hold only the
    toolkit's own spec (the old driver wrote devicehost-nvidia.com-gpu.json there)."""
    make_driver(CDI).devicehost_enumerate(resource=GPU)
    for directory in ("/var/run/cdi", "/etc/cdi"):
        path = fake_root.at(directory)
        files = sorted(p.name for p in path.iterdir()) if path.exists() else []
        assert files == (["nvidia.yaml"] if directory == "/var/run/cdi" else [])


def test_missing_toolkit_spec_is_a_note_and_unhealthy_until_it_appears(
    fake_root: FakeRoot, make_driver: MakeDriver
) -> None:
    """cdi without the toolkit's spec: a note says how to generate it and the GPUs are
    Unhealthy (a container would fail); once the spec appears, the next scan names them."""
    node = default_node(gpus=2)
    node.toolkit_cdi_spec = False
    driver = make_driver(CDI, node=node)
    assert any("no NVIDIA Container Toolkit CDI spec" in n for n in driver.devicehost_notes())
    assert {d.health for d in driver.devicehost_enumerate(resource=GPU)} == {Health.UNHEALTHY}
    node.toolkit_cdi_spec = True
    build_tree(fake_root.path, node)
    devices = driver.devicehost_enumerate(resource=GPU)
    assert {d.health for d in devices} == {Health.HEALTHY}
    assert devices[0].edits.cdi_devices == (f"nvidia.com/gpu={sim_uuid(0)}",)
    assert not any("CDI spec" in n for n in driver.devicehost_notes())


def test_toolkit_spec_without_a_gpu_names_it(fake_root: FakeRoot, make_driver: MakeDriver) -> None:
    """A stale toolkit spec that lacks a GPU: the note names that GPU and says to regenerate."""
    node = default_node(gpus=2)
    build_tree(fake_root.path, default_node(gpus=1))  # the spec knows GPU 0 only
    driver = make_driver(CDI, node=node)
    health = {d.id: d.health for d in driver.devicehost_enumerate(resource=GPU)}
    assert health == {sim_uuid(0): Health.HEALTHY, sim_uuid(1): Health.UNHEALTHY}
    assert any(
        f"does not name {sim_uuid(1)}" in n and TOOLKIT_SPEC in n for n in driver.devicehost_notes()
    )


def test_device_nodes_resource_edits_once_then_each_gpu(make_driver: MakeDriver) -> None:
    """Device nodes: the resource's control and UVM nodes once per container, then each
    GPU's /dev/nvidiaN; NVIDIA_VISIBLE_DEVICES is void."""
    allocation = _allocate(make_driver({"deviceListStrategy": ["device-nodes"]}), 4, 6)
    assert allocation.devices == tuple(
        DeviceNode(host_path=p)
        for p in (
            "/dev/nvidiactl",
            "/dev/nvidia-uvm",
            "/dev/nvidia-uvm-tools",
            "/dev/nvidia4",
            "/dev/nvidia6",
        )
    )
    assert allocation.envs == {"NVIDIA_VISIBLE_DEVICES": "void"}


def test_modeset_node_is_passed_only_when_present(
    fake_root: FakeRoot, make_driver: MakeDriver
) -> None:
    """/dev/nvidia-modeset joins the shared nodes where the module created it."""
    config = {"deviceListStrategy": ["device-nodes"]}
    without = _allocate(make_driver(config), 0)
    assert "/dev/nvidia-modeset" not in [d.host_path for d in without.devices]
    fake_root.char_device("/dev/nvidia-modeset")
    with_it = _allocate(make_driver(config), 0)
    assert "/dev/nvidia-modeset" in [d.host_path for d in with_it.devices]


def test_strategies_combine(make_driver: MakeDriver) -> None:
    """All three together give env, CDI names and device nodes in one answer."""
    config = {"deviceListStrategy": ["envvar", "cdi", "device-nodes"]}
    allocation = _allocate(make_driver(config), 7)
    assert allocation.envs == {"NVIDIA_VISIBLE_DEVICES": sim_uuid(7)}
    assert allocation.cdi_devices == (f"nvidia.com/gpu={sim_uuid(7)}",)
    assert DeviceNode(host_path="/dev/nvidia7") in allocation.devices


def test_driver_root_moves_device_nodes_and_the_library(fake_root: FakeRoot) -> None:
    """driverRoot /run/nvidia/driver: device nodes are passed from under it (seen in the
    container at /dev), and libnvidia-ml.so.1 is found under it."""
    node = default_node(gpus=1)
    build_tree(fake_root.path, node, "/run/nvidia/driver")
    assert nvml_library(fake_root.path, "/run/nvidia/driver") == (
        "/run/nvidia/driver/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"
    )
    driver = NvidiaDriver(nvml=SimulatedNvml(node))
    config = {"driverRoot": "/run/nvidia/driver", "deviceListStrategy": ["device-nodes"]}
    driver.devicehost_configure(config=config, root=fake_root.path, simulated=True)
    try:
        devices = composed(driver, GPU, [sim_uuid(0)]).devices
    finally:
        driver.devicehost_shutdown()
    assert (
        DeviceNode(host_path="/run/nvidia/driver/dev/nvidia0", container_path="/dev/nvidia0")
        in devices
    )
    assert (
        DeviceNode(host_path="/run/nvidia/driver/dev/nvidiactl", container_path="/dev/nvidiactl")
        in devices
    )


def test_driver_root_without_nvml_is_unavailable(fake_root: FakeRoot) -> None:
    """A driver root with no libnvidia-ml.so.1 (driver container not up) says so plainly."""
    with pytest.raises(DriverUnavailable, match="driverRoot /run/nvidia/driver: no libnvidia-ml"):
        nvml_library(fake_root.path, "/run/nvidia/driver")
