"""What a third-party driver author relies on (issue: a stranger's driver works the first
time): the template is standalone, make keeps their driver installed, the kit speaks
devicehost's model and the YAML keys, simulation follows config in a tree per driver and
never inside --root, and the documented surface matches the code."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import grpc
import pytest

from devicehost import ContainerEdits, Device, DeviceNode, Health, sysfs
from devicehost.errors import ConfigError
from devicehost.testing import FakeRoot, write_distribution
from devicehost.testing.kubelet import PluginOptions, Registration

ROOT = Path(__file__).resolve().parent.parent
WRITING = (ROOT / "docs" / "writing-a-driver.md").read_text()
REFERENCE = (ROOT / "docs" / "reference.md").read_text()
WIDGET = "example.com/widget"


def test_template_installs_outside_the_repository():
    """Item 1: the template names devicehost as a plain dependency (no uv workspace
    source), and the docs say how to install beside the pip-less development venv."""
    meta = tomllib.loads((ROOT / "drivers/_template/pyproject.toml").read_text())
    assert meta["project"]["dependencies"] == ["devicehost"]
    assert "uv" not in meta.get("tool", {})
    assert "uv pip install --python <that python> -e" in WRITING


def test_make_never_uninstalls_drivers_beside_the_lock():
    """Item 2: every `uv sync` make runs is --inexact, and every `uv run` skips syncing."""
    commands = subprocess.run(
        ["make", "-n", "-B", "setup", "demo", "test", "lint"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    syncs = [line for line in commands.splitlines() if " sync " in line]
    runs = [line for line in commands.splitlines() if " run " in line]
    assert syncs and all("--inexact" in line for line in syncs), syncs
    assert runs and all("--no-sync" in line for line in runs), runs


def test_kit_returns_model_types(kubelet, run_host):
    """Items 3 and 15: lists are {id: Device}, Allocate is one ContainerEdits per
    container, a preference is a list of IDs, registrations and options are kit types."""
    host = run_host(enabledDrivers=["template"], simulate=True)
    tree = str(host.simulated_root("template").path)
    registration = kubelet.wait_registered(WIDGET)
    assert isinstance(registration, Registration)
    assert registration.endpoint == "devicehost-example.com_widget.sock"
    devices = kubelet.wait_devices(WIDGET, lambda d: len(d) == 4)
    assert devices["widget1"] == Device(id="widget1", health=Health.HEALTHY, numa_nodes=(1,))
    containers = kubelet.allocate(WIDGET, [["widget0"], ["widget2", "widget1"]])
    assert containers == (
        ContainerEdits(
            envs={"WIDGET_VISIBLE_DEVICES": "widget0"},
            devices=(DeviceNode(host_path=tree + "/dev/widget0", container_path="/dev/widget0"),),
        ),
        ContainerEdits(
            envs={"WIDGET_VISIBLE_DEVICES": "widget2,widget1"},
            devices=(
                DeviceNode(host_path=tree + "/dev/widget2", container_path="/dev/widget2"),
                DeviceNode(host_path=tree + "/dev/widget1", container_path="/dev/widget1"),
            ),
        ),
    )
    assert containers.container_responses is containers  # tests written for the wire shape
    assert kubelet.preferred_allocation(WIDGET, ["widget0", "widget1"], size=1) in (
        ["widget0"],
        ["widget1"],
    )
    assert kubelet.options(WIDGET) == PluginOptions(get_preferred_allocation_available=True)
    raw = kubelet.allocate_raw(WIDGET, [["widget3"]])
    assert raw.container_responses[0].devices[0].host_path == tree + "/dev/widget3"


def test_kit_refusals_raise_grpc_errors(kubelet, run_host):
    """Item 15: a refused Allocate raises grpc.RpcError, as documented."""
    run_host(enabledDrivers=["template"], simulate=True)
    kubelet.wait_devices(WIDGET, lambda d: len(d) == 4)
    with pytest.raises(grpc.RpcError):
        kubelet.allocate(WIDGET, [["widget99"]])


def test_run_host_takes_yaml_keys_checked_as_the_file(run_host):
    """Item 3: run_host overrides are the YAML keys, nested sections included, and a bad
    key or value is a ConfigError naming it."""
    host = run_host(
        enabledDrivers=["template"],
        registration={"maxBackoffSeconds": 0.7},
        metrics={"address": ""},
    )
    assert host.config.enabled_drivers == ("template",)
    assert host.config.max_backoff == 0.7
    with pytest.raises(ConfigError, match=r"registration\.maxBackof: unknown key"):
        run_host(registration={"maxBackof": 1})
    with pytest.raises(ConfigError, match="scanIntervalSeconds: expected between"):
        run_host(scanIntervalSeconds=0.000001)


def test_simulation_follows_the_drivers_config(kubelet, run_host):
    """Item 4: the template's simulatedCount shapes the simulated node it serves."""
    run_host(
        enabledDrivers=["template"], simulate=True, drivers={"template": {"simulatedCount": 2}}
    )
    assert sorted(kubelet.wait_devices(WIDGET, lambda d: len(d) > 0)) == ["widget0", "widget1"]


def test_simulation_never_builds_inside_root(kubelet, run_host, tmp_path):
    """Item 5: with --simulate and a --root, the fake tree is built elsewhere and the root
    is left untouched."""
    root = tmp_path / "host-root"
    root.mkdir()
    host = run_host(enabledDrivers=["template"], simulate=True, root=str(root))
    kubelet.wait_devices(WIDGET, lambda d: len(d) == 4)
    assert list(root.iterdir()) == []
    assert root not in host.simulated_root("template").path.parents


def test_two_drivers_simulating_the_same_pci_address_both_serve(install, kubelet, run_host):
    """Item 6: two drivers simulating different devices at one PCI address each get their
    own tree: no collision, and both resources serve their own device."""
    install(
        "devicehost-pci-twins",
        drivers={
            "alpha": "testdrivers.author_kit:PciAlpha",
            "beta": "testdrivers.author_kit:PciBeta",
        },
    )
    host = run_host(enabledDrivers=["alpha", "beta"], simulate=True)
    for resource, vendor in (("alpha.example/pci", "0x10de"), ("beta.example/pci", "0x1002")):
        kubelet.wait_devices(resource, lambda d: list(d) == ["0000-3b-00.0"])
        (container,) = kubelet.allocate(resource, [["0000-3b-00.0"]])
        assert container.envs == {"PCI_VENDOR": vendor}
    assert host.simulated_root("alpha").path != host.simulated_root("beta").path


def test_fake_root_refuses_a_pci_collision_within_one_tree(tmp_path):
    """Item 6: inside one tree, a second different device at a taken address is refused;
    another tree may use the address."""
    tree = FakeRoot(tmp_path / "a")
    tree.pci_device("0000:3b:00.0", vendor="0x10de", device="0x2330")
    with pytest.raises(ValueError, match="already a 0x10de:0x2330 device"):
        tree.pci_device("0000:3b:00.0", vendor="0x15b3", device="0x1021")
    FakeRoot(tmp_path / "b").pci_device("0000:3b:00.0", vendor="0x15b3", device="0x1021")


def test_documented_surface_matches_the_code():
    """Item 8: DeviceNode's docstring states its real default, the module:Class entry-point
    form is documented, and every public sysfs helper is documented with its signature."""
    default = DeviceNode(host_path="/dev/x").permissions
    assert f"the default ``{default}``" in (DeviceNode.__doc__ or "")
    assert "package.module:ClassName" in WRITING
    for name in sysfs.__all__:
        signature = re.search(rf"`{name}\(([^)]*)\)", REFERENCE)
        assert signature, f"{name} is not documented in docs/reference.md"
        params = [p.split("=")[0].strip() for p in signature.group(1).split(",")]
        function = getattr(sysfs, name)
        assert params == list(function.__code__.co_varnames[: function.__code__.co_argcount])


def test_every_kit_name_is_documented_with_its_return():
    """Item 15: each public name of devicehost.testing appears in docs/reference.md."""
    import devicehost.testing as kit

    missing = [name for name in kit.__all__ if not re.search(rf"`{name}\b", REFERENCE)]
    assert missing == []


def kit_command(*args: str) -> list[str]:
    """``python -m devicehost.testing ARGS`` as a child process's argv."""
    return [sys.executable, "-m", "devicehost.testing", *args]


def kit_env(site: Path | None = None) -> dict[str, str]:
    paths = [str(ROOT / "tests"), *([str(site)] if site else [])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


def test_serve_shows_registration_devices_and_an_allocate_answer():
    """`python -m devicehost.testing serve` serves the installed template outside pytest
    and prints its simulated tree, its registration, its devices and an Allocate answer."""
    result = subprocess.run(
        kit_command("serve", "template", "--driver-config", "{simulatedCount: 2}"),
        capture_output=True, text=True, timeout=120, env=kit_env(),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert out.startswith("driver template: active (devicehost-template ")
    tree = re.search(r"^  simulated tree: (\S+)$", out, re.MULTILINE)
    assert tree and Path(tree.group(1)).name == "template"
    assert Path(tree.group(1)).parent.name.startswith("devicehost-sim-")
    assert (
        "example.com/widget\n"
        "  registered: endpoint devicehost-example.com_widget.sock, version v1beta1, "
        "pre-start False, preferred allocation True\n"
        "  devices (2, 2 healthy):\n"
    ) in out
    assert re.search(r"^    widget1 +Healthy +numa 1$", out, re.MULTILINE)
    assert (
        "  Allocate ['widget0']:\n"
        "    env WIDGET_VISIBLE_DEVICES=widget0\n"
        f"    device {tree.group(1)}/dev/widget0->/dev/widget0 (rw)\n"
    ) in out
    assert not Path(tree.group(1)).exists()  # removed when it stopped


def test_serve_allocates_the_devices_asked_for_and_reports_a_refusal():
    """--allocate chooses the devices; an ID the driver does not have is refused, shown
    with the gRPC code, and the command exits 1."""
    ok = subprocess.run(
        kit_command("serve", "template", "--allocate", "widget3,widget1"),
        capture_output=True, text=True, timeout=120, env=kit_env(),
    )  # fmt: skip
    assert "    env WIDGET_VISIBLE_DEVICES=widget3,widget1\n" in ok.stdout, ok.stdout + ok.stderr
    refused = subprocess.run(
        kit_command("serve", "template", "--allocate", "widget9"),
        capture_output=True, text=True, timeout=120, env=kit_env(),
    )  # fmt: skip
    assert refused.returncode == 1
    assert (
        "  Allocate ['widget9']: refused, INVALID_ARGUMENT: unknown device ID 'widget9' for "
        "resource 'example.com/widget'"
    ) in refused.stdout


def test_serve_allocates_each_asked_id_in_the_resource_that_has_it():
    """A multi-resource driver (rdma: an exclusive pool by PCI address, a shared one by
    slot): --allocate asks each resource for the IDs it has, skips the other with a line
    saying so, and exits 0."""
    done = subprocess.run(
        kit_command("serve", "rdma", "--node", "dgx-h100", "--allocate", "0000:18:00.0"),
        capture_output=True, text=True, timeout=120, env=kit_env(),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    exclusive, shared = done.stdout.split("\nrdma/hca_shared\n")
    assert "  Allocate ['0000:18:00.0']:\n    env PCIDEVICE_RDMA_HCA=0000:18:00.0" in exclusive
    assert "  Allocate: none of 0000:18:00.0 is a device of this resource; skipped" in shared


def test_serve_keep_running_prints_each_new_device_list():
    """With --keep-running the driver keeps serving: a fault written into its simulated
    tree arrives as a new list with the device Unhealthy, and Ctrl-C ends it cleanly."""
    import queue
    import signal
    import threading

    process = subprocess.Popen(
        kit_command("serve", "template", "--keep-running"),
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=kit_env(),
    )  # fmt: skip
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in process.stdout], daemon=True).start()

    def wait_for(pattern: str) -> re.Match[str]:
        while True:
            line = lines.get(timeout=60)
            found = re.search(pattern, line)
            if found:
                return found

    try:
        tree = Path(wait_for(r"^  simulated tree: (\S+)$").group(1))
        wait_for(r"^serving; Ctrl-C to stop$")
        (tree / "sys/class/widget/widget1/health").write_text("fault\n")
        wait_for(r"^    widget1 +Unhealthy +numa 1$")
        process.send_signal(signal.SIGINT)
        assert process.wait(30) == 0
    finally:
        process.kill()
        process.wait()


def test_check_command_passes_a_keeping_driver_and_lists_a_breaking_ones_problems(tmp_path):
    """`python -m devicehost.testing check` runs the battery from a shell: exit 0 with the
    counts for the template, exit 1 with the problem for a driver that breaks the
    allocate contract."""
    passed = subprocess.run(
        kit_command("check", "template"), capture_output=True, text=True, timeout=120,
        env=kit_env(),
    )  # fmt: skip
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "driver template: every conformance check passed\n" in passed.stdout
    assert "  example.com/widget: 4 devices, 4 healthy\n" in passed.stdout
    site = tmp_path / "site"
    write_distribution(
        site,
        "devicehost-accepting",
        {"devicehost.drivers": {"accepting": "testdrivers.conformance_cases:Accepting"}},
    )
    failed = subprocess.run(
        kit_command("check", "accepting"), capture_output=True, text=True, timeout=120,
        env=kit_env(site),
    )  # fmt: skip
    assert failed.returncode == 1
    assert "allocate accepted the unknown ID" in failed.stdout


def test_check_on_a_machine_without_the_hardware_says_what_to_type():
    """`check ascend --node dgx-h100` (a machine with no NPU) says so in shell terms: the
    driver has nothing there, and the options that give it something (--node, --root), not
    the Python API's keywords."""
    result = subprocess.run(
        kit_command("check", "ascend", "--node", "dgx-h100"),
        capture_output=True, text=True, timeout=120, env=kit_env(),
    )  # fmt: skip
    assert result.returncode == 1
    assert "driver 'ascend' has nothing to check on the simulated machine 'dgx-h100'" in (
        result.stdout
    )
    assert "--node NAME" in result.stdout and "devicehost demo --list-nodes" in result.stdout
    assert "--root /" in result.stdout
    assert "check_driver" not in result.stdout and "simulated=True" not in result.stdout


def test_serve_an_unknown_node_is_a_config_error():
    """serve refuses a --node no machine has, listing the known ones (exit 2)."""
    result = subprocess.run(
        kit_command("serve", "template", "--node", "nosuch"),
        capture_output=True, text=True, timeout=120, env=kit_env(),
    )  # fmt: skip
    assert result.returncode == 2
    assert "no simulated machine is named 'nosuch'; known: dgx-h100" in result.stdout


def test_where_a_simulation_lives_is_documented_and_true(kubelet, run_host):
    """writing-a-driver.md says where a simulated tree is made and that each driver gets
    its own folder named after it; a running host's tree is there."""
    from devicehost.simulation.trees import SHARED_MEMORY_DIR, SIM_PREFIX, simulation_dir

    section = WRITING.split("### Where a simulation lives", 1)[1].split("\n## ", 1)[0]
    for fact in (
        f"`{SIM_PREFIX}<random>`",
        "`$TMPDIR`",
        f"`{SHARED_MEMORY_DIR}`",
        "`<tree>/<driver>`",
    ):
        assert fact in section, fact
    host = run_host(enabledDrivers=["template"], simulate=True)
    tree = host.simulated_root("template").path
    assert tree.name == "template"
    assert tree.parent.name.startswith(SIM_PREFIX) and tree.parent.parent == simulation_dir()


def test_an_entry_point_change_needs_a_reinstall_says_the_guide():
    """writing-a-driver.md says a changed entry point (module to class) needs the project
    installed again, and the template's pyproject says so beside its entry points."""
    assert "**install the project again**" in WRITING
    assert "module turned into\n`module:ClassName`" in WRITING
    pyproject = (ROOT / "drivers/_template/pyproject.toml").read_text()
    assert "after changing one, install the project again" in pyproject
