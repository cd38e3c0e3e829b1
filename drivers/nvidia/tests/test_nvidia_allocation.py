"""Allocation in each configured way (env, CDI names, device nodes), and the CDI spec."""

import json

import pytest
from devicehost_nvidia import default_node
from devicehost_nvidia.simulated import sim_uuid
from nvidia_helpers import MakeDriver

from devicehost import DeviceNode, UnknownDevice
from devicehost.testing import FakeRoot

GPU = "nvidia.com/gpu"
SPEC = "/var/run/cdi/devicehost-nvidia.com-gpu.json"


def _allocate(driver, *indexes: int):
    return driver.devicehost_allocate(resource=GPU, device_ids=[sim_uuid(i) for i in indexes])


def test_envvar_names_the_gpus(make_driver: MakeDriver) -> None:
    """Default: NVIDIA_VISIBLE_DEVICES lists the UUIDs, nothing else is passed."""
    allocation = _allocate(make_driver(), 1, 0)
    assert allocation.envs == {"NVIDIA_VISIBLE_DEVICES": f"{sim_uuid(1)},{sim_uuid(0)}"}
    assert allocation.devices == () and allocation.cdi_devices == ()


def test_cdi_names_and_void_env(make_driver: MakeDriver) -> None:
    """CDI alone: one nvidia.com/gpu=<uuid> per GPU, and NVIDIA_VISIBLE_DEVICES=void so an
    image's "all" cannot reach every GPU through a default NVIDIA runtime."""
    allocation = _allocate(make_driver({"deviceListStrategy": ["cdi"]}), 2, 3)
    assert allocation.cdi_devices == (
        f"nvidia.com/gpu={sim_uuid(2)}",
        f"nvidia.com/gpu={sim_uuid(3)}",
    )
    assert allocation.envs == {"NVIDIA_VISIBLE_DEVICES": "void"}


def test_device_nodes_for_runtimes_without_the_hook(make_driver: MakeDriver) -> None:
    """Device nodes: /dev/nvidiaN per GPU, then the control and UVM nodes, once each."""
    allocation = _allocate(make_driver({"deviceListStrategy": ["device-nodes"]}), 4, 6)
    assert allocation.devices == tuple(
        DeviceNode(host_path=p)
        for p in (
            "/dev/nvidia4",
            "/dev/nvidia6",
            "/dev/nvidiactl",
            "/dev/nvidia-uvm",
            "/dev/nvidia-uvm-tools",
        )
    )


def test_strategies_combine(make_driver: MakeDriver) -> None:
    """All three together give env, CDI names and device nodes in one answer."""
    config = {"deviceListStrategy": ["envvar", "cdi", "device-nodes"]}
    allocation = _allocate(make_driver(config), 7)
    assert allocation.envs == {"NVIDIA_VISIBLE_DEVICES": sim_uuid(7)}
    assert allocation.cdi_devices == (f"nvidia.com/gpu={sim_uuid(7)}",)
    assert allocation.devices[0] == DeviceNode(host_path="/dev/nvidia7")


def test_unknown_id_is_refused(make_driver: MakeDriver) -> None:
    """An ID the driver never advertised raises UnknownDevice naming it."""
    with pytest.raises(UnknownDevice, match="GPU-nope"):
        make_driver().devicehost_allocate(resource=GPU, device_ids=["GPU-nope"])


def test_cdi_spec_is_written_for_the_advertised_gpus(
    fake_root: FakeRoot, make_driver: MakeDriver
) -> None:
    """With CDI on, a spec under <root>/var/run/cdi names every GPU by UUID with its node,
    the control nodes in the common edits."""
    make_driver({"deviceListStrategy": ["cdi"]})
    spec = json.loads(fake_root.at(SPEC).read_text())
    assert spec["kind"] == "nvidia.com/gpu"
    assert [d["name"] for d in spec["devices"]] == [sim_uuid(i) for i in range(8)]
    assert spec["devices"][3]["containerEdits"]["deviceNodes"] == [
        {"path": "/dev/nvidia3", "hostPath": "/dev/nvidia3", "permissions": "rw"}
    ]
    common = [n["path"] for n in spec["containerEdits"]["deviceNodes"]]
    assert common == ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]


def test_cdi_spec_is_kept_current(fake_root: FakeRoot, make_driver: MakeDriver) -> None:
    """A deleted spec is written again at the next enumeration, in the configured directory."""
    driver = make_driver({"deviceListStrategy": ["cdi"], "cdiSpecDir": "/etc/cdi"})
    path = fake_root.at("/etc/cdi/devicehost-nvidia.com-gpu.json")
    path.unlink()
    driver.devicehost_enumerate(resource=GPU)
    assert json.loads(path.read_text())["kind"] == "nvidia.com/gpu"


def test_cdi_spec_is_not_written_without_cdi(fake_root: FakeRoot, make_driver: MakeDriver) -> None:
    """Without the cdi strategy, no spec file appears."""
    make_driver()
    assert not fake_root.at(SPEC).exists()


def test_unwritable_cdi_directory_is_a_note(fake_root: FakeRoot, make_driver: MakeDriver) -> None:
    """A spec that cannot be written is reported as a note; the driver still serves."""
    fake_root.write("/var/run/cdi", "a file where the directory should be")
    driver = make_driver({"deviceListStrategy": ["cdi"]})
    assert any(
        n.startswith("deviceListStrategy cdi: cannot write the CDI spec")
        for n in driver.devicehost_notes()
    )
    assert len(driver.devicehost_enumerate(resource=GPU)) == 8


def test_mig_devices_are_in_the_cdi_spec(fake_root: FakeRoot, make_driver: MakeDriver) -> None:
    """MIG devices get CDI entries by their MIG UUID, with their capability nodes."""
    node = default_node(gpus=1, mig={0: ["3g.40gb", "3g.40gb"]})
    make_driver({"migStrategy": "mixed", "deviceListStrategy": ["cdi"]}, node=node)
    spec = json.loads(fake_root.at(SPEC).read_text())
    migs = node.gpus[0].mig_devices()
    assert [d["name"] for d in spec["devices"]] == [m.uuid for m in migs]
    paths = [n["hostPath"] for n in spec["devices"][0]["containerEdits"]["deviceNodes"]]
    assert paths == ["/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap3", "/dev/nvidia-caps/nvidia-cap4"]
