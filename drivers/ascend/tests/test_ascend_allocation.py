"""The container edits each device and resource declares, and what the host composes."""

from __future__ import annotations

from collections.abc import Sequence

from ascend_helpers import chip, open_simulated
from devicehost_ascend.dcmi_sim import SimulatedDcmi
from devicehost_ascend.node import AscendNode

from devicehost import ContainerEdits, DeviceNode, Mount
from devicehost.edits.compose import compose
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
    for p in (
        "/usr/local/Ascend/driver/lib64",
        "/usr/local/Ascend/driver/include",
        "/usr/local/Ascend/driver/version.info",
        "/etc/ascend_install.info",
        "/usr/local/dcmi",
        "/usr/local/bin/npu-smi",
    )
)


def composed(node: AscendNode, resource: str, ids: Sequence[str]) -> ContainerEdits:
    """What the host answers for one container, composed by the host's own code."""
    spec = next(s for s in node.specs() if s.name == resource)
    devices = {d.id: d for d in node.enumerate(resource)}
    return compose(spec, devices, ids)


def test_ascend_runtime_joins_physical_ids_in_request_order(fake_root: FakeRoot) -> None:
    """Default mode: one device gives its physical ID, two give both in request order, and
    every device gives all eight; nothing but ASCEND_VISIBLE_DEVICES."""
    node = open_simulated(fake_root, SimulatedDcmi.preset("ascend910x8"))
    assert composed(node, NPU, ["Ascend910-6"]) == ContainerEdits(
        envs={"ASCEND_VISIBLE_DEVICES": "6"}
    )
    assert composed(node, NPU, ["Ascend910-6", "Ascend910-4"]) == ContainerEdits(
        envs={"ASCEND_VISIBLE_DEVICES": "6,4"}
    )
    every = [f"Ascend910-{i}" for i in range(8)]
    assert composed(node, NPU, every) == ContainerEdits(
        envs={"ASCEND_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}
    )


def test_the_resource_declares_the_joined_variable(fake_root: FakeRoot) -> None:
    """ASCEND_VISIBLE_DEVICES is the resource's joined variable; the runtime needs nothing
    per resource on a 910."""
    node = open_simulated(fake_root, SimulatedDcmi.preset("ascend910x8"))
    (spec,) = node.specs()
    assert (spec.joined_envs, spec.edits) == (("ASCEND_VISIBLE_DEVICES",), ContainerEdits())


def test_ascend_runtime_gets_vnpu_ids_and_the_virtual_option(fake_root: FakeRoot) -> None:
    """vNPUs: their vNPU IDs and ASCEND_RUNTIME_OPTIONS=VIRTUAL, once for two vNPUs."""
    node = open_simulated(fake_root, SimulatedDcmi.preset("ascend910x8-vnpu"))
    assert composed(node, VNPU, ["Ascend910-4c-213-7", "Ascend910-4c-212-7"]) == ContainerEdits(
        envs={"ASCEND_VISIBLE_DEVICES": "213,212", "ASCEND_RUNTIME_OPTIONS": "VIRTUAL"}
    )


def test_plain_runtime_gets_nodes_shared_nodes_and_what_cann_reads(fake_root: FakeRoot) -> None:
    """useAscendRuntime false: the shared nodes and the driver files CANN reads (libraries,
    headers, version.info, ascend_install.info, DCMI, npu-smi) once, read-only, then each
    chip's node; no ASCEND_* variable."""
    node = open_simulated(fake_root, SimulatedDcmi.preset("ascend910x8"), useAscendRuntime=False)
    assert composed(node, NPU, ["Ascend910-1", "Ascend910-0"]) == ContainerEdits(
        devices=(
            *SHARED,
            DeviceNode(host_path="/dev/davinci1"),
            DeviceNode(host_path="/dev/davinci0"),
        ),
        mounts=MOUNTS,
    )


def test_plain_runtime_maps_vdavinci_to_davinci(fake_root: FakeRoot) -> None:
    """A vNPU's host node /dev/vdavinciN is /dev/davinciN inside the container."""
    node = open_simulated(
        fake_root, SimulatedDcmi.preset("ascend910x8-vnpu"), useAscendRuntime=False
    )
    (device,) = [d for d in node.enumerate(VNPU) if d.id == "Ascend910-4c-214-7"]
    assert device.edits == ContainerEdits(
        devices=(DeviceNode(host_path="/dev/vdavinci214", container_path="/dev/davinci214"),)
    )


def test_only_nodes_and_mounts_present_under_root_are_declared(fake_root: FakeRoot) -> None:
    """dvpp_cmdlist is passed when it exists; a driver path missing on the host is not."""
    SimulatedDcmi.preset("ascend910x8").build_tree(fake_root.path)
    fake_root.char_device("/dev/dvpp_cmdlist")
    fake_root.remove("/usr/local/bin/npu-smi")
    fake_root.remove("/etc/ascend_install.info")
    node = open_simulated(fake_root, SimulatedDcmi.preset("ascend910x8"), useAscendRuntime=False)
    fake_root.remove("/usr/local/bin/npu-smi")
    fake_root.remove("/etc/ascend_install.info")
    (spec,) = node.specs()
    assert [d.host_path for d in spec.edits.devices] == [
        "/dev/davinci_manager",
        "/dev/devmm_svm",
        "/dev/hisi_hdc",
        "/dev/dvpp_cmdlist",
    ]
    assert "/usr/local/bin/npu-smi" not in [m.host_path for m in spec.edits.mounts]
    assert "/etc/ascend_install.info" not in [m.host_path for m in spec.edits.mounts]


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
    assert composed(node, NPU, ["Ascend910-2"]) == ContainerEdits(
        devices=(DeviceNode(host_path="/dev/hisi_hdc"), DeviceNode(host_path="/dev/davinci2")),
        mounts=(Mount(host_path="/opt/ascend", container_path="/opt/ascend"),),
    )


def test_ascend_310b_runtime_gets_allow_link(fake_root: FakeRoot) -> None:
    """Ascend 310B under Ascend Docker Runtime: ASCEND_ALLOW_LINK=True with every container,
    as the reference plugin sets it for that chip (common.go, SetAscendRuntimeEnv)."""
    node = open_simulated(fake_root, SimulatedDcmi([[chip(0, "310B1")]]))
    assert composed(node, "huawei.com/Ascend310B", ["Ascend310B-0"]) == ContainerEdits(
        envs={"ASCEND_ALLOW_LINK": "True", "ASCEND_VISIBLE_DEVICES": "0"}
    )


def test_ascend_310b_plain_runtime_uses_the_docker_manager_node(fake_root: FakeRoot) -> None:
    """Ascend 310B without the runtime: /dev/davinci_manager_docker (when the host has it)
    is the container's /dev/davinci_manager, and the 310B's media nodes come along."""
    fake_root.char_device("/dev/davinci_manager_docker")
    fake_root.char_device("/dev/vpc")
    fake_root.char_device("/dev/venc")
    node = open_simulated(fake_root, SimulatedDcmi([[chip(0, "310B1")]]), useAscendRuntime=False)
    (spec,) = node.specs()
    assert spec.edits.devices[:1] == (
        DeviceNode(host_path="/dev/davinci_manager_docker", container_path="/dev/davinci_manager"),
    )
    assert {d.host_path for d in spec.edits.devices} >= {"/dev/vpc", "/dev/venc"}


def test_a_910_keeps_the_ordinary_manager_node(fake_root: FakeRoot) -> None:
    """Only a 310B swaps in /dev/davinci_manager_docker; a 910 node that has it still
    gets /dev/davinci_manager."""
    fake_root.char_device("/dev/davinci_manager_docker")
    node = open_simulated(fake_root, SimulatedDcmi.preset("ascend910x8"), useAscendRuntime=False)
    (spec,) = node.specs()
    assert spec.edits.devices[0] == DeviceNode(host_path="/dev/davinci_manager")


def test_retired_cdi_keys_start_with_a_note_and_write_nothing(fake_root: FakeRoot) -> None:
    """useCdi / cdiDir are accepted (old configs still start), do nothing, and say so: the
    host writes CDI specs from the edits now."""
    node = open_simulated(
        fake_root,
        SimulatedDcmi.preset("ascend910x8"),
        useAscendRuntime=False,
        useCdi=True,
        cdiDir="/cdi",
    )
    assert any(n.startswith("useCdi: ignored; the host writes CDI specs") for n in node.notes)
    assert not fake_root.at("/cdi").exists()
    assert not fake_root.at("/var/run/cdi").exists()
