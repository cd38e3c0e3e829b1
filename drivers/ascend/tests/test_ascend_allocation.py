"""The exact Allocation a container gets in each mode."""

from __future__ import annotations

import json

import pytest
from ascend_helpers import open_simulated
from devicehost_ascend.dcmi_sim import SimulatedDcmi

from devicehost import Allocation, DeviceNode, Mount, UnknownDevice
from devicehost.testing import FakeRoot

NPU = "huawei.com/Ascend910"
VNPU = "huawei.com/Ascend910-4c"
SHARED = (
    DeviceNode(host_path="/dev/davinci_manager"),
    DeviceNode(host_path="/dev/devmm_svm"),
    DeviceNode(host_path="/dev/hisi_hdc"),
)
MOUNTS = tuple(
    Mount(host_path=p, container_path=p, read_only=True)
    for p in ("/usr/local/Ascend/driver/lib64", "/usr/local/dcmi", "/usr/local/bin/npu-smi")
)


def test_ascend_runtime_gets_physical_ids_only(fake_root: FakeRoot) -> None:
    """Default mode: only ASCEND_VISIBLE_DEVICES, physical IDs in ascending order."""
    node = open_simulated(fake_root, SimulatedDcmi.preset("ascend910x8"))
    assert node.allocate(NPU, ["Ascend910-6", "Ascend910-4"]) == Allocation(
        envs={"ASCEND_VISIBLE_DEVICES": "4,6"}
    )


def test_ascend_runtime_gets_vnpu_ids_and_the_virtual_option(fake_root: FakeRoot) -> None:
    """vNPUs: their vNPU IDs and ASCEND_RUNTIME_OPTIONS=VIRTUAL."""
    node = open_simulated(fake_root, SimulatedDcmi.preset("ascend910x8-vnpu"))
    assert node.allocate(VNPU, ["Ascend910-4c-213-7"]) == Allocation(
        envs={"ASCEND_VISIBLE_DEVICES": "213", "ASCEND_RUNTIME_OPTIONS": "VIRTUAL"}
    )


def test_plain_runtime_gets_nodes_and_driver_mounts(fake_root: FakeRoot) -> None:
    """useAscendRuntime false: the chips' nodes, the shared nodes, read-only driver mounts."""
    node = open_simulated(fake_root, SimulatedDcmi.preset("ascend910x8"), useAscendRuntime=False)
    assert node.allocate(NPU, ["Ascend910-1", "Ascend910-0"]) == Allocation(
        devices=(
            DeviceNode(host_path="/dev/davinci0"),
            DeviceNode(host_path="/dev/davinci1"),
            *SHARED,
        ),
        mounts=MOUNTS,
    )


def test_plain_runtime_maps_vdavinci_to_davinci(fake_root: FakeRoot) -> None:
    """A vNPU's host node /dev/vdavinciN is /dev/davinciN inside the container."""
    node = open_simulated(
        fake_root, SimulatedDcmi.preset("ascend910x8-vnpu"), useAscendRuntime=False
    )
    allocation = node.allocate(VNPU, ["Ascend910-4c-214-7"])
    assert allocation.devices[0] == DeviceNode(
        host_path="/dev/vdavinci214", container_path="/dev/davinci214"
    )
    assert allocation.envs == {}


def test_only_nodes_and_mounts_present_under_root_are_passed(fake_root: FakeRoot) -> None:
    """dvpp_cmdlist is passed when it exists; a driver path missing on the host is not."""
    node = open_simulated(fake_root, SimulatedDcmi.preset("ascend910x8"), useAscendRuntime=False)
    fake_root.char_device("/dev/dvpp_cmdlist")
    fake_root.remove("/usr/local/bin/npu-smi")
    allocation = node.allocate(NPU, ["Ascend910-0"])
    assert [d.host_path for d in allocation.devices] == [
        "/dev/davinci0",
        "/dev/davinci_manager",
        "/dev/devmm_svm",
        "/dev/hisi_hdc",
        "/dev/dvpp_cmdlist",
    ]
    assert [m.host_path for m in allocation.mounts] == [
        "/usr/local/Ascend/driver/lib64",
        "/usr/local/dcmi",
    ]


def test_configured_shared_nodes_and_mounts_replace_the_defaults(fake_root: FakeRoot) -> None:
    """sharedDeviceNodes and driverMounts say exactly what is passed besides the chips."""
    fake_root.write("/opt/ascend/version.info", "1")
    node = open_simulated(
        fake_root,
        SimulatedDcmi.preset("ascend910x8"),
        useAscendRuntime=False,
        sharedDeviceNodes=["/dev/hisi_hdc"],
        driverMounts=["/opt/ascend"],
    )
    assert node.allocate(NPU, ["Ascend910-2"]) == Allocation(
        devices=(DeviceNode(host_path="/dev/davinci2"), DeviceNode(host_path="/dev/hisi_hdc")),
        mounts=(Mount(host_path="/opt/ascend", container_path="/opt/ascend"),),
    )


def test_cdi_names_devices_and_writes_their_spec(fake_root: FakeRoot) -> None:
    """useCdi: CDI names in the answer; the spec carries the nodes, shared nodes and mounts."""
    node = open_simulated(
        fake_root,
        SimulatedDcmi.preset("ascend910x8-vnpu"),
        useAscendRuntime=False,
        useCdi=True,
        cdiDir="/cdi",
    )
    assert node.allocate(NPU, ["Ascend910-3", "Ascend910-1"]) == Allocation(
        cdi_devices=("huawei.com/npu=Ascend910-1", "huawei.com/npu=Ascend910-3")
    )
    spec = json.loads(fake_root.at("/cdi/devicehost-huawei.com-npu.json").read_text())
    assert spec["kind"] == "huawei.com/npu"
    devices = {d["name"]: d["containerEdits"] for d in spec["devices"]}
    assert len(devices) == 12
    assert devices["Ascend910-1"] == {
        "deviceNodes": [{"path": "/dev/davinci1", "hostPath": "/dev/davinci1", "permissions": "rw"}]
    }
    assert devices["Ascend910-4c-212-7"] == {
        "deviceNodes": [
            {"path": "/dev/davinci212", "hostPath": "/dev/vdavinci212", "permissions": "rw"}
        ]
    }
    common = spec["containerEdits"]
    assert [n["path"] for n in common["deviceNodes"]] == [d.host_path for d in SHARED]
    assert [m["hostPath"] for m in common["mounts"]] == [m.host_path for m in MOUNTS]


def test_cdi_spec_is_written_under_root_at_the_host_cdi_dir(fake_root: FakeRoot) -> None:
    """cdiDir names a host directory: the default /var/run/cdi is written at
    <root>/var/run/cdi, where the pod mounts the host's, and nowhere else."""
    node = open_simulated(
        fake_root, SimulatedDcmi.preset("ascend910x8"), useAscendRuntime=False, useCdi=True
    )
    written = node.allocator.write_cdi_spec(node.inventory.all())
    assert written == fake_root.at("/var/run/cdi/devicehost-huawei.com-npu.json")
    assert [p.name for p in fake_root.at("/var/run/cdi").iterdir()] == [written.name]


def test_unknown_device_is_refused(fake_root: FakeRoot) -> None:
    """An ID the resource does not have raises UnknownDevice naming resource and ID."""
    node = open_simulated(fake_root, SimulatedDcmi.preset("ascend910x8-vnpu"))
    with pytest.raises(UnknownDevice, match=r"'Ascend910-7' for resource 'huawei\.com/Ascend910'"):
        node.allocate(NPU, ["Ascend910-0", "Ascend910-7"])
