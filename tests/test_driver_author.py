"""What a third-party driver author relies on (issue: a stranger's driver works the first
time): the template is standalone, make keeps their driver installed, the kit speaks
devicehost's model and the YAML keys, simulation follows config in a tree per driver and
never inside --root, and the documented surface matches the code."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

import grpc
import pytest

from devicehost import ContainerEdits, Device, DeviceNode, Health, sysfs
from devicehost.errors import ConfigError
from devicehost.testing import FakeRoot
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
    run_host(enabledDrivers=["template"], simulate=True)
    registration = kubelet.wait_registered(WIDGET)
    assert isinstance(registration, Registration)
    assert registration.endpoint == "devicehost-example.com_widget.sock"
    devices = kubelet.wait_devices(WIDGET, lambda d: len(d) == 4)
    assert devices["widget1"] == Device(id="widget1", health=Health.HEALTHY, numa_nodes=(1,))
    containers = kubelet.allocate(WIDGET, [["widget0"], ["widget2", "widget1"]])
    assert containers == (
        ContainerEdits(
            envs={"WIDGET_VISIBLE_DEVICES": "widget0"},
            devices=(DeviceNode(host_path="/dev/widget0"),),
        ),
        ContainerEdits(
            envs={"WIDGET_VISIBLE_DEVICES": "widget2,widget1"},
            devices=(DeviceNode(host_path="/dev/widget2"), DeviceNode(host_path="/dev/widget1")),
        ),
    )
    assert containers.container_responses is containers  # tests written for the wire shape
    assert kubelet.preferred_allocation(WIDGET, ["widget0", "widget1"], size=1) in (
        ["widget0"],
        ["widget1"],
    )
    assert kubelet.options(WIDGET) == PluginOptions(get_preferred_allocation_available=True)
    raw = kubelet.allocate_raw(WIDGET, [["widget3"]])
    assert raw.container_responses[0].devices[0].host_path == "/dev/widget3"


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
