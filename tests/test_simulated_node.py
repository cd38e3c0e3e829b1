"""A simulated node a container runtime can use: every host path an Allocate answer or a
CDI spec names exists on the node, and every device node there is a character device.

A runtime (containerd, through runc) stats each device node's host path and refuses a
missing one ("lstat …: no such file or directory") or a regular file ("not a device
node"), and a bind mount of a missing host path fails the container. Each published
machine is served by the real host to the kubelet stand-in, with the drivers set to hand
over device nodes and mounts themselves (NVIDIA's device-nodes strategy, Ascend without
its runtime; RDMA always does).
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from devicehost.model import ContainerEdits
from devicehost.testing import FakeRoot, HostThread, KubeletStandIn
from devicehost.testing.fakeroot import SIMULATED_DEVICE

#: The machines the real-cluster tier simulates, with the resources each must serve.
MACHINES = {
    "dgx-h100": ("nvidia.com/gpu", "rdma/hca", "rdma/hca_shared"),
    "atlas-800-9000": ("huawei.com/Ascend910",),
}
#: Driver settings under which each driver names device nodes (and mounts) itself.
NODES_AND_MOUNTS = {
    "nvidia": {"deviceListStrategy": ["envvar", "device-nodes"]},
    "ascend": {"useAscendRuntime": False},
}
#: Devices allocated per resource, one per Allocate (every GPU, HCA and NPU of the
#: machines; the first slots of a shared pool, which all give the same nodes).
PER_RESOURCE = 8


def mknod_permitted() -> bool:
    with tempfile.TemporaryDirectory() as directory:
        try:
            os.mknod(os.path.join(directory, "probe"), stat.S_IFCHR | 0o600, SIMULATED_DEVICE)
        except PermissionError:
            return False
    return True


needs_mknod = pytest.mark.skipif(
    not mknod_permitted(), reason="making device nodes needs root or CAP_MKNOD"
)


def serve(run_host, kubelet: KubeletStandIn, machine: str, **overrides) -> HostThread:  # type: ignore[no-untyped-def]
    host: HostThread = run_host(
        enabled_drivers=("nvidia", "ascend", "rdma"),
        simulate=True,
        simulate_node=machine,
        drivers=NODES_AND_MOUNTS,
        scan_interval=60.0,
        **overrides,
    )
    for resource in MACHINES[machine]:
        kubelet.wait_registered(resource, timeout=30)
        kubelet.wait_devices(resource, lambda d: len(d) > 0, timeout=30)
    return host


def answers(kubelet: KubeletStandIn, machine: str) -> list[ContainerEdits]:
    """One Allocate answer per device, for the first devices of every resource."""
    found = []
    for resource in MACHINES[machine]:
        healthy = [i for i, d in kubelet.devices(resource).items() if d.healthy]
        for device_id in healthy[:PER_RESOURCE]:
            found.extend(kubelet.allocate(resource, [[device_id]]))
    return found


def spec_edits(cdi_dir: Path) -> list[dict]:
    """Every containerEdits of every spec in ``cdi_dir``: each device's and the spec's."""
    edits = []
    for path in sorted(cdi_dir.glob("*.json")):
        spec = json.loads(path.read_text())
        edits += [d["containerEdits"] for d in spec["devices"]]
        edits.append(spec.get("containerEdits", {}))
    return edits


def is_character_device(path: str) -> bool:
    return stat.S_ISCHR(os.stat(path).st_mode)


@needs_mknod
@pytest.mark.parametrize("machine", list(MACHINES))
def test_answers_name_character_devices_on_the_node(run_host, kubelet, machine) -> None:
    """Every device node an Allocate answer names is a character device at that host
    path, as a runtime needs it."""
    serve(run_host, kubelet, machine)
    nodes = [d.host_path for answer in answers(kubelet, machine) for d in answer.devices]
    assert nodes, f"{machine}: no answer names a device node"
    assert [p for p in nodes if not is_character_device(p)] == []


@pytest.mark.parametrize("machine", list(MACHINES))
def test_answers_keep_the_container_paths_and_name_the_tree(run_host, kubelet, machine) -> None:
    """A device node's host path is its path in the driver's simulated tree; the path
    inside the container stays the one the driver declared (``/dev/...``)."""
    host = serve(run_host, kubelet, machine)
    trees = {
        name: str(host.simulated_root(r.driver.name).path)
        for name, r in host.host.resources.items()
    }
    pairs = []
    for resource in MACHINES[machine]:
        device_id = next(iter(kubelet.devices(resource)))
        (answer,) = kubelet.allocate(resource, [[device_id]])
        pairs += [(d.host_path, trees[resource] + d.container_path) for d in answer.devices]
        assert all(d.container_path.startswith("/dev/") for d in answer.devices)
    assert pairs and all(host_path == expected for host_path, expected in pairs)


def test_answers_mounts_exist_on_the_node(run_host, kubelet) -> None:
    """Every host path an answer mounts (the Ascend driver's libraries, version files and
    tools without its runtime) exists, so the runtime's bind mount succeeds."""
    serve(run_host, kubelet, "atlas-800-9000")
    mounts = [m.host_path for a in answers(kubelet, "atlas-800-9000") for m in a.mounts]
    assert mounts, "no answer names a mount"
    assert [p for p in mounts if not os.path.exists(p)] == []


@needs_mknod
@pytest.mark.parametrize("machine", list(MACHINES))
def test_cdi_specs_name_character_devices_on_the_node(run_host, kubelet, machine, tmp_path) -> None:
    """With CDI on, every deviceNodes hostPath of the host's specs is a character device."""
    cdi_dir = tmp_path / "cdi"
    serve(run_host, kubelet, machine, cdi_enabled=True, cdi_dir=cdi_dir)
    answers(kubelet, machine)  # the specs are on disk before an answer names them
    nodes = [n["hostPath"] for e in spec_edits(cdi_dir) for n in e.get("deviceNodes", [])]
    assert nodes, f"{machine}: no spec names a device node"
    assert [p for p in nodes if not is_character_device(p)] == []


def test_cdi_spec_mounts_exist_on_the_node(run_host, kubelet, tmp_path) -> None:
    """With CDI on, every mount hostPath of the host's specs exists."""
    cdi_dir = tmp_path / "cdi"
    serve(run_host, kubelet, "atlas-800-9000", cdi_enabled=True, cdi_dir=cdi_dir)
    answers(kubelet, "atlas-800-9000")
    mounts = [m["hostPath"] for e in spec_edits(cdi_dir) for m in e.get("mounts", [])]
    assert mounts, "no spec names a mount"
    assert [p for p in mounts if not os.path.exists(p)] == []


# -- the fake root's device nodes ----------------------------------------------------------


@needs_mknod
def test_char_device_is_a_null_character_device(tmp_path) -> None:
    """Where mknod is permitted, a device node is a character device with /dev/null's
    numbers (1:3), harmless to open in a container."""
    node = FakeRoot(tmp_path).char_device("/dev/infiniband/uverbs0")
    info = os.lstat(node)
    assert stat.S_ISCHR(info.st_mode)
    assert (os.major(info.st_rdev), os.minor(info.st_rdev)) == (1, 3)


@needs_mknod
def test_removing_a_device_node_removes_it(tmp_path) -> None:
    """``remove`` takes a character device away (an unplugged device), as it does a file."""
    root = FakeRoot(tmp_path)
    root.char_device("/dev/davinci0")
    root.remove("/dev/davinci0")
    assert not os.path.lexists(root.at("/dev/davinci0"))


FALLBACK = """
import logging, os, stat, sys
logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
from devicehost.testing import FakeRoot
root = FakeRoot(sys.argv[1])
for name in ("/dev/davinci0", "/dev/davinci1"):
    print("regular" if stat.S_ISREG(os.lstat(root.char_device(name)).st_mode) else "other")
"""


PR_CAPBSET_DROP, CAP_MKNOD = 24, 27  # linux/prctl.h, linux/capability.h


def _without_cap_mknod() -> None:
    """In the child before exec: drop CAP_MKNOD from the bounding set, so the program it
    runs as root has no CAP_MKNOD (mknod then fails with EPERM, as in a pod whose
    capabilities are all dropped)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_CAPBSET_DROP, CAP_MKNOD, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP, CAP_MKNOD)")


def test_without_mknod_device_nodes_are_files_said_once() -> None:
    """Where mknod is refused (here: a process without CAP_MKNOD), device nodes fall back
    to regular files, so an unprivileged demo still runs, and one warning says why."""
    tree = Path(tempfile.mkdtemp(prefix="dh-fallback-"))
    try:
        result = subprocess.run(
            [sys.executable, "-c", FALLBACK, str(tree)],
            capture_output=True,
            text=True,
            check=True,
            preexec_fn=_without_cap_mknod if os.geteuid() == 0 else None,
        )
    finally:
        shutil.rmtree(tree)
    assert result.stdout.split() == ["regular", "regular"]
    warnings = [line for line in result.stderr.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 1 and "cannot make device nodes" in warnings[0], result.stderr
