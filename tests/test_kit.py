"""The testing kit itself: what driver authors rely on must behave as documented."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from devicehost.testing import FakeRoot
from support import SCRIPTED


def test_wait_devices_accepts_an_empty_list(install, run_host, kubelet):
    """A resource registered with no devices can be waited for (an empty list is a list)."""
    install("devicehost-alpha", drivers={"alpha": SCRIPTED})
    run_host(enabled_drivers=("alpha",), drivers={"alpha": {"resources": {"a.example/x": 0}}})
    kubelet.wait_registered("a.example/x")
    assert kubelet.wait_devices("a.example/x", lambda devices: devices == {}) == {}


def test_driver_path_gives_the_path_the_driver_declared_under_simulation(kubelet, run_host):
    """Under simulation an answer names a device node inside the driver's simulated tree;
    driver_path takes the tree off, giving the path the template declares."""
    host = run_host(enabledDrivers=["template"], simulate=True)
    kubelet.wait_devices("example.com/widget", lambda devices: len(devices) == 4)
    (container,) = kubelet.allocate("example.com/widget", [["widget1"]])
    (node,) = container.devices
    assert node.host_path != "/dev/widget1"
    assert host.driver_path("template", node.host_path) == "/dev/widget1"
    assert host.driver_path("template", "/dev/widget1") == "/dev/widget1"


def test_fake_pci_device_refuses_a_different_device_at_a_taken_address(tmp_path):
    """Two simulated devices at one PCI address would corrupt each other: refused."""
    root = FakeRoot(tmp_path)
    root.pci_device("0000:17:00.0", vendor="0x10de", device="0x20b5", numa_node=0)
    root.pci_device("0000:17:00.0", vendor="0x10de", device="0x20b5", numa_node=0)
    with pytest.raises(ValueError, match="already a 0x10de:0x20b5 device"):
        root.pci_device("0000:17:00.0", vendor="0x15b3", device="0x1017")


def test_fake_pci_device_layout(tmp_path):
    """A PCI function has its attributes, driver link and bus link, all relative links."""
    root = FakeRoot(tmp_path)
    rel = root.pci_device(
        "0000:3b:00.0", vendor="0x15b3", device="0x1017", numa_node=1, driver="mlx5_core"
    )
    device = root.at("/sys/bus/pci/devices/0000:3b:00.0")
    assert device.resolve() == root.at(rel).resolve()
    assert (device / "numa_node").read_text() == "1\n"
    assert (device / "driver").resolve().name == "mlx5_core"
    assert not (device / "driver").readlink().is_absolute()


def test_fake_pci_device_is_listed_under_its_driver_as_sysfs_lists_it(tmp_path):
    """/sys/bus/pci/drivers/<driver>/<address> leads to the function (what a driver that
    lists its kernel driver's functions reads, e.g. vfio-pci's), by a relative link."""
    root = FakeRoot(tmp_path)
    rel = root.pci_device("0000:3d:01.0", vendor="0x8086", device="0x4941", driver="vfio-pci")
    bound = root.at("/sys/bus/pci/drivers/vfio-pci/0000:3d:01.0")
    assert bound.resolve() == root.at(rel).resolve()
    assert not bound.readlink().is_absolute()
    assert [p.name for p in root.at("/sys/bus/pci/drivers/vfio-pci").iterdir()] == ["0000:3d:01.0"]


def test_write_distribution_takes_a_string_site(tmp_path):
    from devicehost.testing import write_distribution

    info = write_distribution(str(tmp_path), "devicehost-acme", {"devicehost.drivers": {}})
    assert info.parent == tmp_path and (info / "METADATA").exists()


def test_a_device_list_timeout_says_what_the_stand_in_saw_last(install, run_host, kubelet):
    """A wait that times out names the last list, with each device's health and its age,
    so a failing test says what arrived instead of only what did not."""
    install("devicehost-alpha", drivers={"alpha": SCRIPTED})
    run_host(enabled_drivers=("alpha",), drivers={"alpha": {"resources": {"a.example/x": 2}}})
    kubelet.wait_devices("a.example/x", lambda devices: len(devices) == 2)
    with pytest.raises(TimeoutError) as timed_out:
        kubelet.wait_health("a.example/x", "dev-1", "Unhealthy", timeout=0.2)
    message = str(timed_out.value)
    assert "the last list of 'a.example/x' arrived" in message
    assert "with 2 devices: dev-0 Healthy, dev-1 Healthy" in message


def test_fake_root_write_is_atomic_like_sysfs(tmp_path):
    """A reader polling an attribute while a test rewrites it sees the old text or the
    new, never an empty attribute (a driver's watch would take that for a fault)."""
    import threading

    root = FakeRoot(tmp_path)
    path = root.write("/sys/class/widget/widget0/health", "ok")
    seen: set[str] = set()
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            seen.add(path.read_text())

    reader = threading.Thread(target=poll, daemon=True)
    reader.start()
    try:
        for index in range(2000):
            root.write("/sys/class/widget/widget0/health", "fault" if index % 2 else "ok")
    finally:
        done.set()
        reader.join(10)
    assert seen <= {"ok\n", "fault\n"}, seen


def test_fake_root_writes_create_their_parents_and_replace_what_was_there(tmp_path):
    """Files, links and device stand-ins land in directories that do not exist yet, a
    second write replaces the first (shorter text leaves nothing of the longer), and a
    link re-made points at its new target."""
    root = FakeRoot(tmp_path)
    written = root.write("/sys/class/net/eth0/operstate", "down-for-maintenance")
    assert written == tmp_path / "sys/class/net/eth0/operstate"
    root.write("sys/class/net/eth0/operstate", "up")
    assert written.read_text() == "up\n"
    assert root.write("/sys/empty").read_text() == ""
    assert root.char_device("/dev/infiniband/uverbs0").exists()
    root.symlink("/sys/class/net/eth0/device", "/sys/devices/a")
    link = root.symlink("/sys/class/net/eth0/device", "/sys/devices/b")
    assert link.readlink() == Path("../../../devices/b")


def test_fake_root_symlink_takes_a_sysfs_style_relative_target(tmp_path):
    """A relative target is read from the link's directory, as the kernel writes sysfs
    links: the link resolves to the device, not to a broken path."""
    root = FakeRoot(tmp_path / "root")
    device = root.mkdir("/sys/devices/pci0000:00/0000:3b:00.0")
    link = root.symlink(
        "/sys/bus/pci/devices/0000:3b:00.0", "../../../devices/pci0000:00/0000:3b:00.0"
    )
    assert link.readlink() == Path("../../../devices/pci0000:00/0000:3b:00.0")
    assert link.resolve(strict=True) == device.resolve()


def test_fake_root_symlink_refuses_a_target_outside_the_tree(tmp_path):
    """A relative target that climbs out of the fake root is refused, naming the link."""
    root = FakeRoot(tmp_path / "root")
    with pytest.raises(
        ValueError, match=r"symlink /sys/class/x -> \.\./\.\./\.\./\.\./etc: .*outside"
    ):
        root.symlink("/sys/class/x", "../../../../etc")
    assert not root.at("/sys/class/x").is_symlink()


def test_fake_pci_device_returns_its_root_relative_path(tmp_path):
    """pci_device returns the device's path from the root, with its leading slash, as its
    docstring says; the other helpers take it as it is."""
    root = FakeRoot(tmp_path)
    rel = root.pci_device("0000:3b:00.0", vendor="0x15b3", device="0x1017")
    assert rel == "/sys/devices/pci0000:00/0000:3b:00.0"
    assert root.write(f"{rel}/net/eth0/address", "aa").parent.parent.parent == root.at(rel)


def test_fake_root_files_are_not_executable(tmp_path):
    """Attributes and device nodes are read-write and not executable, as sysfs and /dev
    show them."""
    root = FakeRoot(tmp_path)
    for path in (root.write("/sys/a/attr", "1"), root.char_device("/dev/x")):
        assert path.stat().st_mode & 0o111 == 0


KUBELET_RESTARTS_IN_PROCESS = """
import sys, tempfile
from pathlib import Path
from devicehost.config.host_config import HostConfig
from devicehost.testing.hostthread import HostThread
from devicehost.testing.kubelet import KubeletStandIn

work = Path(sys.argv[1])
kubelet = KubeletStandIn(work / "dp", start=True)
config = HostConfig(
    plugin_dir=work / "dp", root=work, simulate=True, enabled_drivers=("template",),
    metrics_address="", pod_resources_socket=None,
)
host = HostThread(config).start()
for restart in range(1, 11):
    for name in host.host.resources:
        kubelet.wait_registered(name, count=restart)
    kubelet.restart()
kubelet.close()
host.stop()
"""


def test_the_kit_in_process_writes_no_grpc_chatter(tmp_path):
    """A host and kubelet stand-in in one process (a driver author's test), through kubelet
    restarts that cut calls off, write none of gRPC's connection chatter ("Got goaway") to
    stderr, with GRPC_VERBOSITY unset."""
    script = tmp_path / "restarts.py"
    script.write_text(KUBELET_RESTARTS_IN_PROCESS)
    env = {k: v for k, v in os.environ.items() if k != "GRPC_VERBOSITY"}
    result = subprocess.run(
        [sys.executable, str(script), str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "kubelet restart detected" in result.stderr  # the restarts happened
    assert "goaway" not in result.stderr.lower(), result.stderr
